package discovery_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
)

// discoverNode discovers a bundled or file fake node.
func discoverNode(t testing.TB, name string) (*fakenode.Node, *discovery.Inventory) {
	t.Helper()
	node, err := fakenode.Open(name)
	if err != nil {
		t.Fatalf("fakenode.Open(%q): %v", name, err)
	}
	lib := node.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	t.Cleanup(func() { _ = lib.Shutdown() })
	inv, err := discovery.Discover(lib)
	if err != nil {
		t.Fatalf("Discover(%s): %v", name, err)
	}
	return node, inv
}

func migProfiles(g discovery.GPU) []string {
	var out []string
	for _, m := range g.MIGDevices {
		out = append(out, m.Profile)
	}
	return out
}

func TestDiscoverBundledNodes(t *testing.T) {
	tests := []struct {
		node         string
		gpus         int
		migDevices   int
		product      string
		family       string
		memoryMiB    uint64
		migEnabled   []int
		profiles     map[int][]string
		numa         map[int]int
		nvlinks      map[[2]int]int // pair -> lanes
		pcie         map[[2]int]discovery.PCIeLevel
		capabilities []string
	}{
		{
			node: "dgx-a100", gpus: 8, migDevices: 16, product: "NVIDIA A100-SXM4-40GB", family: "ampere", memoryMiB: 40960,
			migEnabled: []int{0, 1, 2, 3},
			profiles: map[int][]string{
				0: {"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"},
				2: {"2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb"},
				4: nil,
			},
			numa:         map[int]int{0: 0, 3: 0, 4: 1, 7: 1},
			nvlinks:      map[[2]int]int{{0, 1}: 12, {0, 7}: 12, {3, 4}: 12},
			pcie:         map[[2]int]discovery.PCIeLevel{{0, 1}: discovery.PCIeMultiple, {0, 2}: discovery.PCIeNode, {0, 4}: discovery.PCIeSystem},
			capabilities: []string{"mig", "mig.enabled", "mps", "nvlink"},
		},
		{
			node: "dgx-h100", gpus: 8, migDevices: 0, product: "NVIDIA H100 80GB HBM3", family: "hopper", memoryMiB: 81559,
			numa: map[int]int{0: 0, 3: 0, 4: 1, 7: 1},
			// NVSwitch all-to-all: NV18 between every pair.
			nvlinks:      map[[2]int]int{{0, 1}: 18, {2, 3}: 18, {4, 7}: 18, {0, 4}: 18, {3, 5}: 18, {0, 7}: 18},
			pcie:         map[[2]int]discovery.PCIeLevel{{0, 1}: discovery.PCIeNode, {0, 3}: discovery.PCIeNode, {0, 4}: discovery.PCIeSystem, {5, 6}: discovery.PCIeNode},
			capabilities: []string{"mig", "mps", "nvlink"},
		},
		{
			node: "hgx-b200", gpus: 8, migDevices: 0, product: "NVIDIA B200", family: "blackwell", memoryMiB: 183359,
			numa:         map[int]int{0: 0, 3: 0, 4: 1, 7: 1},
			nvlinks:      map[[2]int]int{{0, 1}: 18, {0, 7}: 18, {3, 4}: 18},
			pcie:         map[[2]int]discovery.PCIeLevel{{0, 1}: discovery.PCIeSingle, {6, 7}: discovery.PCIeSingle, {1, 2}: discovery.PCIeNode, {3, 4}: discovery.PCIeSystem},
			capabilities: []string{"mig", "mps", "nvlink"},
		},
		{
			node: "h100-nvl", gpus: 4, migDevices: 0, product: "NVIDIA H100 NVL", family: "hopper", memoryMiB: 95830,
			numa:         map[int]int{0: 0, 1: 0, 2: 1, 3: 1},
			nvlinks:      map[[2]int]int{{0, 1}: 12, {2, 3}: 12, {0, 2}: 0, {1, 3}: 0},
			pcie:         map[[2]int]discovery.PCIeLevel{{0, 1}: discovery.PCIeNode, {1, 2}: discovery.PCIeSystem},
			capabilities: []string{"mig", "mps", "nvlink"},
		},
		{
			node: "h200-mig", gpus: 2, migDevices: 8, product: "NVIDIA H200", family: "hopper", memoryMiB: 143771,
			migEnabled:   []int{0, 1},
			profiles:     map[int][]string{0: {"3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"}},
			capabilities: []string{"mig", "mig.enabled", "mps", "nvlink"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.node, func(t *testing.T) {
			_, inv := discoverNode(t, tt.node)
			if len(inv.GPUs) != tt.gpus || inv.MIGDeviceCount() != tt.migDevices {
				t.Fatalf("got %d GPUs and %d MIG devices, want %d and %d", len(inv.GPUs), inv.MIGDeviceCount(), tt.gpus, tt.migDevices)
			}
			if inv.DriverVersion != "570.86.15" || inv.CUDADriverVersion != "12.8" {
				t.Errorf("driver %q CUDA %q", inv.DriverVersion, inv.CUDADriverVersion)
			}
			uuids := map[string]bool{}
			for i, g := range inv.GPUs {
				if g.Index != i || g.Product != tt.product || g.Family != tt.family || g.MemoryMiB != tt.memoryMiB {
					t.Errorf("GPU %d = index %d %q %q %d MiB", i, g.Index, g.Product, g.Family, g.MemoryMiB)
				}
				if !g.MIGCapable || g.MIGEnabled != slices.Contains(tt.migEnabled, i) {
					t.Errorf("GPU %d MIG capable %v enabled %v", i, g.MIGCapable, g.MIGEnabled)
				}
				if g.ComputeMode != "Default" || g.PCIBusID == "" || g.Architecture == discovery.Unknown {
					t.Errorf("GPU %d compute mode %q PCI %q arch %q", i, g.ComputeMode, g.PCIBusID, g.Architecture)
				}
				for _, id := range append([]string{g.UUID}, func() (ids []string) {
					for _, m := range g.MIGDevices {
						if m.ParentUUID != g.UUID || m.ParentIndex != i {
							t.Errorf("MIG %s has parent %s/%d, want %s/%d", m.UUID, m.ParentUUID, m.ParentIndex, g.UUID, i)
						}
						ids = append(ids, m.UUID)
					}
					return ids
				}()...) {
					if uuids[id] {
						t.Errorf("duplicate UUID %s", id)
					}
					uuids[id] = true
				}
			}
			for i, want := range tt.profiles {
				if got := migProfiles(inv.GPUs[i]); !slices.Equal(got, want) {
					t.Errorf("GPU %d MIG profiles = %v, want %v", i, got, want)
				}
			}
			for i, want := range tt.numa {
				if inv.GPUs[i].NUMANode != want {
					t.Errorf("GPU %d NUMA = %d, want %d", i, inv.GPUs[i].NUMANode, want)
				}
			}
			for pair, want := range tt.nvlinks {
				if got := inv.Links[pair[0]][pair[1]].NVLinks; got != want {
					t.Errorf("NVLinks %v = %d, want %d", pair, got, want)
				}
				if inv.Links[pair[1]][pair[0]] != inv.Links[pair[0]][pair[1]] {
					t.Errorf("link matrix not symmetric at %v", pair)
				}
			}
			for pair, want := range tt.pcie {
				if got := inv.Links[pair[0]][pair[1]].PCIe; got != want {
					t.Errorf("PCIe %v = %q, want %q", pair, got, want)
				}
			}
			flags := discovery.Features(inv).Flags[discovery.FeatureCapabilities].Elements
			var got []string
			for f := range flags {
				got = append(got, f)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.capabilities) {
				t.Errorf("capabilities = %v, want %v", got, tt.capabilities)
			}
		})
	}
}

func TestDiscoverMIGDeviceFacts(t *testing.T) {
	_, inv := discoverNode(t, "h200-mig")
	m := inv.GPUs[0].MIGDevices[0]
	want := discovery.MIGDevice{
		ParentIndex: 0, ParentUUID: inv.GPUs[0].UUID, Index: 0, GPUInstanceID: m.GPUInstanceID, ComputeInstanceID: 0,
		UUID: m.UUID, Profile: "3g.71gb", MemoryMiB: 71168, Multiprocessors: 60, GISlices: 3, CISlices: 3,
		Engines: discovery.Engines{Copy: 3, Decoder: 3, JPEG: 3},
	}
	if m != want {
		t.Errorf("MIG device 0:0 = %+v\nwant %+v", m, want)
	}
}

func TestFeaturesOfBundledNode(t *testing.T) {
	_, inv := discoverNode(t, "dgx-a100")
	f := discovery.Features(inv)
	gpus := f.Instances[discovery.FeatureGPU].Elements
	migs := f.Instances[discovery.FeatureMIG].Elements
	if len(gpus) != 8 || len(migs) != 16 {
		t.Fatalf("%d gpu and %d mig instances, want 8 and 16", len(gpus), len(migs))
	}
	g0 := gpus[0].Attributes
	for k, want := range map[string]string{
		"index": "0", "product": "NVIDIA A100-SXM4-40GB", "family": "ampere", "architecture": "Ampere",
		"compute.major": "8", "compute.minor": "0", "memory": "40960", "mig.capable": "true", "mig.enabled": "true",
		"mig.count": "4", "numa": "0", "pci.bus": "0000:07:00.0", "uuid": inv.GPUs[0].UUID,
		// 12 active NVLinks (all to the NVSwitches), reaching the 7 other GPUs.
		"nvlinks": "12", "nvlink.peers": "7",
	} {
		if g0[k] != want {
			t.Errorf("nvidia.gpu[0].%s = %q, want %q", k, g0[k], want)
		}
	}
	m0 := migs[0].Attributes
	for k, want := range map[string]string{
		"profile": "3g.20gb", "memory": "19968", "multiprocessors": "42", "slices.gi": "3", "slices.ci": "3",
		"parent.uuid": inv.GPUs[0].UUID, "parent.index": "0", "parent.product": "NVIDIA A100-SXM4-40GB",
	} {
		if m0[k] != want {
			t.Errorf("nvidia.mig[0].%s = %q, want %q", k, m0[k], want)
		}
	}
	drv := f.Attributes[discovery.FeatureDriver].Elements
	if drv["version"] != "570.86.15" || drv["cuda.version"] != "12.8" || drv["major"] != "570" {
		t.Errorf("nvidia.driver = %v", drv)
	}
	// Names are lowercase with one dot, as NFD requires.
	for _, name := range []string{discovery.FeatureGPU, discovery.FeatureMIG, discovery.FeatureDriver, discovery.FeatureCapabilities} {
		if strings.Count(name, ".") != 1 || strings.ToLower(name) != name {
			t.Errorf("feature %q must be lowercase with exactly one dot", name)
		}
	}
}

// BenchmarkDiscover discovers an 8-GPU node with MIG devices on every GPU.
func BenchmarkDiscover(b *testing.B) {
	node, err := fakenode.Load("testdata/eight-mig.yaml")
	if err != nil {
		b.Fatal(err)
	}
	lib := node.NVML()
	_ = lib.Init()
	defer func() { _ = lib.Shutdown() }()
	b.ReportAllocs()
	for b.Loop() {
		inv, err := discovery.Discover(lib)
		if err != nil {
			b.Fatal(err)
		}
		if inv.MIGDeviceCount() != 56 {
			b.Fatalf("%d MIG devices, want 56", inv.MIGDeviceCount())
		}
	}
}

// TestFeaturesWithoutMIGHaveEmptyInstanceLists guards the NodeFeature API's
// rule that instance lists are present: null elements are refused.
func TestFeaturesWithoutMIGHaveEmptyInstanceLists(t *testing.T) {
	_, inv := discoverNode(t, "dgx-h100")
	data, err := json.Marshal(discovery.Features(inv))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "null") {
		t.Errorf("features of a node without MIG devices contain null: %s", data)
	}
	if !strings.Contains(string(data), `"nvidia.mig":{"elements":[]}`) {
		t.Errorf("nvidia.mig is not an empty instance list: %s", data)
	}
}
