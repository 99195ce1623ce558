package agent

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestRuntimeMetricsMadeOnFirstScrape: the go_* and process_* collectors
// are not made when they are registered, while the agent starts, yet
// every scrape of the agent's registry has their metrics.
func TestRuntimeMetricsMadeOnFirstScrape(t *testing.T) {
	rc := &runtimeCollectors{}
	if err := prometheus.NewRegistry().Register(rc); err != nil {
		t.Fatal(err)
	}
	if rc.all != nil {
		t.Fatal("the runtime collectors were made at registration")
	}

	reg := prometheus.NewRegistry()
	if _, err := newMetrics(reg, func() bool { return true }); err != nil {
		t.Fatal(err)
	}
	for scrape := 1; scrape <= 2; scrape++ {
		families, err := reg.Gather()
		if err != nil {
			t.Fatalf("scrape %d: %v", scrape, err)
		}
		have := map[string]bool{}
		for _, f := range families {
			have[f.GetName()] = true
		}
		for _, want := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes", "process_open_fds", "featureplug_ready"} {
			if !have[want] {
				t.Errorf("scrape %d: no %s", scrape, want)
			}
		}
	}
}
