package discovery_test

import (
	"context"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
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
	// No extra event: the next one is a marker injected last (events keep
	// their order), so anything before it would be extra.
	if err := node.InjectXID(0, 79); err != nil {
		t.Fatal(err)
	}
	marker := discovery.HealthEvent{GPUUUID: inv.GPUs[0].UUID, Kind: discovery.EventXID, XID: 79}
	select {
	case got := <-events:
		got.Time = time.Time{}
		if got != marker {
			t.Errorf("unexpected extra event %+v before the marker", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no marker event")
	}
}

// TestHealthWatcherIgnoredXIDsAddToTheCatalog: without AllEvents the
// watcher drops the XIDs the catalog leaves healthy (13: RESTART_APP) and
// IgnoredXIDs on top (79); XID 109, which NVIDIA's device plugin ignores, is
// RESET_GPU in the catalog and comes through.
func TestHealthWatcherIgnoredXIDsAddToTheCatalog(t *testing.T) {
	node, inv := discoverNode(t, "dgx-h100")
	events := startWatcher(t, node, inv, discovery.HealthOptions{IgnoredXIDs: []uint64{79}, WaitTimeout: 20 * time.Millisecond})
	for _, xid := range []uint64{79, 13, 94, 109} {
		if err := node.InjectXID(0, xid); err != nil {
			t.Fatal(err)
		}
	}
	if ev := receive(t, events); ev.XID != 109 {
		t.Errorf("got XID %d, want 109 (79 is ignored, 13 and 94 leave the GPU healthy)", ev.XID)
	}
}

// startWatcher runs a health watcher over node until the test ends.
func startWatcher(t *testing.T, node *fakenode.Node, inv *discovery.Inventory, o discovery.HealthOptions) <-chan discovery.HealthEvent {
	t.Helper()
	w := discovery.NewHealthWatcher(node.NVML(), o)
	events := make(chan discovery.HealthEvent, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, func() *discovery.Inventory { return inv }, events) }()
	t.Cleanup(func() {
		cancel()
		// Wake a wait with a long timeout: the fake's events end it at once.
		_ = node.InjectXID(0, 13)
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return events
}

func receive(t *testing.T, events <-chan discovery.HealthEvent) discovery.HealthEvent {
	t.Helper()
	select {
	case ev := <-events:
		ev.Time = time.Time{}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no health event")
		return discovery.HealthEvent{}
	}
}

// TestHealthWatcherStartupEvidence: the evidence NVML keeps across
// processes makes GPUs unhealthy when the watcher
// starts, before any new event; healthy GPUs get no event.
func TestHealthWatcherStartupEvidence(t *testing.T) {
	node, inv := discoverNode(t, "testdata/evidence.yaml")
	events := startWatcher(t, node, inv, discovery.HealthOptions{EvidenceInterval: -1})
	uuid := func(i int) string { return inv.GPUs[i].UUID }
	want := []discovery.HealthEvent{
		{GPUUUID: uuid(0), Kind: discovery.EventRowRemapPending},
		{GPUUUID: uuid(1), Kind: discovery.EventRowRemapFailure},
		{GPUUUID: uuid(1), Kind: discovery.EventECCVolatileDoubleBit, Count: 2},
		{GPUUUID: uuid(2), Kind: discovery.EventRetiredPagesPending},
	}
	for _, w := range want {
		if got := receive(t, events); got != w {
			t.Errorf("got %+v, want %+v", got, w)
		}
	}
	// The next event is a new XID: nothing came for the healthy GPUs 3, 4.
	if err := node.InjectXID(3, 79); err != nil {
		t.Fatal(err)
	}
	if got, w := receive(t, events), (discovery.HealthEvent{GPUUUID: uuid(3), Kind: discovery.EventXID, XID: 79}); got != w {
		t.Errorf("got %+v, want %+v (no evidence event for healthy GPUs)", got, w)
	}
}

// TestHealthWatcherEvidenceRepeats: evidence that lasts is reported again
// every EvidenceInterval, so the GPU outlives the plugin's recovery period
// unhealthy.
func TestHealthWatcherEvidenceRepeats(t *testing.T) {
	node, inv := discoverNode(t, "testdata/evidence.yaml")
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	events := startWatcher(t, node, inv, discovery.HealthOptions{EvidenceInterval: time.Minute, WaitTimeout: time.Millisecond, Clock: clk})
	for range 4 {
		receive(t, events) // the start-up evidence
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	if got := receive(t, events); got.GPUUUID != inv.GPUs[0].UUID || got.Kind != discovery.EventRowRemapPending {
		t.Errorf("after a minute got %+v, want GPU 0's row-remap-pending again", got)
	}
}

// TestHealthEventLatencyIndependentOfWaitTimeout: with a 10 s wait timeout
// an XID still reaches the watcher's output at once, as nvmlEventSetWait
// wakes on an event on the real driver. Proven by ordering, not time: the
// test waits for the event with a bound far below the wait timeout plus a
// full wait; a watcher that only noticed events when a wait timed out
// would deliver nothing before the whole 10 s wait ended.
func TestHealthEventLatencyIndependentOfWaitTimeout(t *testing.T) {
	node, inv := discoverNode(t, "dgx-h100")
	events := startWatcher(t, node, inv, discovery.HealthOptions{WaitTimeout: time.Hour, EvidenceInterval: -1})
	for i, xid := range []uint64{79, 48, 95} {
		if err := node.InjectXID(i, xid); err != nil {
			t.Fatal(err)
		}
		select {
		case ev := <-events:
			if ev.XID != xid || ev.GPUUUID != inv.GPUs[i].UUID {
				t.Fatalf("got %+v, want XID %d on GPU %d", ev, xid, i)
			}
		case <-time.After(time.Minute): // far below the one-hour wait
			t.Fatalf("XID %d was not delivered while the watcher waited with a one-hour timeout", xid)
		}
	}
}

// BenchmarkHealthEventLatency measures XID injection -> HealthEvent on the
// watcher's channel on the fake node, for two wait timeouts: the figure
// must not depend on the timeout.
func BenchmarkHealthEventLatency(b *testing.B) {
	for _, timeout := range []time.Duration{100 * time.Millisecond, 10 * time.Second} {
		b.Run("wait"+timeout.String(), func(b *testing.B) {
			node, inv := discoverNode(b, "dgx-h100")
			w := discovery.NewHealthWatcher(node.NVML(), discovery.HealthOptions{WaitTimeout: timeout, EvidenceInterval: -1})
			events := make(chan discovery.HealthEvent)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx, func() *discovery.Inventory { return inv }, events) }()
			b.ReportAllocs()
			for b.Loop() {
				if err := node.InjectXID(4, 79); err != nil {
					b.Fatal(err)
				}
				<-events
			}
			cancel()
			_ = node.InjectXID(0, 13)
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}
