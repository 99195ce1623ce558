// Package health is featureplug's one record of device health: a Tracker
// that the NVML health watcher feeds (discovery.HealthEvent) and that every
// API serving the devices reads: the device plugins (Unhealthy in
// ListAndWatch, refused by Allocate), the DRA ResourceSlice (taints) and
// the DRA device health streams.
//
// A critical event marks a device Unhealthy: a whole GPU with its MIG
// devices and replicas, or a single MIG device with its replicas. A
// condition a probe finds (SetConditions: a GPU passed through to VMs that
// left vfio-pci) holds a device Unhealthy while it lasts. A device
// recovers after a quiet period without new events (Options.Recovery; 0
// disables recovery). With a state directory, the records (device, kind,
// XID, first and last event, recovery deadline) are kept in its
// statedir.HealthFile, written atomically at once when a device turns
// Unhealthy and at most every few seconds while a storm only moves
// deadlines, so that a restarted agent advertises them Unhealthy from its
// first ListAndWatch until their deadline. A write that fails (a full or
// read-only disk) is retried with a backoff until it succeeds. Events are
// logged per device as the first event, then one summary line per 10 s
// with counts by kind and XID; featureplug_plugin_health_events_total
// counts every event, its xid label bounded to a table of known XIDs and
// "other".
package health

import (
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/statedir"
	"github.com/featureplug/featureplug/rules/plan"
)

// DefaultRecovery is the quiet period after which an unhealthy device is
// healthy again.
const DefaultRecovery = 5 * time.Minute

// Timing of the tracker.
const (
	// persistDelay is the longest a change that only moves a record's
	// last-seen time or deadline waits before the state file is written:
	// a storm of events on a device already Unhealthy costs one write per
	// delay, not one per event. A device turning Unhealthy is written at
	// once.
	persistDelay = 5 * time.Second
	// logInterval is the least time between two log lines about the
	// health events of one device: the first event is logged at once, the
	// rest as one summary per interval with counts by kind and XID.
	logInterval = 10 * time.Second
)

// DefaultRetryBackoff paces the retries of a state file write that
// failed: 1 s, doubling to 30 s, each lengthened by up to half.
var DefaultRetryBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.5, Steps: 1 << 30, Cap: 30 * time.Second}

// Options configure a Tracker. The zero value is usable: recovery
// disabled, no state file.
type Options struct {
	// Recovery is the quiet period after the last critical event after
	// which a device is Healthy again; 0 disables recovery.
	Recovery time.Duration
	// StateDir keeps the records across restarts (statedir.HealthFile);
	// empty keeps them in memory only.
	StateDir statedir.Dir
	// RetryBackoff paces the retries of a failed state file write
	// (default DefaultRetryBackoff).
	RetryBackoff wait.Backoff
	// Clock drives recovery, the write delay and retries, and the log
	// summaries (default the real clock).
	Clock clock.WithDelayedExecution
	// Logger receives the tracker's logs (default discarded).
	Logger *slog.Logger
	// Registerer, when set, receives the tracker's metrics.
	Registerer prometheus.Registerer
}

// Device is a device held Unhealthy.
type Device struct {
	// Key is the device held Unhealthy: a MIG UUID for an event on one
	// MIG device, else a GPU UUID (the GPU and all its MIG devices).
	Key string
	// GPUUUID is the physical GPU; MIGUUID the MIG device, if any.
	GPUUUID, MIGUUID string
	// Kind and XID are those of the latest event.
	Kind discovery.HealthEventKind
	XID  uint64
}

// Tracker remembers which GPUs and MIG devices had a critical event and
// lets them recover after a quiet period. Keys are GPU UUIDs (events on
// the whole GPU) and MIG UUIDs (events scoped to one MIG device). Its
// methods are safe for concurrent use.
type Tracker struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics
	store   *store
	events  *eventLog

	// writeMu serializes state-file writes; it is taken before mu.
	writeMu sync.Mutex

	mu          sync.Mutex
	recs        map[string]*record
	conds       map[string]map[string]Condition // by source, then device (condition.go)
	timers      map[string]clock.Timer
	pending     clock.Timer // a coalesced or retried state-file write
	retry       wait.Backoff
	failures    int // consecutive failed writes
	subscribers []func()
	closed      bool
}

// New returns a Tracker holding the records of the state file whose
// deadline has not passed (a file that cannot be read is logged and
// ignored). Bad options and metrics that cannot be registered are errors.
func New(opts Options) (*Tracker, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.RetryBackoff.Duration <= 0 {
		opts.RetryBackoff = DefaultRetryBackoff
	}
	if opts.Recovery < 0 {
		return nil, errorf("recovery: %v is negative (0 disables recovery)", opts.Recovery)
	}
	met, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	t := &Tracker{
		opts:    opts,
		log:     opts.Logger,
		metrics: met,
		store:   newStore(opts.StateDir),
		events:  newEventLog(opts.Clock, logInterval, opts.Logger),
		recs:    map[string]*record{},
		conds:   map[string]map[string]Condition{},
		timers:  map[string]clock.Timer{},
		retry:   opts.RetryBackoff,
	}
	t.restore()
	return t, nil
}

// Subscribe registers f, called without the tracker's locks after the set
// of unhealthy devices changed (a device turned Unhealthy or recovered).
func (t *Tracker) Subscribe(f func()) {
	t.mu.Lock()
	t.subscribers = append(t.subscribers, f)
	t.mu.Unlock()
}

// notify calls the subscribers.
func (t *Tracker) notify() {
	t.mu.Lock()
	subs := slices.Clone(t.subscribers)
	t.mu.Unlock()
	for _, f := range subs {
		f()
	}
}

// eventKey is the device an event concerns.
func eventKey(ev discovery.HealthEvent) string {
	if ev.MIGUUID != "" {
		return ev.MIGUUID
	}
	return ev.GPUUUID
}

// Record takes one critical health event: the GPU's devices (with their
// MIG devices and replicas) or the one MIG device (with its replicas) are
// Unhealthy from now on, and Healthy again after the quiet period without
// further events.
func (t *Tracker) Record(ev discovery.HealthEvent) {
	if ev.GPUUUID == "" && ev.MIGUUID == "" {
		t.log.Warn("ignoring a health event that names no device", "kind", ev.Kind, "xid", ev.XID)
		return
	}
	t.metrics.events.WithLabelValues(kindLabel(ev.Kind), xidLabel(ev.XID)).Inc()
	newly := t.record(ev)
	t.events.event(ev)
	if newly {
		t.notify()
	}
}

// record marks the event's device unhealthy and restarts its quiet
// period. It reports whether the device was healthy before.
func (t *Tracker) record(ev discovery.HealthEvent) bool {
	key := eventKey(ev)
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return false
	}
	now := t.opts.Clock.Now()
	r, was := t.recs[key]
	if !was {
		r = &record{Key: key, GPUUUID: ev.GPUUUID, MIGUUID: ev.MIGUUID, FirstSeen: now}
		t.recs[key] = r
		t.metrics.records.Set(float64(len(t.recs)))
	}
	r.Kind, r.XID, r.LastSeen = ev.Kind, ev.XID, now
	r.Events++
	if t.opts.Recovery > 0 {
		r.Deadline = now.Add(t.opts.Recovery)
		// One timer per device: expire re-arms it while the deadline
		// keeps moving, so a storm does not create a timer per event.
		if _, ok := t.timers[key]; !ok {
			t.timers[key] = t.opts.Clock.AfterFunc(t.opts.Recovery, func() { t.expire(key) })
		}
	}
	t.mu.Unlock()
	t.changed(!was)
	return !was
}

// expire clears key when its quiet period has passed without new events.
func (t *Tracker) expire(key string) {
	t.mu.Lock()
	r, ok := t.recs[key]
	if !ok || t.closed {
		t.mu.Unlock()
		return
	}
	if left := r.Deadline.Sub(t.opts.Clock.Now()); left > 0 {
		// A newer event moved the deadline: wait for the rest.
		t.timers[key] = t.opts.Clock.AfterFunc(left, func() { t.expire(key) })
		t.mu.Unlock()
		return
	}
	delete(t.recs, key)
	delete(t.timers, key)
	t.metrics.records.Set(float64(len(t.recs)))
	t.mu.Unlock()
	t.changed(false)
	t.log.Info("devices recovered after a quiet period", "devices", []string{key}, "quietPeriod", t.opts.Recovery)
	t.notify()
}

// Unhealthy returns the devices held Unhealthy now (from health events,
// or from the state file until their recovery deadline, or by a condition
// while it lasts), sorted by key.
func (t *Tracker) Unhealthy() []Device {
	t.mu.Lock()
	out := make([]Device, 0, len(t.recs))
	for _, r := range t.recs {
		out = append(out, Device{Key: r.Key, GPUUUID: r.GPUUUID, MIGUUID: r.MIGUUID, Kind: r.Kind, XID: r.XID})
	}
	for k, c := range t.conditionsLocked() {
		if _, ok := t.recs[k]; !ok {
			out = append(out, Device{Key: k, GPUUUID: k, Kind: c.Kind})
		}
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b Device) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Func returns a check of the health of plan devices as it is now: true
// for a device held Unhealthy (its GPU, or it as a MIG device; a VFIO
// device by its PCI address). It is nil while every device is healthy.
func (t *Tracker) Func() func(d *plan.Device) bool {
	t.mu.Lock()
	bad := make(map[string]bool, len(t.recs))
	for k := range t.recs {
		bad[k] = true
	}
	for k := range t.conditionsLocked() {
		bad[k] = true
	}
	t.mu.Unlock()
	if len(bad) == 0 {
		return nil
	}
	return func(d *plan.Device) bool {
		return bad[d.GPUUUID] || (d.Kind == plan.DeviceMIG && bad[d.ID])
	}
}

// Close stops the recovery timers and the log summaries, and writes the
// state file a last time when a write was pending, so that the latest
// deadlines survive a clean shutdown.
func (t *Tracker) Close() {
	t.events.close()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	for k, tm := range t.timers {
		tm.Stop()
		delete(t.timers, k)
	}
	pending := t.pending != nil
	if pending {
		t.pending.Stop()
		t.pending = nil
	}
	t.mu.Unlock()
	if t.store != nil && pending {
		t.flush()
	}
}
