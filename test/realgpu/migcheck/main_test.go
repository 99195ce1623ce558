package main

import (
	"context"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
)

// TestCheckOnFakeNode is migcheck's dry run on fake nodes: it creates and
// destroys every placement, probes NVML's refusals, and leaves each GPU as
// it found it (MIG mode disabled again, no instance); a GPU with MIG
// devices it did not create is skipped, untouched.
func TestCheckOnFakeNode(t *testing.T) {
	n, err := fakenode.Named("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	lib := n.NVML()
	rep, err := check(context.Background(), lib, options{gpu: 2, allowMode: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.GPUs) != 1 {
		t.Fatalf("%d GPUs checked, want GPU 2", len(rep.GPUs))
	}
	g := rep.GPUs[0]
	if g.Skipped != "" || !g.ModeEnabled || len(g.Failures) > 0 || g.CatalogDiffers != "" {
		t.Fatalf("report %+v", g)
	}
	if len(g.Placements) != 25 {
		t.Errorf("%d placements created, want 25", len(g.Placements))
	}
	for _, p := range g.Placements {
		if !p.Discovered || p.UUID == "" {
			t.Errorf("placement %+v", p)
		}
	}
	want := map[string]string{
		ProbeOccupied:     nvml.ERROR_INSUFFICIENT_RESOURCES.Error(),
		ProbeNotOffered:   nvml.ERROR_INVALID_ARGUMENT.Error(),
		ProbeSecondME:     nvml.ERROR_INSUFFICIENT_RESOURCES.Error(),
		ProbeDestroyInUse: nvml.ERROR_IN_USE.Error(),
	}
	if len(g.Probes) != len(want) {
		t.Errorf("probes %+v", g.Probes)
	}
	for _, p := range g.Probes {
		if p.Got != want[p.What] {
			t.Errorf("probe %q: %s, want %s", p.What, p.Got, want[p.What])
		}
	}
	inv, err := discovery.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	if gpu := inv.GPUs[2]; gpu.MIGEnabled || len(gpu.MIGDevices) > 0 {
		t.Errorf("GPU 2 left with MIG %v, %d MIG devices", gpu.MIGEnabled, len(gpu.MIGDevices))
	}

	// A GPU with MIG devices is left alone; without -allow-mig-mode a GPU
	// with MIG disabled is too.
	mixed, err := fakenode.Named("a100-80gb-mixed")
	if err != nil {
		t.Fatal(err)
	}
	rep, err = check(context.Background(), mixed.NVML(), options{gpu: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range rep.GPUs {
		if g.Skipped == "" || len(g.Placements) > 0 {
			t.Errorf("GPU %d was touched: %+v", g.Index, g)
		}
	}
	before, _ := mixed.MIGInstances(0)
	if len(before) == 0 {
		t.Fatal("a100-80gb-mixed GPU 0 has no MIG devices to keep")
	}
}
