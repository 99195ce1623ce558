package discovery_test

import (
	"context"
	"testing"
	"time"

	"github.com/featureplug/featureplug/discovery"
)

// TestHealthWatcherWithoutNVML checks that a watcher on a node without
// NVML (all GPUs on vfio-pci) waits for its context and sends nothing.
func TestHealthWatcherWithoutNVML(t *testing.T) {
	w := discovery.NewHealthWatcher(nil, discovery.HealthOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan discovery.HealthEvent, 1)
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, func() *discovery.Inventory { return &discovery.Inventory{} }, out)
	}()
	select {
	case err := <-done:
		t.Fatalf("Run returned before its context ended: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if len(out) != 0 {
		t.Errorf("events without NVML: %v", <-out)
	}
}

// TestDriverFeatureWithoutNVML checks that a node without NVML publishes
// no driver versions (they would not be versions), only its GPU count.
func TestDriverFeatureWithoutNVML(t *testing.T) {
	attrs := discovery.DriverAttributes(&discovery.Inventory{VFIO: []discovery.VFIODevice{{PCIAddress: "0000:47:00.0"}}})
	if len(attrs) != 1 || attrs[discovery.AttrGPUCount] != "0" {
		t.Errorf("nvidia.driver without NVML = %v, want gpu.count=0 alone", attrs)
	}
}
