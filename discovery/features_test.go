package discovery_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/features and the README's attribute table")

// oddInventory has what real nodes sometimes report: versions NVML could not
// read or that have no dot, a lost GPU with most facts missing, and no link
// matrix.
func oddInventory() *discovery.Inventory {
	return &discovery.Inventory{
		DriverVersion:     "570",
		CUDADriverVersion: discovery.Unknown,
		NVMLVersion:       discovery.Unknown,
		GPUs: []discovery.GPU{
			{Index: 0, Minor: 0, UUID: "GPU-0", Product: "NVIDIA L4", Brand: "Nvidia", Architecture: "Ada Lovelace",
				Family: "ada-lovelace", ComputeMajor: 8, ComputeMinor: 9, MemoryMiB: 23034, PCIBusID: "0000:01:00.0",
				NUMANode: discovery.NoNUMANode, ComputeMode: discovery.Unknown},
			{Index: 1, Minor: 1, UUID: "GPU-1", Product: discovery.Unknown, Brand: discovery.Unknown,
				Architecture: discovery.Unknown, Family: discovery.Unknown, NUMANode: discovery.NoNUMANode,
				ComputeMode: discovery.Unknown, Lost: true},
		},
		LostGPUs: []int{2},
	}
}

// TestFeaturesGolden pins the features of every bundled fake node, byte for
// byte as they are published (JSON of the NodeFeature's spec.features).
// Adding an attribute changes them: rewrite with -update after checking.
func TestFeaturesGolden(t *testing.T) {
	nodes := append(fakenode.BundledNames(), "testdata/eight-mig.yaml")
	for _, name := range nodes {
		_, inv := discoverNode(t, name)
		checkFeaturesGolden(t, strings.TrimSuffix(filepath.Base(name), ".yaml"), inv)
	}
	checkFeaturesGolden(t, "odd", oddInventory())
}

func checkFeaturesGolden(t *testing.T, name string, inv *discovery.Inventory) {
	t.Helper()
	got, err := json.MarshalIndent(discovery.Features(inv), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", "features", name+".json")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./discovery -run TestFeaturesGolden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("features of %s differ from %s (run with -update after checking the change)\n--- got\n%s", name, path, got)
	}
}

// BenchmarkFeatures builds the features of an 8-GPU node with 56 MIG
// devices, as every discovery does.
func BenchmarkFeatures(b *testing.B) {
	_, inv := discoverNode(b, "testdata/eight-mig.yaml")
	b.ReportAllocs()
	for b.Loop() {
		f := discovery.Features(inv)
		if len(f.Instances[discovery.FeatureMIG].Elements) != 56 {
			b.Fatal("want 56 nvidia.mig instances")
		}
	}
}
