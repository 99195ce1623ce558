package discovery_test

import (
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
)

// TestEvidenceNVMLCallBudget counts the NVML calls of one evidence reading
// of an 8x H100 node, which the watcher repeats every minute: four per GPU
// (handle, retired pages, remapped rows, ECC count), and one more with
// AllEvents (the recovery action and every NVLink's state and recovery
// failures in a single GetFieldValues).
func TestEvidenceNVMLCallBudget(t *testing.T) {
	for _, tt := range []struct {
		all    bool
		perGPU int
	}{{false, 4}, {true, 5}} {
		node, err := fakenode.Named("dgx-h100")
		if err != nil {
			t.Fatal(err)
		}
		inv, err := discovery.Discover(node.NVML())
		if err != nil {
			t.Fatal(err)
		}
		lib, calls := countNVML(node.NVML())
		w := discovery.NewHealthWatcher(lib, discovery.HealthOptions{AllEvents: tt.all})
		if _, problems := w.ReadEvidence(inv); len(problems) > 0 {
			t.Fatalf("problems: %+v", problems)
		}
		if n, budget := calls.total(), tt.perGPU*len(inv.GPUs); n > budget {
			t.Errorf("AllEvents %v: %d NVML calls for %d GPUs, budget %d:\n%s", tt.all, n, len(inv.GPUs), budget, calls)
		}
	}
}
