package discovery_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
)

const (
	readme     = "../README.md"
	tableBegin = "<!-- attributes:begin (generated from discovery/attributes.go: go test ./discovery -run TestREADMEAttributeTable -update) -->\n"
	tableEnd   = "<!-- attributes:end -->\n"
)

// attributeTable writes the catalog as the README's Markdown table.
func attributeTable() []byte {
	var b bytes.Buffer
	b.WriteString("| feature | kind | attribute | type | example | meaning |\n| --- | --- | --- | --- | --- | --- |\n")
	last := ""
	for _, a := range discovery.Attributes() {
		feature, kind := "", ""
		if a.Feature != last {
			feature, kind, last = "`"+a.Feature+"`", string(a.Kind), a.Feature
		}
		fmt.Fprintf(&b, "| %s | %s | `%s` | %s | `%s` | %s |\n", feature, kind, a.Name, a.Type, a.Example, a.Doc)
	}
	return b.Bytes()
}

// TestREADMEAttributeTable fails when the README's attribute table is not
// the catalog's; -update rewrites it.
func TestREADMEAttributeTable(t *testing.T) {
	data, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := bytes.Cut(data, []byte(tableBegin))
	current, after, ok2 := bytes.Cut(rest, []byte(tableEnd))
	if !ok || !ok2 {
		t.Fatalf("%s: no %q ... %q section", readme, tableBegin, tableEnd)
	}
	want := attributeTable()
	if bytes.Equal(current, want) {
		return
	}
	if *update {
		out := bytes.Join([][]byte{before, []byte(tableBegin), want, []byte(tableEnd), after}, nil)
		if err := os.WriteFile(readme, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: attribute table is not the catalog's (run go test ./discovery -run %s -update)\n--- want\n%s", readme, t.Name(), want)
}

// TestAttributeCatalog checks the catalog itself: names unique per
// feature, kinds consistent, examples valid for their type, docs on one line.
func TestAttributeCatalog(t *testing.T) {
	seen := make(map[string]bool)
	kinds := make(map[string]discovery.Kind)
	for _, a := range discovery.Attributes() {
		key := a.Feature + "." + a.Name
		if seen[key] {
			t.Errorf("%s is in the catalog twice", key)
		}
		seen[key] = true
		if k, ok := kinds[a.Feature]; ok && k != a.Kind {
			t.Errorf("%s: kind %s, but %s has kind %s", key, a.Kind, a.Feature, k)
		}
		kinds[a.Feature] = a.Kind
		if !a.Type.Valid(a.Example) {
			t.Errorf("%s: example %q is not a %s", key, a.Example, a.Type)
		}
		if a.Doc == "" || strings.ContainsAny(a.Doc, "\n|") {
			t.Errorf("%s: doc %q must be one line without |", key, a.Doc)
		}
	}
}

// TestAttributeValuesHaveTheirType discovers every bundled node and checks
// that each published value is valid for its catalog type, and that every
// published element is in the catalog.
func TestAttributeValuesHaveTheirType(t *testing.T) {
	types := make(map[string]discovery.Type)
	for _, a := range discovery.Attributes() {
		types[a.Feature+"."+a.Name] = a.Type
	}
	check := func(node, feature string, attrs map[string]string) {
		for k, v := range attrs {
			typ, ok := types[feature+"."+k]
			if !ok {
				t.Errorf("%s: %s.%s is published but not in the catalog", node, feature, k)
			} else if !typ.Valid(v) {
				t.Errorf("%s: %s.%s = %q is not a %s", node, feature, k, v, typ)
			}
		}
	}
	for _, name := range fakenode.BundledNames() {
		_, inv := discoverNode(t, name)
		f := discovery.Features(inv)
		for feature, set := range f.Instances {
			for _, e := range set.Elements {
				check(name, feature, e.Attributes)
			}
		}
		for feature, set := range f.Attributes {
			check(name, feature, set.Elements)
		}
		for feature, set := range f.Flags {
			for k := range set.Elements {
				check(name, feature, map[string]string{k: "true"})
			}
		}
	}
}

func TestTypeValid(t *testing.T) {
	for _, tt := range []struct {
		typ  discovery.Type
		good []string
		bad  []string
	}{
		{discovery.TypeInt, []string{"0", "-1", "40960"}, []string{"", "1.0", "x"}},
		{discovery.TypeQuantity, []string{"40960"}, []string{"40Gi"}},
		{discovery.TypeBool, []string{"true", "false"}, []string{"", "1", "True"}},
		{discovery.TypeVersion, []string{"570", "12.8", "570.86.15"}, []string{"", discovery.Unknown, "12.570.86.15", "1..2"}},
		{discovery.TypeString, []string{"", "x"}, nil},
	} {
		for _, v := range tt.good {
			if !tt.typ.Valid(v) {
				t.Errorf("%s.Valid(%q) = false, want true", tt.typ, v)
			}
		}
		for _, v := range tt.bad {
			if tt.typ.Valid(v) {
				t.Errorf("%s.Valid(%q) = true, want false", tt.typ, v)
			}
		}
	}
}

// TestAttributeGetMatchesFeatures checks the accessor DRA will use against
// the published features: Get of every catalog attribute on every item
// gives what Features publishes, and Value parses it as its type.
func TestAttributeGetMatchesFeatures(t *testing.T) {
	_, inv := discoverNode(t, "dgx-a100")
	f := discovery.Features(inv)
	gpus, migs := f.Instances[discovery.FeatureGPU].Elements, f.Instances[discovery.FeatureMIG].Elements
	for _, a := range discovery.Attributes() {
		var items []discovery.Item
		var want []map[string]string
		switch a.Feature {
		case discovery.FeatureGPU:
			for i := range inv.GPUs {
				items = append(items, discovery.Item{Inventory: inv, GPU: &inv.GPUs[i]})
				want = append(want, gpus[i].Attributes)
			}
		case discovery.FeatureMIG:
			k := 0
			for i := range inv.GPUs {
				for j := range inv.GPUs[i].MIGDevices {
					items = append(items, discovery.Item{Inventory: inv, GPU: &inv.GPUs[i], MIG: &inv.GPUs[i].MIGDevices[j]})
					want = append(want, migs[k].Attributes)
					k++
				}
			}
		case discovery.FeatureDriver:
			items, want = []discovery.Item{{Inventory: inv}}, []map[string]string{f.Attributes[a.Feature].Elements}
		case discovery.FeatureCapabilities:
			flags := make(map[string]string)
			for k := range f.Flags[a.Feature].Elements {
				flags[k] = "true"
			}
			items, want = []discovery.Item{{Inventory: inv}}, []map[string]string{flags}
		}
		for i, it := range items {
			got, ok := a.Get(it)
			w, published := want[i][a.Name]
			if ok != published || got != w {
				t.Errorf("%s.%s of item %d: Get = %q, %v; published %q, %v", a.Feature, a.Name, i, got, ok, w, published)
			}
			if _, valid := a.Value(it); ok && !valid {
				t.Errorf("%s.%s of item %d: Value of %q is not a %s", a.Feature, a.Name, i, got, a.Type)
			}
		}
	}
	// A version NVML could not read is published, but has no typed value.
	odd := oddInventory()
	for _, a := range discovery.Attributes() {
		if a.Feature == discovery.FeatureDriver && a.Name == discovery.AttrCUDAVersion {
			if s, ok := a.Get(discovery.Item{Inventory: odd}); !ok || s != discovery.Unknown {
				t.Errorf("cuda.version of an unknown CUDA version: Get = %q, %v", s, ok)
			}
			if v, ok := a.Value(discovery.Item{Inventory: odd}); ok {
				t.Errorf("cuda.version of an unknown CUDA version: Value = %+v, want none", v)
			}
		}
	}
}
