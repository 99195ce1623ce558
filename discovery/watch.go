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

// defaultEvidenceInterval is how often the watcher reads the failure
// evidence NVML keeps again: often enough that a GPU with lasting evidence
// never reaches the plugin's recovery period (5 minutes by default).
const defaultEvidenceInterval = time.Minute

// HealthOptions configure a HealthWatcher.
type HealthOptions struct {
	// IgnoredXIDs are XIDs that never make a device unhealthy. Nil means
	// DefaultIgnoredXIDs(); an empty, non-nil slice ignores none.
	IgnoredXIDs []uint64
	// WaitTimeout bounds one NVML event wait (default 100ms): how long Run
	// takes to return after its context ends. Events are delivered as soon
	// as NVML has them, whatever the timeout.
	WaitTimeout time.Duration
	// EvidenceInterval is how often the evidence of earlier failures
	// (pending retired pages or row remappings, volatile double-bit ECC
	// counts) is read again after the first reading at start; while it
	// lasts the GPU's HealthEvent is sent again, so the GPU stays
	// unhealthy. Default 1 minute; negative: read only at start.
	EvidenceInterval time.Duration
	// Logger receives watcher diagnostics (default: discarded).
	Logger *slog.Logger
	// Clock stamps the events and paces EvidenceInterval (default the real
	// clock; tests pass k8s.io/utils/clock/testing's fake clocks).
	Clock clock.PassiveClock
}

// HealthWatcher turns NVML events (critical XIDs, double-bit ECC errors)
// into per-device HealthEvents.
type HealthWatcher struct {
	lib      nvml.Interface
	ignored  []uint64
	wait     int
	evidence time.Duration
	log      *slog.Logger
	now      func() time.Time
}

// NewHealthWatcher returns a watcher over lib, which must be initialized.
func NewHealthWatcher(lib nvml.Interface, o HealthOptions) *HealthWatcher {
	w := &HealthWatcher{lib: lib, ignored: o.IgnoredXIDs, log: o.Logger}
	if o.Clock != nil {
		w.now = o.Clock.Now
	}
	if w.ignored == nil {
		w.ignored = DefaultIgnoredXIDs()
	}
	timeout := o.WaitTimeout
	if timeout <= 0 {
		timeout = defaultWaitTimeout
	}
	w.wait = int(timeout / time.Millisecond)
	w.evidence = o.EvidenceInterval
	if w.evidence == 0 {
		w.evidence = defaultEvidenceInterval
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.now == nil {
		w.now = time.Now
	}
	return w
}

// Run registers for critical events on every GPU of the inventory and sends
// a HealthEvent on out for each one that is not ignored, until ctx ends. The
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
		mask := supported & (nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError)
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
	evidence, problems := w.ReadEvidence(inv)
	for _, p := range problems {
		w.log.Warn("cannot read failure evidence; the GPU's earlier failures are not known", "gpu", p.GPUUUID, "reason", p.Err.Error())
	}
	for _, ev := range evidence {
		if !slices.ContainsFunc(start, func(s HealthEvent) bool { return s.GPUUUID == ev.GPUUUID && s.Kind == ev.Kind }) {
			start = append(start, ev)
		}
	}
	for _, ev := range start {
		w.log.Warn("GPU unhealthy at start: NVML keeps evidence of an earlier failure",
			"gpu", ev.GPUUUID, "kind", ev.Kind, "count", ev.Count)
		w.send(ctx, out, ev)
	}

	nextEvidence := w.now().Add(w.evidence)
	for ctx.Err() == nil {
		data, ret := set.Wait(uint32(w.wait))
		if w.evidence > 0 && !w.now().Before(nextEvidence) {
			nextEvidence = w.now().Add(w.evidence)
			evs, _ := w.ReadEvidence(inventory())
			for _, ev := range evs {
				w.send(ctx, out, ev)
			}
		}
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			continue
		case nvml.ERROR_GPU_IS_LOST:
			for _, ev := range w.lostGPUs(inventory()) {
				w.send(ctx, out, ev)
			}
			continue
		default:
			w.log.Warn("waiting for NVML events failed", "reason", ret.Error())
			continue
		}
		ev, ok := w.event(inventory(), data)
		if ok {
			w.send(ctx, out, ev)
		}
	}
	return nil
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
// GPU that is (or was, at discovery) lost. A query the GPU does not support
// (NOT_SUPPORTED, or FUNCTION_NOT_FOUND from an older library) is no
// evidence; any other failure is returned as a problem and is no evidence
// either. It makes at most four NVML calls per GPU.
func (w *HealthWatcher) ReadEvidence(inv *Inventory) ([]HealthEvent, []EvidenceProblem) {
	var evs []HealthEvent
	var problems []EvidenceProblem
	for _, g := range inv.GPUs {
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
		found, isLost, errs := w.gpuEvidence(h, g.UUID)
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

// gpuEvidence reads one GPU's failure evidence.
func (w *HealthWatcher) gpuEvidence(h nvml.Device, uuid string) (evs []HealthEvent, isLost bool, errs []error) {
	dev := "GPU " + uuid
	// answered reports whether a query answered, recording a lost GPU or
	// an error otherwise.
	answered := func(ret nvml.Return, what string) bool {
		switch {
		case ret == nvml.SUCCESS:
			return true
		case lost(ret):
			isLost = true
		case ret != nvml.ERROR_NOT_SUPPORTED && ret != nvml.ERROR_FUNCTION_NOT_FOUND && ret != nvml.ERROR_NOT_FOUND:
			errs = append(errs, check(ret, what, dev))
		}
		return false
	}
	add := func(kind HealthEventKind, count uint64) {
		evs = append(evs, HealthEvent{GPUUUID: uuid, Kind: kind, Count: count, Time: w.now()})
	}

	pending, ret := h.GetRetiredPagesPendingStatus()
	if answered(ret, "retired pages pending status") && pending == nvml.FEATURE_ENABLED {
		add(EventRetiredPagesPending, 0)
	}
	if isLost {
		return nil, true, nil
	}
	_, _, remapPending, remapFailed, ret := h.GetRemappedRows()
	if answered(ret, "remapped rows") {
		if remapPending {
			add(EventRowRemapPending, 0)
		}
		if remapFailed {
			add(EventRowRemapFailure, 0)
		}
	}
	if isLost {
		return nil, true, nil
	}
	dbe, ret := h.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	if answered(ret, "volatile uncorrectable ECC errors") && dbe > 0 {
		add(EventECCVolatileDoubleBit, dbe)
	}
	if isLost {
		return nil, true, nil
	}
	return evs, false, errs
}

func (w *HealthWatcher) send(ctx context.Context, out chan<- HealthEvent, ev HealthEvent) {
	select {
	case out <- ev:
	case <-ctx.Done():
	}
}

// event maps one NVML event to a HealthEvent; ok is false for events that
// do not affect health (ignored XIDs, other types, unknown devices).
func (w *HealthWatcher) event(inv *Inventory, data nvml.EventData) (HealthEvent, bool) {
	var ev HealthEvent
	switch data.EventType {
	case nvml.EventTypeXidCriticalError:
		if slices.Contains(w.ignored, data.EventData) {
			w.log.Info("ignoring application XID", "xid", data.EventData)
			return ev, false
		}
		ev.Kind, ev.XID = EventXID, data.EventData
	case nvml.EventTypeDoubleBitEccError:
		ev.Kind = EventECCDoubleBit
	default:
		return ev, false
	}
	if data.Device == nil {
		return ev, false
	}
	uuid, ret := data.Device.GetUUID()
	if ret != nvml.SUCCESS {
		w.log.Warn("event from a device without UUID", "reason", ret.Error())
		return ev, false
	}
	g, found := inv.GPUByUUID(uuid)
	if !found {
		return ev, false
	}
	ev.GPUUUID, ev.Time = g.UUID, w.now()
	ev.MIGUUID = migOfEvent(g, data.GpuInstanceId, data.ComputeInstanceId)
	return ev, true
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
