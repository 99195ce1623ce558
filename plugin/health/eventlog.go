package health

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/featureplug/featureplug/discovery"
)

// eventLog keeps health-event logs readable under a storm: per device, the
// first event is logged at once; later events within the interval are
// counted by kind and XID and logged as one summary line when the interval
// ends. An interval without events closes the device's window, so the next
// event is logged at once again. Metrics count every event elsewhere.
type eventLog struct {
	clock    clock.WithDelayedExecution
	interval time.Duration
	log      *slog.Logger

	mu     sync.Mutex
	devs   map[string]*eventWindow
	closed bool
}

// eventWindow is one device's events since its last log line.
type eventWindow struct {
	gpu, mig string
	counts   map[string]uint64 // by "xid 79", "ecc-double-bit", ...
	total    uint64
	timer    clock.Timer
}

func newEventLog(clk clock.WithDelayedExecution, interval time.Duration, log *slog.Logger) *eventLog {
	return &eventLog{clock: clk, interval: interval, log: log, devs: map[string]*eventWindow{}}
}

// countLabel names an event's kind and (bounded) XID in a summary.
func countLabel(ev discovery.HealthEvent) string {
	if ev.Kind == discovery.EventXID {
		return "xid " + xidLabel(ev.XID)
	}
	return kindLabel(ev.Kind)
}

// event logs or counts one event.
func (l *eventLog) event(ev discovery.HealthEvent, d discovery.HealthDecision) {
	key := eventKey(ev)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if w := l.devs[key]; w != nil {
		w.counts[countLabel(ev)]++
		w.total++
		return
	}
	l.devs[key] = &eventWindow{
		gpu: ev.GPUUUID, mig: ev.MIGUUID, counts: map[string]uint64{},
		timer: l.clock.AfterFunc(l.interval, func() { l.flush(key) }),
	}
	if !d.Effect.Unhealthy() {
		l.log.Info("health event counted; the device stays Healthy", "gpu", ev.GPUUUID, "mig", ev.MIGUUID,
			"kind", ev.Kind, "xid", ev.XID, "because", d.Because)
		return
	}
	l.log.Warn("device unhealthy", "gpu", ev.GPUUUID, "mig", ev.MIGUUID, "kind", ev.Kind, "xid", ev.XID,
		"effect", d.Effect, "because", d.Because)
}

// flush ends one interval of a device: a summary of its events, or, when
// there were none, the end of its window.
func (l *eventLog) flush(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.devs[key]
	if w == nil || l.closed {
		return
	}
	if w.total == 0 {
		delete(l.devs, key)
		return
	}
	labels := make([]string, 0, len(w.counts))
	for k := range w.counts {
		labels = append(labels, k)
	}
	slices.Sort(labels)
	parts := make([]string, len(labels))
	for i, k := range labels {
		parts[i] = fmt.Sprintf("%s: %d", k, w.counts[k])
	}
	l.log.Warn("device health events continue", "gpu", w.gpu, "mig", w.mig,
		"events", w.total, "interval", l.interval, "counts", strings.Join(parts, ", "))
	clear(w.counts)
	w.total = 0
	w.timer = l.clock.AfterFunc(l.interval, func() { l.flush(key) })
}

// close stops the timers; counted events not yet summarized are logged.
func (l *eventLog) close() {
	l.mu.Lock()
	keys := make([]string, 0, len(l.devs))
	for k, w := range l.devs {
		w.timer.Stop()
		if w.total > 0 {
			keys = append(keys, k)
		}
	}
	l.mu.Unlock()
	slices.Sort(keys)
	for _, k := range keys {
		l.flush(k)
	}
	l.mu.Lock()
	l.closed = true
	for _, w := range l.devs {
		w.timer.Stop()
	}
	l.mu.Unlock()
}
