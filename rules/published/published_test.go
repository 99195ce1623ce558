package published

import (
	"reflect"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/catalog"
)

// TestRebuildEveryCatalogNode rebuilds every bundled fake node and every
// synthetic catalog node from its features and checks that each builtin
// rules file makes the same plan of the rebuilt inventory as of the real
// one, links aside (they are not published).
func TestRebuildEveryCatalogNode(t *testing.T) {
	nodes, err := catalog.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	var sets []*rules.RuleSet
	for _, name := range rules.BuiltinNames() {
		rs, err := rules.Load(name)
		if err != nil {
			t.Fatal(err)
		}
		sets = append(sets, rs)
	}
	labels := map[string]string{"pool": "inference"}
	for _, n := range nodes {
		got, err := Rebuild(discovery.Features(n.Inventory))
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		if len(got.Gaps) > 0 {
			t.Errorf("%s: gaps:\n%s", n.Name, strings.Join(got.Gaps, "\n"))
		}
		if !reflect.DeepEqual(discovery.Features(got.Inventory), discovery.Features(n.Inventory)) {
			t.Errorf("%s: the rebuilt inventory publishes other features", n.Name)
		}
		for _, rs := range sets {
			want, wantErr := rs.Plan(n.Inventory, labels)
			have, haveErr := rs.Plan(got.Inventory, labels)
			if (wantErr == nil) != (haveErr == nil) {
				t.Errorf("%s, %s: plan error %v, rebuilt %v", n.Name, rs.Source(), wantErr, haveErr)
				continue
			}
			if wantErr != nil {
				continue
			}
			want.Links, have.Links = nil, nil
			if !reflect.DeepEqual(want, have) {
				t.Errorf("%s, %s: the rebuilt inventory gives another plan", n.Name, rs.Source())
			}
		}
	}
}

// TestRebuildGaps checks that what cannot be read back is named.
func TestRebuildGaps(t *testing.T) {
	nodes, err := catalog.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	var inv *discovery.Inventory
	for _, n := range nodes {
		if n.Name == "fake node dgx-a100" {
			inv = n.Inventory
		}
	}
	if inv == nil {
		t.Fatal("no fake node dgx-a100 in the catalog")
	}
	f := discovery.Features(inv)
	gpus := f.Instances[discovery.FeatureGPU].Elements
	delete(gpus[1].Attributes, discovery.AttrProduct)
	gpus[2].Attributes["future.attribute"] = "x"
	gpus[3].Attributes[discovery.AttrMemory] = "lots"
	migs := f.Instances[discovery.FeatureMIG].Elements
	migs[0].Attributes[discovery.AttrParentUUID] = "GPU-none"

	got, err := Rebuild(f)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(got.Gaps, "\n")
	for _, want := range []string{
		"nvidia.gpu instance 1 (" + inv.GPUs[1].UUID + "): attribute product is not published",
		"nvidia.gpu instance 2 (" + inv.GPUs[2].UUID + `): attribute future.attribute="x" is not known`,
		`nvidia.gpu instance 3: attribute memory: "lots" is not a size in MiB`,
		`nvidia.mig instance 0: parent.uuid "GPU-none" is no published GPU`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("gaps lack %q:\n%s", want, text)
		}
	}

	if _, err := Rebuild(discovery.Features(&discovery.Inventory{})); err != nil {
		t.Errorf("a node without GPUs: %v", err)
	}
	f = discovery.Features(inv)
	delete(f.Instances, discovery.FeatureGPU)
	if _, err := Rebuild(f); err == nil || !strings.Contains(err.Error(), "no nvidia.gpu feature") {
		t.Errorf("features without nvidia.gpu: %v", err)
	}
}

// derived are the catalog attributes Rebuild does not read because they
// follow from others (the round trip in Rebuild checks them).
var derived = map[string]bool{
	"nvidia.gpu.mig.count":     true,
	"nvidia.driver.major":      true,
	"nvidia.driver.cuda.major": true,
	"nvidia.driver.cuda.minor": true,
	"nvidia.driver.gpu.count":  true,
	// A MIG device's parent attributes are its GPU's.
	"nvidia.mig.parent.product":       true,
	"nvidia.mig.parent.family":        true,
	"nvidia.mig.parent.memory":        true,
	"nvidia.mig.parent.numa":          true,
	"nvidia.mig.parent.compute.major": true,
}

// TestRebuildReadsEveryAttribute fails when the attribute catalog grows an
// attribute Rebuild neither reads nor derives: rules reading it would
// otherwise be evaluated on a zero value.
func TestRebuildReadsEveryAttribute(t *testing.T) {
	nodes, err := catalog.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	r := &rebuilder{read: map[string]bool{}}
	mig, vfio := false, false
	for _, n := range nodes {
		if (!mig && n.Inventory.MIGDeviceCount() > 0) || (!vfio && len(n.Inventory.VFIO) > 0) {
			if _, err := rebuildWith(r, discovery.Features(n.Inventory)); err != nil {
				t.Fatal(err)
			}
			mig = mig || n.Inventory.MIGDeviceCount() > 0
			vfio = vfio || len(n.Inventory.VFIO) > 0
		}
	}
	if !mig || !vfio {
		t.Fatal("the catalog lacks a node with MIG devices or one with VFIO devices")
	}
	for _, a := range discovery.Attributes() {
		if a.Kind == discovery.KindFlags {
			continue
		}
		key := a.Feature + "." + a.Name
		if !r.read[key] && !derived[key] {
			t.Errorf("attribute %s is neither read back by Rebuild nor derived from others", key)
		}
	}
}
