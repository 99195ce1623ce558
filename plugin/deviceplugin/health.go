package deviceplugin

import (
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// Health bookkeeping timing.
const (
	// healthPersistDelay is the longest a change that only moves a
	// record's last-seen time or deadline waits before the state file is
	// written: a storm of events on a device already Unhealthy costs one
	// write per delay, not one per event. A device turning Unhealthy is
	// written at once.
	healthPersistDelay = 5 * time.Second
	// healthLogInterval is the least time between two log lines about the
	// health events of one device: the first event is logged at once, the
	// rest as one summary per interval with counts by kind and XID.
	healthLogInterval = 10 * time.Second
)

// healthTracker remembers which GPUs and MIG devices had a critical event
// and lets them recover after a quiet period. Keys are GPU UUIDs (events on
// the whole GPU) and MIG UUIDs (events scoped to one MIG device). With a
// store, the records survive a restart of the process.
type healthTracker struct {
	clock  clock.WithDelayedExecution
	period time.Duration
	// onRecover is called, without locks held, after devices recovered.
	onRecover func(keys []string)
	store     *healthStore
	log       *slog.Logger
	metrics   *metrics

	// writeMu serializes state-file writes; it is taken before mu.
	writeMu sync.Mutex

	mu      sync.Mutex
	recs    map[string]*healthRecord
	timers  map[string]clock.Timer
	pending clock.Timer // a coalesced state-file write
	closed  bool
}

func newHealthTracker(clk clock.WithDelayedExecution, period time.Duration, store *healthStore, log *slog.Logger, met *metrics, onRecover func([]string)) *healthTracker {
	h := &healthTracker{
		clock:     clk,
		period:    period,
		onRecover: onRecover,
		store:     store,
		log:       log,
		metrics:   met,
		recs:      map[string]*healthRecord{},
		timers:    map[string]clock.Timer{},
	}
	h.restore()
	return h
}

// eventKey is the device an event concerns.
func eventKey(ev discovery.HealthEvent) string {
	if ev.MIGUUID != "" {
		return ev.MIGUUID
	}
	return ev.GPUUUID
}

// restore loads the records of the state file whose deadline has not
// passed and schedules their recovery.
func (h *healthTracker) restore() {
	if h.store == nil {
		return
	}
	recs := h.store.load(h.log)
	now := h.clock.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range recs {
		if !r.Deadline.IsZero() && !r.Deadline.After(now) {
			continue
		}
		if r.Deadline.IsZero() && h.period > 0 {
			// Saved while recovery was disabled: a fresh quiet period.
			r.Deadline = now.Add(h.period)
		}
		h.recs[r.Key] = &r
		if !r.Deadline.IsZero() {
			key := r.Key
			h.timers[key] = h.clock.AfterFunc(r.Deadline.Sub(now), func() { h.expire(key) })
		}
		h.log.Warn("device held Unhealthy from the health state file",
			"device", r.Key, "gpu", r.GPUUUID, "mig", r.MIGUUID, "kind", r.Kind, "xid", r.XID,
			"firstSeen", r.FirstSeen.Format(time.RFC3339), "recoverAt", formatDeadline(r.Deadline), "file", h.store.path)
	}
	h.metrics.stateRecords.Set(float64(len(h.recs)))
}

// formatDeadline formats a recovery deadline; zero is "never".
func formatDeadline(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Format(time.RFC3339)
}

// record marks the event's device unhealthy from now on and restarts its
// quiet period. It reports whether the device was healthy before.
func (h *healthTracker) record(ev discovery.HealthEvent) bool {
	key := eventKey(ev)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return false
	}
	now := h.clock.Now()
	r, was := h.recs[key]
	if !was {
		r = &healthRecord{Key: key, GPUUUID: ev.GPUUUID, MIGUUID: ev.MIGUUID, FirstSeen: now}
		h.recs[key] = r
		h.metrics.stateRecords.Set(float64(len(h.recs)))
	}
	r.Kind, r.XID, r.LastSeen = ev.Kind, ev.XID, now
	r.Events++
	if h.period > 0 {
		r.Deadline = now.Add(h.period)
		// One timer per device: expire re-arms it while the deadline
		// keeps moving, so a storm does not create a timer per event.
		if _, ok := h.timers[key]; !ok {
			h.timers[key] = h.clock.AfterFunc(h.period, func() { h.expire(key) })
		}
	}
	h.mu.Unlock()
	h.changed(!was)
	return !was
}

// expire clears key when its quiet period has passed without new events.
func (h *healthTracker) expire(key string) {
	h.mu.Lock()
	r, ok := h.recs[key]
	if !ok || h.closed {
		h.mu.Unlock()
		return
	}
	if wait := r.Deadline.Sub(h.clock.Now()); wait > 0 {
		// A newer event moved the deadline: wait for the rest.
		h.timers[key] = h.clock.AfterFunc(wait, func() { h.expire(key) })
		h.mu.Unlock()
		return
	}
	delete(h.recs, key)
	delete(h.timers, key)
	h.metrics.stateRecords.Set(float64(len(h.recs)))
	h.mu.Unlock()
	h.changed(false)
	h.onRecover([]string{key})
}

// changed has the state file follow the records: at once when urgent,
// else within healthPersistDelay.
func (h *healthTracker) changed(urgent bool) {
	if h.store == nil {
		return
	}
	if urgent {
		h.flush()
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pending != nil || h.closed {
		return
	}
	h.pending = h.clock.AfterFunc(healthPersistDelay, func() {
		h.mu.Lock()
		h.pending = nil
		closed := h.closed
		h.mu.Unlock()
		if !closed {
			h.flush()
		}
	})
}

// flush writes the current records to the state file.
func (h *healthTracker) flush() {
	h.writeMu.Lock()
	defer h.writeMu.Unlock()
	h.mu.Lock()
	recs := make([]healthRecord, 0, len(h.recs))
	for _, r := range h.recs {
		recs = append(recs, *r)
	}
	h.mu.Unlock()
	slices.SortFunc(recs, func(a, b healthRecord) int { return strings.Compare(a.Key, b.Key) })
	if err := h.store.write(recs); err != nil {
		h.metrics.stateWrites.WithLabelValues("error").Inc()
		h.log.Error("writing the health state file; unhealthy devices may be advertised Healthy after a restart", "file", h.store.path, "err", err)
		return
	}
	h.metrics.stateWrites.WithLabelValues("ok").Inc()
}

// unhealthyFunc returns a health check over the current state.
func (h *healthTracker) unhealthyFunc() healthFunc {
	h.mu.Lock()
	bad := make(map[string]bool, len(h.recs))
	for k := range h.recs {
		bad[k] = true
	}
	h.mu.Unlock()
	if len(bad) == 0 {
		return nil
	}
	return func(d *plan.Device) bool {
		return bad[d.GPUUUID] || (d.Kind == plan.DeviceMIG && bad[d.ID])
	}
}

// close stops all recovery timers and writes the state file a last time,
// so the latest deadlines survive a clean shutdown.
func (h *healthTracker) close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	for k, t := range h.timers {
		t.Stop()
		delete(h.timers, k)
	}
	pending := h.pending != nil
	if pending {
		h.pending.Stop()
		h.pending = nil
	}
	h.mu.Unlock()
	if h.store != nil && pending {
		h.flush()
	}
}
