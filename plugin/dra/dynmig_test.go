package dra

import (
	"slices"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/discovery/migplace"
	"github.com/featureplug/featureplug/plugin/migpartition"
	"github.com/featureplug/featureplug/rules/plan"
)

// dynPlan partitions GPU 0 of sliceInventory on demand, offering 1g.10gb
// and 3g.40gb and the whole GPU.
func dynPlan(t *testing.T) *plan.Plan {
	t.Helper()
	geo, ok := migplace.ProductByName("NVIDIA A100-SXM4-80GB")
	if !ok {
		t.Fatal("no A100-SXM4-80GB in migplace")
	}
	g := plan.DynamicGPU{UUID: sliceGPU0, Index: 0, Product: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Rule: "dyn",
		WholeGPU: "example.com/gpu", Capacity: migplace.Capacity(geo.Profiles)}
	for _, p := range geo.Profiles {
		if p.Name != "1g.10gb" && p.Name != "3g.40gb" {
			continue
		}
		ci, _ := p.FullComputeInstance()
		g.Profiles = append(g.Profiles, plan.DynamicProfile{Profile: p, Resource: "example.com/mig-" + p.Name, ComputeInstanceProfile: ci})
	}
	p := &plan.Plan{DynamicMIG: []plan.DynamicGPU{g}}
	for _, r := range []string{"example.com/gpu", "example.com/mig-1g.10gb", "example.com/mig-3g.40gb"} {
		p.Resources = append(p.Resources, plan.Resource{Name: r, Serve: plan.ServeDRA, Dynamic: true})
	}
	return p
}

func TestBuildSliceDynamic(t *testing.T) {
	inv := sliceInventory()
	b, err := BuildSlice(inv, dynPlan(t), BuildOptions{CDIKind: "example.com/gpu", Unhealthy: Unhealthy{}})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Slices) != 2 || len(b.Slices[0].SharedCounters) != 1 || len(b.Slices[0].Devices) != 0 || len(b.Slices[1].SharedCounters) != 0 {
		t.Fatalf("slices %+v, want one counter-set slice, then one device slice", b.Slices)
	}
	devs := b.Slices[1].Devices
	// The whole GPU, 7 placements of 1g.10gb, 2 of 3g.40gb.
	if len(devs) != 10 {
		t.Fatalf("%d devices, want 10", len(devs))
	}
	whole := draattr.DeviceName(sliceGPU0)
	for _, d := range devs {
		res := *d.Attributes[draattr.AttrResource].StringValue
		a, ok := b.Table.Lookup(d.Name)
		if !ok || a.Partition == nil || a.Resource != res || len(a.CDIDevices) != 0 {
			t.Errorf("device %s: table entry %+v", d.Name, a)
			continue
		}
		if len(d.ConsumesCounters) != 1 {
			t.Errorf("device %s consumes %+v", d.Name, d.ConsumesCounters)
		}
		if d.Name == whole {
			if res != "example.com/gpu" || !a.Partition.Whole || *d.Attributes[draattr.AttrType].StringValue != draattr.TypeGPU {
				t.Errorf("whole GPU device %s: resource %s, %+v", d.Name, res, a.Partition)
			}
			continue
		}
		if *d.Attributes[draattr.AttrType].StringValue != draattr.TypeMIG || d.Attributes["profile"].StringValue == nil {
			t.Errorf("placement %s: attributes %v", d.Name, d.Attributes)
		}
		if _, ok := d.Attributes["uuid"]; ok {
			t.Errorf("placement %s has a uuid attribute before any MIG device exists", d.Name)
		}
		if _, ok := d.Capacity[draattr.CapMemory]; !ok {
			t.Errorf("placement %s has no memory capacity", d.Name)
		}
		prof := *d.Attributes["profile"].StringValue
		if !strings.HasSuffix(res, prof) || a.Partition.Target.Profile != prof || int64(a.Partition.Target.Placement.Start) != *d.Attributes[AttrPlacementStart].IntValue {
			t.Errorf("placement %s: resource %s, profile %s, target %+v", d.Name, res, prof, a.Partition.Target)
		}
	}
}

func TestBuildSliceDynamicTaints(t *testing.T) {
	inv := sliceInventory()
	p := dynPlan(t)
	const created = "MIG-created-0000"
	p.DynamicMIG[0].Existing = []plan.ExistingMIG{{UUID: created, Profile: "3g.40gb", ProfileID: 9, Placement: migplace.Placement{Start: 4, Size: 4}, Whole: true}}
	mine := func(_, uuid string, _ migplace.Placement) bool { return uuid == created }
	b, err := BuildSlice(inv, p, BuildOptions{CDIKind: "example.com/gpu", Unhealthy: Unhealthy{created: "xid-94"}, Created: mine})
	if err != nil {
		t.Fatal(err)
	}
	var tainted []string
	for _, s := range b.Slices {
		for _, d := range s.Devices {
			if len(d.Taints) > 0 {
				tainted = append(tainted, d.Name)
			}
		}
	}
	want := []string{migpartition.PlacementDeviceName(sliceGPU0, "3g.40gb", 9, 4)}
	if !slices.Equal(tainted, want) {
		t.Errorf("tainted %v, want exactly the placement of the unhealthy MIG device %v", tainted, want)
	}
	// A MIG device featureplug did not create withholds the GPU.
	b, err = BuildSlice(inv, p, BuildOptions{CDIKind: "example.com/gpu"})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Slices) != 0 || len(b.Withheld) != 1 {
		t.Errorf("with a foreign MIG device: slices %d, withheld %+v; want none and the GPU withheld", len(b.Slices), b.Withheld)
	}
}
