package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/utils/clock"
)

// noInstance is the GPU or compute instance ID of an event that names none.
const noInstance = 0xFFFFFFFF

// defaultWaitTimeout bounds how long one NVML event wait blocks, and so how
// quickly the watcher notices its context ending. It does not delay events:
// nvmlEventSetWait returns as soon as an event is queued, whatever its
// timeout.
const defaultWaitTimeout = 100 * time.Millisecond

// DefaultEvidenceInterval is how often the watcher reads the failure
// evidence NVML keeps again: often enough that a GPU with lasting evidence
// never reaches the plugin's recovery period (5 minutes by default).
const DefaultEvidenceInterval = time.Minute

// resetReadTTL is how long a reading of a GPU's reset evidence taken for an
// event serves the next events of that GPU: an XID storm costs three NVML
// calls per GPU per TTL, not per event.
const resetReadTTL = time.Second

// HealthOptions configure a HealthWatcher.
type HealthOptions struct {
	// AllEvents sends every event NVML reports, for a consumer that decides
	// what each does with Decide and a HealthPolicy: every XID (IgnoredXIDs
	// does not apply: a policy says which to ignore), the ECC error and
	// recovery events with NVML's reset evidence (HealthEvent.ResetPending),
	// the kinds only a policy can weigh (EventRecoveryAction,
	// EventNVLinkDown, EventNVLinkErrors, EventPageRetirementFailure, and
	// EventGPULost from EventTypeGpuUnavailableError), and the recovery
	// evidence EventResetCleared. Unset, the watcher sends only events that
	// mean "unhealthy now", for a consumer that marks a device unhealthy
	// for every event it gets: XIDs the default policy leaves healthy are
	// dropped, with IgnoredXIDs.
	AllEvents bool
	// IgnoredXIDs are XIDs dropped without AllEvents, on top of those the
	// catalog's default policy leaves healthy (effect none or count).
	IgnoredXIDs []uint64
	// WaitTimeout bounds one NVML event wait (default 100ms): how long Run
	// takes to return after its context ends. Events are delivered as soon
	// as NVML has them, whatever the timeout.
	WaitTimeout time.Duration
	// EvidenceInterval is how often the evidence of earlier failures
	// (pending retired pages or row remappings, volatile double-bit ECC
	// counts; with AllEvents also recovery actions and NVLink states and
	// recovery failures) is read again after the first reading at start;
	// while it lasts the GPU's HealthEvent is sent again, so the GPU stays
	// unhealthy. Default 1 minute; negative: read only at start.
	EvidenceInterval time.Duration
	// Logger receives watcher diagnostics (default: discarded).
	Logger *slog.Logger
	// Clock stamps the events and paces EvidenceInterval (default the real
	// clock; tests pass k8s.io/utils/clock/testing's fake clocks).
	Clock clock.PassiveClock
}

// HealthWatcher turns NVML events (critical XIDs, double-bit ECC errors)
// and the evidence NVML keeps into per-device HealthEvents.
type HealthWatcher struct {
	lib      nvml.Interface
	all      bool
	ignored  []uint64
	wait     int
	evidence time.Duration
	log      *slog.Logger
	now      func() time.Time
	// gpus is what Run remembers of each GPU between readings, by UUID;
	// only Run's goroutine uses it.
	gpus map[string]*gpuState
}

// gpuState is what the watcher remembers of one GPU between readings.
type gpuState struct {
	// resetKnown is set once a reading said whether a reset is pending.
	resetKnown, resetPending bool
	// resetReadAt is when the reset evidence was last read for an event,
	// and readPending what that reading found.
	resetReadAt time.Time
	readPending bool
	// action is the last recovery action reported ("" none).
	action RecoveryAction
	// links are the NVLinks seen active; linksKnown once read.
	links      LinkSet
	linksKnown bool
	// failures are the NVLink recovery failures per link last read.
	failures      [nvml.NVLINK_MAX_LINKS]uint64
	failuresKnown bool
}

// NewHealthWatcher returns a watcher over lib, which must be initialized.
func NewHealthWatcher(lib nvml.Interface, o HealthOptions) *HealthWatcher {
	w := &HealthWatcher{lib: lib, all: o.AllEvents, ignored: o.IgnoredXIDs, log: o.Logger, gpus: map[string]*gpuState{}}
	if o.Clock != nil {
		w.now = o.Clock.Now
	}
	timeout := o.WaitTimeout
	if timeout <= 0 {
		timeout = defaultWaitTimeout
	}
	w.wait = int(timeout / time.Millisecond)
	w.evidence = o.EvidenceInterval
	if w.evidence == 0 {
		w.evidence = DefaultEvidenceInterval
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.now == nil {
		w.now = time.Now
	}
	return w
}

// dropped reports whether an XID is not sent: without AllEvents, those
// the default policy leaves healthy and IgnoredXIDs.
func (w *HealthWatcher) dropped(xid uint64) bool {
	if w.all {
		return false
	}
	if slices.Contains(w.ignored, xid) {
		return true
	}
	effect, _ := HealthPolicy{}.XIDEffect(xid)
	return !effect.Unhealthy()
}

// eventMask is the event types the watcher registers for.
func (w *HealthWatcher) eventMask() uint64 {
	mask := uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError)
	if w.all {
		mask |= nvml.EventTypeDramRetirementFailure | nvml.EventTypeGpuUnavailableError | nvml.EventTypeGpuRecoveryAction
	}
	return mask
}

// state returns what the watcher remembers of a GPU.
func (w *HealthWatcher) state(uuid string) *gpuState {
	st, ok := w.gpus[uuid]
	if !ok {
		st = &gpuState{}
		w.gpus[uuid] = st
	}
	return st
}

// Run registers for critical events on every GPU of the inventory and sends
// a HealthEvent on out for each one that is not dropped, until ctx ends. The
// inventory function is called for every event so that MIG devices created
// after Run started are named correctly. Run returns nil when ctx ends.
//
// Before waiting for events, Run reads the evidence of earlier failures
// that NVML keeps across processes (see ReadEvidence) and sends a
// HealthEvent for each GPU that has some, so a GPU that failed before
// featureplug started is reported unhealthy at once; it reads it again
// every EvidenceInterval.
//
// A GPU that NVML reports lost (ERROR_GPU_IS_LOST) is reported with
// EventGPULost; the other GPUs are unaffected. When an event wait fails
// with ERROR_GPU_IS_LOST, every GPU is probed and only those that answer
// lost are reported (all of them when none does: NVML did not say which).
func (w *HealthWatcher) Run(ctx context.Context, inventory func() *Inventory, out chan<- HealthEvent) error {
	if w.lib == nil {
		// No NVML (a node whose GPUs are all bound to vfio-pci): no
		// NVML events to watch.
		<-ctx.Done()
		return nil
	}
	set, ret := w.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("creating NVML event set: %s", ret.Error())
	}
	defer func() { _ = set.Free() }()

	inv := inventory()
	var start []HealthEvent
	for _, g := range inv.GPUs {
		if g.Lost {
			continue // ReadEvidence reports it
		}
		h, ret := w.lib.DeviceGetHandleByUUID(g.UUID)
		if lost(ret) {
			start = append(start, HealthEvent{GPUUUID: g.UUID, Kind: EventGPULost, Time: w.now()})
			continue
		}
		if ret != nvml.SUCCESS {
			return check(ret, "device handle", "GPU "+g.UUID)
		}
		supported, ret := h.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			w.log.Warn("health events not supported; device stays healthy", "gpu", g.UUID, "reason", ret.Error())
			continue
		}
		mask := supported & w.eventMask()
		if mask == 0 {
			w.log.Warn("no critical event types supported; device stays healthy", "gpu", g.UUID)
			continue
		}
		ret = h.RegisterEvents(mask, set)
		if lost(ret) {
			start = append(start, HealthEvent{GPUUUID: g.UUID, Kind: EventGPULost, Time: w.now()})
			continue
		}
		if ret != nvml.SUCCESS {
			return check(ret, "event registration", "GPU "+g.UUID)
		}
	}
	evidence, problems := w.readEvidence(inv, w.state)
	for _, p := range problems {
		w.log.Warn("cannot read failure evidence; the GPU's earlier failures are not known", "gpu", p.GPUUUID, "reason", p.Err.Error())
	}
	for _, ev := range evidence {
		if !slices.ContainsFunc(start, func(s HealthEvent) bool { return s.GPUUUID == ev.GPUUUID && s.Kind == ev.Kind }) {
			start = append(start, ev)
		}
	}
	for _, ev := range start {
		if ev.Kind != EventResetCleared {
			w.log.Warn("GPU unhealthy at start: NVML keeps evidence of an earlier failure",
				"gpu", ev.GPUUUID, "kind", ev.Kind, "count", ev.Count)
		}
		w.send(ctx, out, ev)
	}

	w.watch(ctx, set, inventory, out)
	return nil
}

// watch delivers the events of set, and the evidence read again every
// evidence interval, until ctx ends.
func (w *HealthWatcher) watch(ctx context.Context, set nvml.EventSet, inventory func() *Inventory, out chan<- HealthEvent) {
	nextEvidence := w.now().Add(w.evidence)
	failing := false
	for ctx.Err() == nil {
		data, ret := set.Wait(uint32(w.wait))
		if w.evidence > 0 && !w.now().Before(nextEvidence) {
			nextEvidence = w.now().Add(w.evidence)
			evs, _ := w.readEvidence(inventory(), w.state)
			for _, ev := range evs {
				w.send(ctx, out, ev)
			}
		}
		if failing && (ret == nvml.SUCCESS || ret == nvml.ERROR_TIMEOUT) {
			w.log.Info("NVML events answer again")
			failing = false
		}
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			continue
		case nvml.ERROR_GPU_IS_LOST:
			for _, ev := range w.lostGPUs(inventory()) {
				w.send(ctx, out, ev)
			}
			w.pause(ctx) // a lost GPU answers at once
			continue
		default:
			// NVML failing (a driver unloaded or hung) answers at once:
			// wait a timeout before asking again, and say so once per
			// failure, not per wait.
			if !failing {
				w.log.Warn("waiting for NVML events failed; retrying until NVML answers", "reason", ret.Error())
			}
			failing = true
			w.pause(ctx)
			continue
		}
		for _, ev := range w.events(inventory(), data) {
			w.send(ctx, out, ev)
		}
	}
}

// pause waits one event-wait timeout, or until ctx ends: after a wait
// that failed at once, so that a failing NVML is not asked in a busy loop.
func (w *HealthWatcher) pause(ctx context.Context) {
	t := time.NewTimer(time.Duration(w.wait) * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// lostGPUs names the GPUs that answer ERROR_GPU_IS_LOST now, or every GPU
// when none does (an event wait said a GPU was lost without saying which).
func (w *HealthWatcher) lostGPUs(inv *Inventory) []HealthEvent {
	var evs []HealthEvent
	for _, g := range inv.GPUs {
		if g.Lost || w.probeLost(g.UUID) {
			evs = append(evs, HealthEvent{GPUUUID: g.UUID, Kind: EventGPULost, Time: w.now()})
		}
	}
	if len(evs) > 0 {
		return evs
	}
	w.log.Warn("NVML lost a GPU without saying which; reporting every GPU unhealthy")
	for _, g := range inv.GPUs {
		evs = append(evs, HealthEvent{GPUUUID: g.UUID, Kind: EventGPULost, Time: w.now()})
	}
	return evs
}

// probeLost reports whether the GPU answers ERROR_GPU_IS_LOST to a query
// that needs the device (the volatile ECC counter).
func (w *HealthWatcher) probeLost(uuid string) bool {
	h, ret := w.lib.DeviceGetHandleByUUID(uuid)
	if lost(ret) {
		return true
	}
	if ret != nvml.SUCCESS {
		return false
	}
	_, ret = h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	return lost(ret)
}

// EvidenceProblem is a GPU whose failure evidence could not be read (for
// example ERROR_NO_PERMISSION); its earlier failures are not known.
type EvidenceProblem struct {
	// GPUUUID names the GPU.
	GPUUUID string
	// Err says which query failed and why.
	Err error
}

// ReadEvidence reads, for every GPU of the inventory, the evidence of
// earlier failures that NVML keeps across processes, and returns one
// HealthEvent per finding: EventRetiredPagesPending, EventRowRemapPending,
// EventRowRemapFailure, EventECCVolatileDoubleBit, and EventGPULost for a
// GPU that is (or was, at discovery) lost; with AllEvents also
// EventRecoveryAction (an action is pending), EventNVLinkErrors (links
// failed to recover since the driver loaded) and, for a GPU without any
// pending reset, EventResetCleared. A query the GPU does not support
// (NOT_SUPPORTED, or FUNCTION_NOT_FOUND from an older library) is no
// evidence; any other failure is returned as a problem and is no evidence
// either. It makes at most four NVML calls per GPU, five with AllEvents.
// It reads as the watcher does when it starts, without its memory of
// earlier readings.
func (w *HealthWatcher) ReadEvidence(inv *Inventory) ([]HealthEvent, []EvidenceProblem) {
	fresh := map[string]*gpuState{}
	return w.readEvidence(inv, func(uuid string) *gpuState {
		if st, ok := fresh[uuid]; ok {
			return st
		}
		st := &gpuState{}
		fresh[uuid] = st
		return st
	})
}

// readEvidence is ReadEvidence with the memory of earlier readings that
// state returns per GPU: NVLinks are compared with the links seen active,
// recovery failures with the last count, and EventResetCleared is sent at
// the first reading of a GPU without a pending reset and when one clears.
func (w *HealthWatcher) readEvidence(inv *Inventory, state func(string) *gpuState) ([]HealthEvent, []EvidenceProblem) {
	var evs []HealthEvent
	var problems []EvidenceProblem
	for gi := range inv.GPUs {
		g := &inv.GPUs[gi]
		lostEvent := HealthEvent{GPUUUID: g.UUID, Kind: EventGPULost, Time: w.now()}
		if g.Lost {
			evs = append(evs, lostEvent)
			continue
		}
		h, ret := w.lib.DeviceGetHandleByUUID(g.UUID)
		if lost(ret) {
			evs = append(evs, lostEvent)
			continue
		}
		if ret != nvml.SUCCESS {
			problems = append(problems, EvidenceProblem{g.UUID, check(ret, "device handle", "GPU "+g.UUID)})
			continue
		}
		found, isLost, errs := w.gpuEvidence(h, g, state(g.UUID))
		if isLost {
			evs = append(evs, lostEvent)
			continue
		}
		evs = append(evs, found...)
		for _, err := range errs {
			problems = append(problems, EvidenceProblem{g.UUID, err})
		}
	}
	return evs, problems
}

// answers tells, for one GPU's queries, whether each answered, recording
// a lost GPU or an error otherwise.
type answers struct {
	dev    string
	isLost bool
	errs   []error
}

// answered reports whether a query answered. NOT_SUPPORTED,
// FUNCTION_NOT_FOUND and NOT_FOUND are no answer and no error.
func (a *answers) answered(ret nvml.Return, what string) bool {
	switch {
	case ret == nvml.SUCCESS:
		return true
	case lost(ret):
		a.isLost = true
	case ret != nvml.ERROR_NOT_SUPPORTED && ret != nvml.ERROR_FUNCTION_NOT_FOUND && ret != nvml.ERROR_NOT_FOUND:
		a.errs = append(a.errs, check(ret, what, a.dev))
	}
	return false
}

// memoryEvidence is what NVML says about a GPU's memory repairs.
type memoryEvidence struct {
	retiredPending, remapPending, remapFailed bool
	// known is set when either query answered.
	known bool
}

// readMemory reads pending page retirement and row remapping (two calls).
func readMemory(h nvml.Device, a *answers) memoryEvidence {
	var m memoryEvidence
	pending, ret := h.GetRetiredPagesPendingStatus()
	if a.answered(ret, "retired pages pending status") {
		m.known = true
		m.retiredPending = pending == nvml.FEATURE_ENABLED
	}
	if a.isLost {
		return m
	}
	_, _, remapPending, remapFailed, ret := h.GetRemappedRows()
	if a.answered(ret, "remapped rows") {
		m.known = true
		m.remapPending, m.remapFailed = remapPending, remapFailed
	}
	return m
}

// gpuEvidence reads one GPU's failure evidence.
func (w *HealthWatcher) gpuEvidence(h nvml.Device, g *GPU, st *gpuState) (evs []HealthEvent, isLost bool, errs []error) {
	a := &answers{dev: "GPU " + g.UUID}
	add := func(ev HealthEvent) {
		ev.GPUUUID, ev.Time = g.UUID, w.now()
		evs = append(evs, ev)
	}

	m := readMemory(h, a)
	if a.isLost {
		return nil, true, nil
	}
	var fields linkFields
	if w.all {
		fields = readLinkFields(h, a)
		if a.isLost {
			return nil, true, nil
		}
	}
	pending := m.retiredPending || m.remapPending || fields.action.Pending()
	if m.retiredPending {
		add(HealthEvent{Kind: EventRetiredPagesPending, ResetPending: w.all})
	}
	if m.remapPending {
		add(HealthEvent{Kind: EventRowRemapPending, ResetPending: w.all})
	}
	if m.remapFailed {
		add(HealthEvent{Kind: EventRowRemapFailure, ResetPending: w.all && pending})
	}
	dbe, ret := h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	if a.answered(ret, "volatile uncorrectable ECC errors") && dbe > 0 {
		add(HealthEvent{Kind: EventECCVolatileDoubleBit, Count: dbe, ResetPending: w.all && pending})
	}
	if a.isLost {
		return nil, true, nil
	}
	if !w.all {
		return evs, false, a.errs
	}

	if fields.action.Pending() {
		add(HealthEvent{Kind: EventRecoveryAction, RecoveryAction: fields.action, ResetPending: true})
	}
	st.action = fields.action
	if ev, ok := st.linksDown(fields, g.NVLinks); ok {
		add(ev)
	}
	if ev, ok := st.newLinkFailures(fields); ok {
		ev.ResetPending = pending
		add(ev)
	}
	// Whether a reset is pending is known when a source of reset evidence
	// answered and none failed: a query that failed might hide one.
	if known := (m.known || fields.actionKnown) && len(a.errs) == 0; known {
		if !pending && (!st.resetKnown || st.resetPending) {
			add(HealthEvent{Kind: EventResetCleared})
		}
		st.resetKnown, st.resetPending = true, pending
	}
	return evs, false, a.errs
}

// linkFields is what one GetFieldValues call says of a GPU: its recovery
// action and, per NVLink, its state and recovery failures.
type linkFields struct {
	action      RecoveryAction
	actionKnown bool
	// active are the links that read active; statesKnown once one answered.
	active      LinkSet
	statesKnown bool
	// failures are the recovery failures per link; failuresKnown once one
	// answered.
	failures      [nvml.NVLINK_MAX_LINKS]uint64
	failuresKnown bool
}

// readLinkFields reads the recovery action, and the state and recovery
// failures of every NVLink, in one GetFieldValues call.
func readLinkFields(h nvml.Device, a *answers) linkFields {
	const links = nvml.NVLINK_MAX_LINKS
	values := make([]nvml.FieldValue, 1+2*links)
	values[0] = nvml.FieldValue{FieldId: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION}
	for l := range links {
		values[1+l] = nvml.FieldValue{FieldId: nvml.FI_DEV_NVLINK_GET_STATE, ScopeId: uint32(l)}
		values[1+links+l] = nvml.FieldValue{FieldId: nvml.FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS, ScopeId: uint32(l)}
	}
	var f linkFields
	if !a.answered(h.GetFieldValues(values), "recovery action and NVLink fields") {
		return f
	}
	for i, v := range values {
		ret := nvml.Return(v.NvmlReturn)
		if lost(ret) {
			a.isLost = true
			return f
		}
		if ret != nvml.SUCCESS {
			continue // not supported, or a link past the GPU's last
		}
		switch {
		case i == 0:
			f.action, f.actionKnown = recoveryActionOf(fieldUint(v)), true
		case i <= links:
			f.statesKnown = true
			if fieldUint(v) != 0 {
				f.active = f.active.Add(i - 1)
			}
		default:
			f.failuresKnown = true
			f.failures[i-1-links] = fieldUint(v)
		}
	}
	return f
}

// linksDown compares the links that read active with those seen active
// before (at least as many as discovery counted) and returns an
// EventNVLinkDown while some are down; it remembers links that came up.
func (st *gpuState) linksDown(f linkFields, discovered int) (HealthEvent, bool) {
	if !f.statesKnown {
		return HealthEvent{}, false
	}
	st.links |= f.active
	st.linksKnown = true
	baseline := max(st.links.Len(), discovered)
	down := baseline - f.active.Len()
	if down <= 0 {
		return HealthEvent{}, false
	}
	return HealthEvent{Kind: EventNVLinkDown, Count: uint64(down), Links: st.links &^ f.active}, true
}

// newLinkFailures compares the NVLink recovery failures with the last
// reading: at the first reading any failure counts, then only new ones.
// A count that went down (the driver reloaded) starts again from it.
func (st *gpuState) newLinkFailures(f linkFields) (HealthEvent, bool) {
	if !f.failuresKnown {
		return HealthEvent{}, false
	}
	var ev HealthEvent
	for l, n := range f.failures {
		var before uint64
		if st.failuresKnown {
			before = st.failures[l]
		}
		if n > before {
			ev.Count += n - before
			ev.Links = ev.Links.Add(l)
		}
	}
	st.failures, st.failuresKnown = f.failures, true
	if ev.Count == 0 {
		return HealthEvent{}, false
	}
	ev.Kind = EventNVLinkErrors
	return ev, true
}

// resetEvidence reads whether a GPU needs a reset, for an event on it: its
// recovery action and pending page retirement or row remapping (three
// calls, or none when a reading younger than resetReadTTL serves). A
// pending reset it finds is remembered, so that the evidence reading that
// sees it clear reports EventResetCleared.
func (w *HealthWatcher) resetEvidence(h nvml.Device, uuid string) (pending bool, action RecoveryAction) {
	st := w.state(uuid)
	now := w.now()
	if age := now.Sub(st.resetReadAt); !st.resetReadAt.IsZero() && age >= 0 && age < resetReadTTL {
		return st.readPending, st.action
	}
	a := &answers{dev: "GPU " + uuid}
	m := readMemory(h, a)
	values := []nvml.FieldValue{{FieldId: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION}}
	if a.answered(h.GetFieldValues(values), "recovery action") && nvml.Return(values[0].NvmlReturn) == nvml.SUCCESS {
		action = recoveryActionOf(fieldUint(values[0]))
	}
	for _, err := range a.errs {
		w.log.Debug("cannot read the GPU's reset evidence", "gpu", uuid, "reason", err.Error())
	}
	pending = m.retiredPending || m.remapPending || action.Pending()
	st.resetReadAt, st.readPending = now, pending
	if pending {
		st.resetKnown, st.resetPending = true, true
	}
	return pending, action
}

func (w *HealthWatcher) send(ctx context.Context, out chan<- HealthEvent, ev HealthEvent) {
	select {
	case out <- ev:
	case <-ctx.Done():
	}
}

// events maps one NVML event to the HealthEvents it gives; none for events
// that are dropped (see HealthOptions.AllEvents), of other types, or from
// unknown devices. With AllEvents an XID or error event carries NVML's reset
// evidence, and a recovery action that changed comes as an
// EventRecoveryAction too.
func (w *HealthWatcher) events(inv *Inventory, data nvml.EventData) []HealthEvent {
	var ev HealthEvent
	switch data.EventType {
	case nvml.EventTypeXidCriticalError:
		if w.dropped(data.EventData) {
			w.log.Info("ignoring an XID that leaves the GPU healthy", "xid", data.EventData)
			return nil
		}
		ev.Kind, ev.XID = EventXID, data.EventData
	case nvml.EventTypeDoubleBitEccError:
		ev.Kind = EventECCDoubleBit
	case nvml.EventTypeDramRetirementFailure:
		ev.Kind = EventPageRetirementFailure
	case nvml.EventTypeGpuUnavailableError:
		ev.Kind = EventGPULost
	case nvml.EventTypeGpuRecoveryAction:
		ev.Kind = EventRecoveryAction
	default:
		return nil
	}
	if data.Device == nil {
		return nil
	}
	uuid, ret := data.Device.GetUUID()
	if ret != nvml.SUCCESS {
		w.log.Warn("event from a device without UUID", "reason", ret.Error())
		return nil
	}
	g, found := inv.GPUByUUID(uuid)
	if !found {
		return nil
	}
	ev.GPUUUID, ev.Time = g.UUID, w.now()
	ev.MIGUUID = migOfEvent(g, data.GpuInstanceId, data.ComputeInstanceId)
	if !w.all || ev.Kind == EventGPULost {
		return []HealthEvent{ev}
	}

	st := w.state(g.UUID)
	before := st.action
	pending, action := w.resetEvidence(data.Device, g.UUID)
	ev.ResetPending = pending
	if ev.Kind == EventRecoveryAction {
		st.action = action
		if !action.Pending() {
			return nil // the action was taken; the evidence reading reports it
		}
		ev.RecoveryAction, ev.MIGUUID = action, ""
		return []HealthEvent{ev}
	}
	out := []HealthEvent{ev}
	if action.Pending() && action != before {
		st.action = action
		out = append(out, HealthEvent{GPUUUID: g.UUID, Kind: EventRecoveryAction, RecoveryAction: action, ResetPending: true, Time: ev.Time})
	}
	return out
}

// migOfEvent names the MIG device an event's GI/CI IDs point at, or "" when
// the event names none (or one discovery does not know): the whole GPU.
func migOfEvent(g *GPU, gi, ci uint32) string {
	if gi == noInstance {
		return ""
	}
	for _, m := range g.MIGDevices {
		if uint32(m.GPUInstanceID) == gi && (ci == noInstance || uint32(m.ComputeInstanceID) == ci) {
			return m.UUID
		}
	}
	return ""
}
