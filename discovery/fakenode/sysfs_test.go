package fakenode_test

import (
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
)

// TestSysfsPCIeRoots checks the PCIe roots discovery reads from the fake
// node's sysfs: one per GPU where no GPUs share a PCIe switch or host
// bridge, shared by the GPUs of a PIX, PXB or PHB group.
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
