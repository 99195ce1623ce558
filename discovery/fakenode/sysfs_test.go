package fakenode_test

import (
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
)

// TestSysfsPCIeRoots checks the PCIe roots discovery reads from the fake
// node's sysfs: one per GPU where no GPUs share a PCIe switch or host
// bridge, shared by the GPUs of a PIX, PXB or PHB group, and the GPU
// instance placements of MIG devices.
func TestSysfsPCIeRoots(t *testing.T) {
	for _, c := range []struct {
		node string
		want []string
	}{
		// Each GPU behind its own ConnectX-7 switch on a CPU root port.
		{"dgx-h100", []string{"pci0000:00", "pci0000:10", "pci0000:20", "pci0000:30", "pci0000:40", "pci0000:50", "pci0000:60", "pci0000:70"}},
		// GPU pairs behind PCIe switches (PIX).
		{"hgx-b200", []string{"pci0000:00", "pci0000:00", "pci0000:20", "pci0000:20", "pci0000:40", "pci0000:40", "pci0000:60", "pci0000:60"}},
	} {
		n, err := fakenode.Open(c.node)
		if err != nil {
			t.Fatal(err)
		}
		inv, err := discovery.Discover(n.NVML())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, g := range inv.GPUs {
			got = append(got, g.PCIeRoot)
		}
		if len(got) != len(c.want) {
			t.Fatalf("%s: roots %v, want %v", c.node, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: GPU %d (%s) has PCIe root %q, want %q", c.node, i, inv.GPUs[i].PCIBusID, got[i], c.want[i])
			}
		}
	}
}

// TestMIGPlacement checks the GPU instance profile and placement discovery
// reads for the MIG devices of h200-mig's balanced layout.
func TestMIGPlacement(t *testing.T) {
	n, err := fakenode.Open("h200-mig")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := discovery.Discover(n.NVML())
	if err != nil {
		t.Fatal(err)
	}
	type place struct{ profile, start, size int }
	got := map[string][]place{}
	for _, m := range inv.GPUs[0].MIGDevices {
		got[m.Profile] = append(got[m.Profile], place{m.GIProfileID, m.PlacementStart, m.PlacementSize})
	}
	t.Logf("GPU 0: %+v", got)
	for profile, ps := range got {
		for _, p := range ps {
			if p.size == 0 || p.start < 0 || p.start+p.size > 8 {
				t.Errorf("%s: placement %+v is not one of 8 memory slices", profile, p)
			}
		}
	}
	// NVML's GPU instance profile IDs: 1g (19), 2g (14), 3g (9).
	for profile, id := range map[string]int{"1g.18gb": 19, "2g.35gb": 14, "3g.71gb": 9} {
		for _, p := range got[profile] {
			if p.profile != id {
				t.Errorf("%s: GPU instance profile ID %d, want %d", profile, p.profile, id)
			}
		}
	}
}
