package discovery_test

import (
	"context"
	"testing"
	"time"

	"github.com/featureplug/featureplug/discovery"
)

func TestHealthWatcher(t *testing.T) {
	node, inv := discoverNode(t, "dgx-a100")
	w := discovery.NewHealthWatcher(node.NVML(), discovery.HealthOptions{WaitTimeout: 20 * time.Millisecond})
	events := make(chan discovery.HealthEvent, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, func() *discovery.Inventory { return inv }, events) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	mig := inv.GPUs[1].MIGDevices[2]
	steps := []struct {
		name   string
		inject func() error
		want   *discovery.HealthEvent
	}{
		{"ignored XID 13", func() error { return node.InjectXID(5, 13) }, nil},
		{"XID 79 on a whole GPU", func() error { return node.InjectXID(5, 79) },
			&discovery.HealthEvent{GPUUUID: inv.GPUs[5].UUID, Kind: discovery.EventXID, XID: 79}},
		{"XID 48 on a MIG device", func() error {
			return node.InjectMIGXID(1, mig.GPUInstanceID, mig.ComputeInstanceID, 48)
		}, &discovery.HealthEvent{GPUUUID: inv.GPUs[1].UUID, MIGUUID: mig.UUID, Kind: discovery.EventXID, XID: 48}},
		{"ignored XID 43 on a MIG device", func() error {
			return node.InjectMIGXID(1, mig.GPUInstanceID, mig.ComputeInstanceID, 43)
		}, nil},
		{"double-bit ECC", func() error { return node.InjectECCDoubleBit(2) },
			&discovery.HealthEvent{GPUUUID: inv.GPUs[2].UUID, Kind: discovery.EventECCDoubleBit}},
	}
	for _, s := range steps {
		if err := s.inject(); err != nil {
			t.Fatalf("%s: inject: %v", s.name, err)
		}
		if s.want == nil {
			continue // the next expected event proves this one was dropped
		}
		select {
		case got := <-events:
			got.Time = time.Time{}
			if got != *s.want {
				t.Errorf("%s: got %+v, want %+v", s.name, got, *s.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no health event", s.name)
		}
	}
	select {
	case ev := <-events:
		t.Errorf("unexpected extra event %+v", ev)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestHealthWatcherIgnoredSetIsConfigurable(t *testing.T) {
	node, inv := discoverNode(t, "dgx-h100")
	// Ignore nothing: XID 13 now counts; and ignore 79 explicitly.
	w := discovery.NewHealthWatcher(node.NVML(), discovery.HealthOptions{IgnoredXIDs: []uint64{79}, WaitTimeout: 20 * time.Millisecond})
	events := make(chan discovery.HealthEvent, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, func() *discovery.Inventory { return inv }, events) }()
	for _, xid := range []uint64{79, 13} {
		if err := node.InjectXID(0, xid); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case ev := <-events:
		if ev.XID != 13 {
			t.Errorf("got XID %d, want 13 (79 is ignored)", ev.XID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no health event")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
