package plugin

import (
	"sync"
	"time"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules"
)

// healthTracker remembers which GPUs and MIG devices had a critical event
// and lets them recover after a quiet period. Keys are GPU UUIDs (events on
// the whole GPU) and MIG UUIDs (events scoped to one MIG device).
type healthTracker struct {
	clock  Clock
	period time.Duration
	// onRecover is called, without locks held, after devices recovered.
	onRecover func(keys []string)

	mu     sync.Mutex
	last   map[string]time.Time
	timers map[string]Timer
	closed bool
}

func newHealthTracker(clock Clock, period time.Duration, onRecover func([]string)) *healthTracker {
	return &healthTracker{
		clock:     clock,
		period:    period,
		onRecover: onRecover,
		last:      map[string]time.Time{},
		timers:    map[string]Timer{},
	}
}

// key is the device an event concerns.
func eventKey(ev discovery.HealthEvent) string {
	if ev.MIGUUID != "" {
		return ev.MIGUUID
	}
	return ev.GPUUUID
}

// record marks the event's device unhealthy from now on and restarts its
// quiet period. It reports whether the device was healthy before.
func (h *healthTracker) record(ev discovery.HealthEvent) bool {
	key := eventKey(ev)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	_, was := h.last[key]
	h.last[key] = h.clock.Now()
	if h.period > 0 {
		if t, ok := h.timers[key]; ok {
			t.Stop()
		}
		h.timers[key] = h.clock.AfterFunc(h.period, func() { h.expire(key) })
	}
	return !was
}

// expire clears key when its quiet period has passed without new events.
func (h *healthTracker) expire(key string) {
	h.mu.Lock()
	last, ok := h.last[key]
	if !ok || h.closed {
		h.mu.Unlock()
		return
	}
	if wait := h.period - h.clock.Now().Sub(last); wait > 0 {
		// A newer event arrived while this timer fired: wait for the rest.
		h.timers[key] = h.clock.AfterFunc(wait, func() { h.expire(key) })
		h.mu.Unlock()
		return
	}
	delete(h.last, key)
	delete(h.timers, key)
	h.mu.Unlock()
	h.onRecover([]string{key})
}

// unhealthyFunc returns a health check over the current state.
func (h *healthTracker) unhealthyFunc() healthFunc {
	h.mu.Lock()
	bad := make(map[string]bool, len(h.last))
	for k := range h.last {
		bad[k] = true
	}
	h.mu.Unlock()
	if len(bad) == 0 {
		return nil
	}
	return func(d *rules.Device) bool {
		return bad[d.GPUUUID] || (d.Kind == rules.DeviceMIG && bad[d.ID])
	}
}

// close stops all recovery timers.
func (h *healthTracker) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for k, t := range h.timers {
		t.Stop()
		delete(h.timers, k)
	}
}
