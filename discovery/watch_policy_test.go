package discovery_test

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
)

// policyWatcher runs a watcher with AllEvents over node on a fake clock
// that only the test moves: evidence is read again when the test advances
// the clock by a minute.
func policyWatcher(t *testing.T, node *fakenode.Node, inv *discovery.Inventory) (<-chan discovery.HealthEvent, *testingclock.FakePassiveClock) {
	t.Helper()
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	events := startWatcher(t, node, inv, discovery.HealthOptions{
		AllEvents: true, WaitTimeout: time.Millisecond, EvidenceInterval: time.Minute, Clock: clk,
	})
	return events, clk
}

// expect receives len(want) events and compares them, in order.
func expect(t *testing.T, events <-chan discovery.HealthEvent, step string, want ...discovery.HealthEvent) []discovery.HealthEvent {
	t.Helper()
	var got []discovery.HealthEvent
	for _, w := range want {
		ev := receive(t, events)
		got = append(got, ev)
		if ev != w {
			t.Errorf("%s: got %+v\n want %+v", step, ev, w)
		}
	}
	return got
}

// quiet proves that no event is queued: the next one is a marker XID.
func quiet(t *testing.T, node *fakenode.Node, events <-chan discovery.HealthEvent, inv *discovery.Inventory, step string) {
	t.Helper()
	if err := node.InjectXID(0, 43); err != nil {
		t.Fatal(err)
	}
	got := receive(t, events)
	if got.GPUUUID != inv.GPUs[0].UUID || got.Kind != discovery.EventXID || got.XID != 43 {
		t.Errorf("%s: unexpected event %+v before the marker", step, got)
	}
}

// TestHealthWatcherAllEventsAtStart: with AllEvents the start-up evidence
// carries NVML's reset evidence, a pending recovery action is reported, and
// every GPU without a pending reset gets EventResetCleared (which ends
// until-reset holds a state file kept from before a reset).
func TestHealthWatcherAllEventsAtStart(t *testing.T) {
	node, inv := discoverNode(t, "testdata/evidence.yaml")
	zero := 0
	if err := node.SetHealth(3, fakenode.HealthSpec{VolatileDoubleBitErrors: &zero, RecoveryAction: "gpu-reset"}); err != nil {
		t.Fatal(err)
	}
	events, _ := policyWatcher(t, node, inv)
	uuid := func(i int) string { return inv.GPUs[i].UUID }
	expect(t, events, "start",
		discovery.HealthEvent{GPUUUID: uuid(0), Kind: discovery.EventRowRemapPending, ResetPending: true},
		discovery.HealthEvent{GPUUUID: uuid(1), Kind: discovery.EventRowRemapFailure},
		discovery.HealthEvent{GPUUUID: uuid(1), Kind: discovery.EventECCVolatileDoubleBit, Count: 2},
		discovery.HealthEvent{GPUUUID: uuid(1), Kind: discovery.EventResetCleared},
		discovery.HealthEvent{GPUUUID: uuid(2), Kind: discovery.EventRetiredPagesPending, ResetPending: true},
		discovery.HealthEvent{GPUUUID: uuid(3), Kind: discovery.EventRecoveryAction, RecoveryAction: discovery.RecoveryGPUReset, ResetPending: true},
		discovery.HealthEvent{GPUUUID: uuid(4), Kind: discovery.EventResetCleared},
	)
	quiet(t, node, events, inv, "after the start-up evidence")
}

// TestHealthWatcherResetFlow plays an uncontained error on the fake node and
// checks what the events are and what the default policy makes of them: the
// XID alone holds for the quiet period (NVML shows no pending reset yet),
// the driver's recovery action holds until NVML shows the reset, and
// resetting the GPU sends EventResetCleared, which ends that hold.
func TestHealthWatcherResetFlow(t *testing.T) {
	node, inv := discoverNode(t, "dgx-h100")
	events, clk := policyWatcher(t, node, inv)
	uuid := func(i int) string { return inv.GPUs[i].UUID }
	for i := range inv.GPUs {
		expect(t, events, "start", discovery.HealthEvent{GPUUUID: uuid(i), Kind: discovery.EventResetCleared})
	}
	var policy discovery.HealthPolicy
	decide := func(ev discovery.HealthEvent, want discovery.HealthEffect) {
		t.Helper()
		if d := discovery.Decide(ev, policy); d.Effect != want {
			t.Errorf("Decide(%+v) = %s (%s), want %s", ev, d.Effect, d.Because, want)
		}
	}

	// XID 94 is counted: the GPU stays healthy.
	if err := node.InjectXID(0, 94); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, events, "XID 94", discovery.HealthEvent{GPUUUID: uuid(0), Kind: discovery.EventXID, XID: 94})[0]
	decide(ev, discovery.EffectCount)

	// XID 95 before the driver set a recovery action: the quiet period.
	if err := node.InjectXID(1, 95); err != nil {
		t.Fatal(err)
	}
	ev = expect(t, events, "XID 95", discovery.HealthEvent{GPUUUID: uuid(1), Kind: discovery.EventXID, XID: 95})[0]
	decide(ev, discovery.EffectUntilQuiet)

	// The driver asks for a reset (its event), and logs XID 154.
	clk.SetTime(clk.Now().Add(2 * time.Second)) // past the reset reading's reuse
	if err := node.SetRecoveryAction(1, nvml.GPU_RECOVERY_ACTION_GPU_RESET); err != nil {
		t.Fatal(err)
	}
	ev = expect(t, events, "recovery action", discovery.HealthEvent{GPUUUID: uuid(1), Kind: discovery.EventRecoveryAction, RecoveryAction: discovery.RecoveryGPUReset, ResetPending: true})[0]
	decide(ev, discovery.EffectUntilReset)
	if err := node.InjectXID(1, 154); err != nil {
		t.Fatal(err)
	}
	ev = expect(t, events, "XID 154", discovery.HealthEvent{GPUUUID: uuid(1), Kind: discovery.EventXID, XID: 154, ResetPending: true})[0]
	decide(ev, discovery.EffectCount)

	// While the action is pending it is reported again at every reading.
	clk.SetTime(clk.Now().Add(time.Minute))
	expect(t, events, "evidence while pending", discovery.HealthEvent{GPUUUID: uuid(1), Kind: discovery.EventRecoveryAction, RecoveryAction: discovery.RecoveryGPUReset, ResetPending: true})

	// nvidia-smi -r: the next reading sees the reset.
	if err := node.ResetGPU(1); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(clk.Now().Add(time.Minute))
	ev = expect(t, events, "after the reset", discovery.HealthEvent{GPUUUID: uuid(1), Kind: discovery.EventResetCleared})[0]
	if d := discovery.Decide(ev, policy); !d.EndsReset || d.Effect != discovery.EffectNone {
		t.Errorf("Decide(reset-cleared) = %+v, want it to end until-reset holds", d)
	}
	quiet(t, node, events, inv, "after the reset")

	// An XID that comes with an action the watcher had not reported brings
	// the action along.
	clk.SetTime(clk.Now().Add(2 * time.Second))
	if err := node.SetHealth(4, fakenode.HealthSpec{RecoveryAction: "node-reboot"}); err != nil {
		t.Fatal(err)
	}
	if err := node.InjectXID(4, 154); err != nil {
		t.Fatal(err)
	}
	evs := expect(t, events, "XID 154 with a new action",
		discovery.HealthEvent{GPUUUID: uuid(4), Kind: discovery.EventXID, XID: 154, ResetPending: true},
		discovery.HealthEvent{GPUUUID: uuid(4), Kind: discovery.EventRecoveryAction, RecoveryAction: discovery.RecoveryNodeReboot, ResetPending: true})
	decide(evs[1], discovery.EffectUntilReboot)
}

// TestHealthWatcherNVLinkAndLostGPU: a link that goes down is reported
// while it is down, its failed recovery once; a GPU that falls off the bus
// is reported at once (NVML's event) and at every reading while it is lost.
func TestHealthWatcherNVLinkAndLostGPU(t *testing.T) {
	node, inv := discoverNode(t, "dgx-h100")
	events, clk := policyWatcher(t, node, inv)
	uuid := func(i int) string { return inv.GPUs[i].UUID }
	for range inv.GPUs {
		receive(t, events) // reset-cleared
	}
	reading := func() { clk.SetTime(clk.Now().Add(time.Minute)) }

	if err := node.SetNVLinkDown(2, 5, true); err != nil {
		t.Fatal(err)
	}
	reading()
	down := discovery.HealthEvent{GPUUUID: uuid(2), Kind: discovery.EventNVLinkDown, Count: 1, Links: discovery.LinkSet(0).Add(5)}
	evs := expect(t, events, "link down", down,
		discovery.HealthEvent{GPUUUID: uuid(2), Kind: discovery.EventNVLinkErrors, Count: 1, Links: discovery.LinkSet(0).Add(5)})
	for _, ev := range evs {
		if d := discovery.Decide(ev, discovery.HealthPolicy{}); d.Effect != discovery.EffectUntilQuiet {
			t.Errorf("Decide(%s) = %s, want until-quiet", ev.Kind, d.Effect)
		}
	}
	reading()
	expect(t, events, "still down", down) // no new recovery failure
	if err := node.SetNVLinkDown(2, 5, false); err != nil {
		t.Fatal(err)
	}
	reading()
	quiet(t, node, events, inv, "link up again")

	if err := node.SetGPULost(3, true); err != nil {
		t.Fatal(err)
	}
	lostEv := discovery.HealthEvent{GPUUUID: uuid(3), Kind: discovery.EventGPULost}
	expect(t, events, "fallen off the bus", lostEv)
	reading()
	expect(t, events, "still lost", lostEv)
	if err := node.SetGPULost(3, false); err != nil {
		t.Fatal(err)
	}
	reading()
	quiet(t, node, events, inv, "answering again")
}

// TestHealthWatcherPageRetirementFailure: NVML's DRAM retirement failure
// event is its own kind, sent only with AllEvents.
func TestHealthWatcherPageRetirementFailure(t *testing.T) {
	node, inv := discoverNode(t, "l40s-pcie")
	events, _ := policyWatcher(t, node, inv)
	for range inv.GPUs {
		receive(t, events) // reset-cleared
	}
	if err := node.InjectPageRetirementFailure(1); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, events, "retirement failure", discovery.HealthEvent{GPUUUID: inv.GPUs[1].UUID, Kind: discovery.EventPageRetirementFailure})[0]
	if d := discovery.Decide(ev, discovery.HealthPolicy{}); d.Effect != discovery.EffectUntilQuiet {
		t.Errorf("without a pending reset: %s (%s), want until-quiet", d.Effect, d.Because)
	}
}

// TestHealthWatcherAllEventsSendsEveryXID: with AllEvents the policy
// decides: XIDs the catalog leaves healthy and IgnoredXIDs are sent.
func TestHealthWatcherAllEventsSendsEveryXID(t *testing.T) {
	node, inv := discoverNode(t, "l40s-pcie")
	events := startWatcher(t, node, inv, discovery.HealthOptions{AllEvents: true, IgnoredXIDs: []uint64{79}, EvidenceInterval: -1, WaitTimeout: time.Millisecond})
	for range inv.GPUs {
		receive(t, events) // reset-cleared
	}
	for _, xid := range []uint64{13, 79} {
		if err := node.InjectXID(0, xid); err != nil {
			t.Fatal(err)
		}
		if ev := receive(t, events); ev.XID != xid {
			t.Errorf("got XID %d, want %d", ev.XID, xid)
		}
	}
}
