package discovery

// NVML error paths of the health evidence AllEvents adds (recovery action,
// NVLink states and recovery failures, reset evidence with events), on
// go-nvml's generated mock (nvmlmock_test.go's mockNode).

import (
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	testingclock "k8s.io/utils/clock/testing"
)

// recoveryActionField is a GetFieldValues that answers a recovery action
// and nothing else (NVLink fields: NOT_SUPPORTED, a PCIe card).
func recoveryActionField(action *uint32) func([]nvml.FieldValue) nvml.Return {
	return func(values []nvml.FieldValue) nvml.Return {
		for k := range values {
			v := &values[k]
			if v.FieldId != nvml.FI_DEV_GET_GPU_RECOVERY_ACTION {
				v.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
				continue
			}
			v.NvmlReturn = uint32(nvml.SUCCESS)
			v.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
			binary.NativeEndian.PutUint32(v.Value[:4], *action)
		}
		return nvml.SUCCESS
	}
}

func allEvidence(n *mockNode, inv *Inventory) ([]HealthEvent, []EvidenceProblem) {
	w := NewHealthWatcher(n.lib, HealthOptions{AllEvents: true, Clock: testingclock.NewFakePassiveClock(time.Time{})})
	return w.ReadEvidence(inv)
}

func kinds(evs []HealthEvent) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.GPUUUID[:10]+" "+string(ev.Kind)+" "+string(ev.RecoveryAction))
	}
	return out
}

// TestMockEvidenceFieldErrors: the one GetFieldValues call AllEvents adds
// per GPU, failing in every way NVML can fail it.
func TestMockEvidenceFieldErrors(t *testing.T) {
	n := newMockNode()
	inv, err := discoverMock(t, n)
	if err != nil {
		t.Fatal(err)
	}
	// GPU 0: denied; GPU 1: lost for the whole call; GPU 2: lost in one
	// value; GPU 3: an action newer than go-nvml's table.
	n.gpus[0].GetFieldValuesFunc = func([]nvml.FieldValue) nvml.Return { return nvml.ERROR_NO_PERMISSION }
	n.gpus[1].GetFieldValuesFunc = func([]nvml.FieldValue) nvml.Return { return nvml.ERROR_GPU_IS_LOST }
	n.gpus[2].GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		for k := range values {
			values[k].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
		}
		values[3].NvmlReturn = uint32(nvml.ERROR_GPU_IS_LOST)
		return nvml.SUCCESS
	}
	newer := uint32(9)
	n.gpus[3].GetFieldValuesFunc = recoveryActionField(&newer)

	evs, problems := allEvidence(n, inv)
	want := []HealthEvent{
		{GPUUUID: mockUUID(1), Kind: EventGPULost},
		{GPUUUID: mockUUID(2), Kind: EventGPULost},
		{GPUUUID: mockUUID(3), Kind: EventRecoveryAction, RecoveryAction: "action-9", ResetPending: true},
	}
	if !slices.Equal(evs, want) {
		t.Errorf("evidence:\n %v\nwant\n %v", kinds(evs), kinds(want))
	}
	// GPU 0's denial is a problem, and no EventResetCleared: the query that
	// failed might have shown a pending reset.
	if len(problems) != 1 || problems[0].GPUUUID != mockUUID(0) ||
		!strings.HasPrefix(problems[0].Err.Error(), "reading recovery action and NVLink fields of GPU "+mockUUID(0)+": NVML denied access") {
		t.Errorf("problems = %+v", problems)
	}
	if d := Decide(evs[2], HealthPolicy{}); d.Effect != EffectUntilReset {
		t.Errorf("an unknown pending action: %s, want until-reset", d.Effect)
	}
}

// TestMockEvidenceWithoutAllEvents: without AllEvents the evidence reading
// makes no GetFieldValues call and sends no EventResetCleared.
func TestMockEvidenceWithoutAllEvents(t *testing.T) {
	n := newMockNode()
	inv, err := discoverMock(t, n)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range n.gpus {
		d.GetFieldValuesFunc = func([]nvml.FieldValue) nvml.Return {
			t.Error("GetFieldValues called without AllEvents")
			return nvml.ERROR_UNKNOWN
		}
	}
	if evs, problems := collectEvidence(n, inv); len(evs)+len(problems) != 0 {
		t.Errorf("evidence = %+v %+v", evs, problems)
	}
}

// TestMockAllEventsRegistration: the watcher registers for the recovery,
// retirement-failure and unavailable events only where the GPU supports
// them, and maps each to its kind; a recovery event whose action is none
// again gives nothing.
func TestMockAllEventsRegistration(t *testing.T) {
	n := newMockNode()
	inv, err := discoverMock(t, n)
	if err != nil {
		t.Fatal(err)
	}
	all := uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeDramRetirementFailure |
		nvml.EventTypeGpuUnavailableError | nvml.EventTypeGpuRecoveryAction | nvml.EventTypePState)
	masks := make([]uint64, mockGPUs)
	for i, d := range n.gpus {
		if i == 0 {
			d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return all, nvml.SUCCESS }
		}
		d.RegisterEventsFunc = func(mask uint64, _ nvml.EventSet) nvml.Return { masks[i] = mask; return nvml.SUCCESS }
	}
	action := uint32(nvml.GPU_RECOVERY_ACTION_DRAIN_AND_RESET)
	n.gpus[0].GetFieldValuesFunc = recoveryActionField(&action)
	n.gpus[0].GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 1, true, false, nvml.SUCCESS }

	clk := testingclock.NewFakePassiveClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	w := NewHealthWatcher(n.lib, HealthOptions{AllEvents: true, WaitTimeout: 10 * time.Millisecond, EvidenceInterval: -1, Clock: clk})
	events, stop := runWatcher(t, w, inv)
	defer stop()
	// Start: GPU 0 has a pending remap and action; the others get
	// reset-cleared.
	start := []HealthEvent{
		{GPUUUID: mockUUID(0), Kind: EventRowRemapPending, ResetPending: true},
		{GPUUUID: mockUUID(0), Kind: EventRecoveryAction, RecoveryAction: RecoveryDrainAndReset, ResetPending: true},
		{GPUUUID: mockUUID(1), Kind: EventResetCleared},
		{GPUUUID: mockUUID(2), Kind: EventResetCleared},
		{GPUUUID: mockUUID(3), Kind: EventResetCleared},
	}
	next := func() HealthEvent {
		ev := nextEvent(t, events)
		ev.Time = time.Time{}
		return ev
	}
	for _, want := range start {
		if got := next(); got != want {
			t.Errorf("start: %+v, want %+v", got, want)
		}
	}
	if masks[0] != all&^nvml.EventTypePState || masks[1] != nvml.EventTypeXidCriticalError|nvml.EventTypeDoubleBitEccError {
		t.Errorf("registered masks %#x, %#x", masks[0], masks[1])
	}

	event := func(typ uint64) waitResult {
		return waitResult{data: nvml.EventData{Device: n.gpus[0], EventType: typ, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}}
	}
	n.events <- event(nvml.EventTypeGpuUnavailableError)
	n.events <- event(nvml.EventTypeDoubleBitEccError)
	for _, want := range []HealthEvent{
		{GPUUUID: mockUUID(0), Kind: EventGPULost},
		{GPUUUID: mockUUID(0), Kind: EventECCDoubleBit, ResetPending: true},
	} {
		if got := next(); got != want {
			t.Errorf("events: %+v, want %+v", got, want)
		}
	}
	// The GPU was reset: its action is none again.
	clk.SetTime(clk.Now().Add(2 * resetReadTTL))
	action = uint32(nvml.GPU_RECOVERY_ACTION_NONE)
	n.gpus[0].GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
	n.events <- event(nvml.EventTypeGpuRecoveryAction) // back to none: nothing
	n.events <- event(nvml.EventTypeDramRetirementFailure)
	if got, want := next(), (HealthEvent{GPUUUID: mockUUID(0), Kind: EventPageRetirementFailure}); got != want {
		t.Errorf("events: %+v, want %+v", got, want)
	}
}

// runWatcher runs w over inv until the returned stop is called.
func runWatcher(t *testing.T, w *HealthWatcher, inv *Inventory) (<-chan HealthEvent, func()) {
	t.Helper()
	events := make(chan HealthEvent, 16)
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- w.Run(ctx, func() *Inventory { return inv }, events) }()
	return events, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}
