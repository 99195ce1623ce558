package discovery

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/fakenode"
)

// TestModeAndClique checks GPU.Mode (gpu-feature-discovery's gpu.mode, the
// PCI class) and GPU.Clique (gpu.clique, the multi-node fabric) through
// the fake node's NVML: a graphics-mode GPU, fabric-attached GPUs, an
// NVSwitch baseboard that is not attached (zero cluster UUID), PCIe GPUs
// that have no fabric, and an older driver without GetPciInfoExt.
func TestModeAndClique(t *testing.T) {
	const clique = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.3"
	tests := []struct {
		name       string
		node       func(t *testing.T) *fakenode.Node
		wantModes  []string
		wantClique string
		nvlinks    int
	}{
		{name: "rack node on a multi-node fabric", node: func(t *testing.T) *fakenode.Node {
			n, err := fakenode.Load("testdata/fabric/gb200-rack-node.yaml")
			if err != nil {
				t.Fatal(err)
			}
			return n
		}, wantModes: []string{ModeCompute, ModeCompute, ModeCompute, ModeCompute}, wantClique: clique, nvlinks: 18},
		{name: "single HGX baseboard", node: named("dgx-h100"), wantModes: repeat(ModeCompute, 8), nvlinks: 18},
		{name: "graphics mode", node: func(t *testing.T) *fakenode.Node {
			n, err := fakenode.Parse("inline", []byte(`name: ws
driverVersion: "570.86.15"
cudaVersion: "12.8"
gpus:
  - product: L40S
    mode: graphics
  - product: L40S
`))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}, wantModes: []string{ModeGraphics, ModeCompute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, err := Discover(tt.node(t).NVML())
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.GPUs) != len(tt.wantModes) {
				t.Fatalf("%d GPUs, want %d", len(inv.GPUs), len(tt.wantModes))
			}
			for i, g := range inv.GPUs {
				if g.Mode != tt.wantModes[i] {
					t.Errorf("GPU %d mode %q, want %q", i, g.Mode, tt.wantModes[i])
				}
				if g.Clique != tt.wantClique {
					t.Errorf("GPU %d clique %q, want %q", i, g.Clique, tt.wantClique)
				}
				if g.NVLinks != tt.nvlinks {
					t.Errorf("GPU %d has %d NVLinks, want %d", i, g.NVLinks, tt.nvlinks)
				}
			}
			if tt.nvlinks > 0 && inv.Links[0][1].NVLinks != tt.nvlinks {
				t.Errorf("GPUs 0 and 1 linked by %d lanes, want %d (the fabric answer must still mean the switch)", inv.Links[0][1].NVLinks, tt.nvlinks)
			}
		})
	}
}

// TestModeOlderDriver: without nvmlDeviceGetPciInfoExt (drivers before
// R520) the mode is unknown and GetPciInfo still gives the bus ID; without
// nvmlDeviceGetGpuFabricInfo nothing asks for the fabric.
func TestModeOlderDriver(t *testing.T) {
	n := newMockNode()
	inv, err := discoverMock(t, n)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range inv.GPUs {
		if g.Mode != Unknown || g.Clique != "" || g.PCIBusID == "" {
			t.Errorf("GPU %d: mode %q, clique %q, bus %q; want unknown, none and a bus ID", i, g.Mode, g.Clique, g.PCIBusID)
		}
	}
}

func named(name string) func(t *testing.T) *fakenode.Node {
	return func(t *testing.T) *fakenode.Node {
		n, err := fakenode.Named(name)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestRubinThroughNVML: a GPU of compute capability 13 is family rubin in
// the inventory, which labels and features both read (one family table).
func TestRubinThroughNVML(t *testing.T) {
	n := newMockNode()
	for _, g := range n.gpus {
		g.GetCudaComputeCapabilityFunc = func() (int, int, nvml.Return) { return 13, 0, nvml.SUCCESS }
	}
	inv, err := discoverMock(t, n)
	if err != nil {
		t.Fatal(err)
	}
	if f := inv.GPUs[0].Family; f != "rubin" {
		t.Errorf("family %q, want rubin", f)
	}
}
