package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// noInstance is the GPU or compute instance ID of an event that names none.
const noInstance = 0xFFFFFFFF

// defaultWaitTimeout bounds how long one NVML event wait blocks, and so how
// quickly the watcher notices its context ending.
const defaultWaitTimeout = 100 * time.Millisecond

// HealthOptions configure a HealthWatcher.
type HealthOptions struct {
	// IgnoredXIDs are XIDs that never make a device unhealthy. Nil means
	// DefaultIgnoredXIDs(); an empty, non-nil slice ignores none.
	IgnoredXIDs []uint64
	// WaitTimeout bounds one NVML event wait (default 100ms).
	WaitTimeout time.Duration
	// Logger receives watcher diagnostics (default: discarded).
	Logger *slog.Logger
	// Now returns the current time (default time.Now).
	Now func() time.Time
}

// HealthWatcher turns NVML events (critical XIDs, double-bit ECC errors)
// into per-device HealthEvents.
type HealthWatcher struct {
	lib     nvml.Interface
	ignored []uint64
	wait    int
	log     *slog.Logger
	now     func() time.Time
}

// NewHealthWatcher returns a watcher over lib, which must be initialized.
func NewHealthWatcher(lib nvml.Interface, o HealthOptions) *HealthWatcher {
	w := &HealthWatcher{lib: lib, ignored: o.IgnoredXIDs, log: o.Logger, now: o.Now}
	if w.ignored == nil {
		w.ignored = DefaultIgnoredXIDs()
	}
	timeout := o.WaitTimeout
	if timeout <= 0 {
		timeout = defaultWaitTimeout
	}
	w.wait = int(timeout / time.Millisecond)
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
func (w *HealthWatcher) Run(ctx context.Context, inventory func() *Inventory, out chan<- HealthEvent) error {
	set, ret := w.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("creating NVML event set: %s", ret.Error())
	}
	defer func() { _ = set.Free() }()

	inv := inventory()
	for _, g := range inv.GPUs {
		h, ret := w.lib.DeviceGetHandleByUUID(g.UUID)
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
		if ret := h.RegisterEvents(mask, set); ret != nvml.SUCCESS {
			return check(ret, "event registration", "GPU "+g.UUID)
		}
	}

	for ctx.Err() == nil {
		data, ret := set.Wait(uint32(w.wait))
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			continue
		case nvml.ERROR_GPU_IS_LOST:
			for _, g := range inventory().GPUs {
				w.send(ctx, out, HealthEvent{GPUUUID: g.UUID, Kind: EventGPULost, Time: w.now()})
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
