// Package health is featureplug's one record of device health: a Tracker
// that the NVML health watcher feeds (discovery.HealthEvent) and that every
// API serving the devices reads: the device plugins (Unhealthy in
// ListAndWatch, refused by Allocate), the DRA ResourceSlice (taints) and
// the DRA device health streams.
//
// The tracker decides what each event does with discovery.Decide under the
// node's health policy (the agent's flags overridden by the rules file's
// health section): nothing, count only (the device stays Healthy), or a
// hold that keeps the device Unhealthy until what ends it: a quiet period
// without events (until-quiet), NVML's evidence that the GPU was reset
// (until-reset, ended by discovery.EventResetCleared), or a new boot ID
// (until-reboot). A hold is on a whole GPU with its MIG devices and
// replicas, or on a single MIG device with its replicas. Besides holds, a
// condition a source finds (SetConditions: a GPU passed through to VMs
// that left vfio-pci; NVMLFailing: NVML failing as a whole) keeps devices
// Unhealthy while it lasts.
//
// With a state directory, the holds are kept in its statedir.HealthFile,
// written atomically at once when a device turns Unhealthy or gets a
// stronger hold, and at most every few seconds while a storm only moves
// deadlines, so that a restarted agent advertises them Unhealthy from its
// first ListAndWatch until they end. A write that fails (a full or
// read-only disk) is retried with a backoff until it succeeds. Events are
// logged per device as the first event, then one summary line per 10 s
// with counts by kind and XID; featureplug_plugin_health_events_total
// counts every event, its xid label bounded to the catalog and "other".
package health

import (
	"log/slog"
	"maps"
	"slices"
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
	// persistDelay is the longest a change that only moves a hold's
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

// Options configure a Tracker. The zero value is usable: the catalog's
// default policy with recovery disabled, no state file.
type Options struct {
	// Recovery is the quiet period of until-quiet holds when Policy sets
	// none; 0 disables recovery.
	Recovery time.Duration
	// Policy is the policy under the rules file's (SetPolicy): the
	// agent's flags. Its QuietPeriod, when set, wins over Recovery.
	Policy discovery.HealthPolicy
	// BootID is the node's boot (discovery.ReadBootID): until-reboot holds
	// taken in another boot end. Empty: unknown, which ends none.
	BootID string
	// StateDir keeps the holds across restarts (statedir.HealthFile);
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

// Device is a device held Unhealthy, with why and until when.
type Device struct {
	// Key is the device held Unhealthy: a MIG UUID for an event on one
	// MIG device, else a GPU UUID (the GPU and all its MIG devices).
	Key string `json:"device"`
	// GPUUUID is the physical GPU; MIGUUID the MIG device, if any.
	GPUUUID string `json:"gpuUUID"`
	MIGUUID string `json:"migUUID,omitempty"`
	// Kind and XID are those of the latest event of the strongest hold
	// (empty for a device held by a condition only).
	Kind discovery.HealthEventKind `json:"kind,omitempty"`
	XID  uint64                    `json:"xid,omitempty"`
	// Effect is the strongest hold's effect; empty for a condition only.
	Effect discovery.HealthEffect `json:"effect,omitempty"`
	// Reason is a short, bounded label: Reason(Kind, XID), or the
	// condition's reason ("nvml-unavailable").
	Reason string `json:"reason"`
	// Message says in one line why and what ends it.
	Message string `json:"message,omitempty"`
	// Since is when the device turned Unhealthy.
	Since time.Time `json:"since,omitzero"`
	// Until is when it is Healthy again unless more events come; zero
	// when no time ends it (a reset, a reboot, a condition, or no
	// recovery).
	Until time.Time `json:"until,omitzero"`
	// WaitsFor says in a few words what ends it.
	WaitsFor string `json:"waitsFor,omitempty"`
}

// Tracker keeps the holds and conditions that make devices Unhealthy.
// Keys are GPU UUIDs (the whole GPU) and MIG UUIDs (one MIG device). Its
// methods are safe for concurrent use.
type Tracker struct {
	opts    Options
	base    discovery.HealthPolicy
	log     *slog.Logger
	metrics *metrics
	store   *store
	events  *eventLog

	// writeMu serializes state-file writes; it is taken before mu.
	writeMu sync.Mutex

	mu     sync.Mutex
	policy discovery.HealthPolicy
	recs   map[string]*record
	conds  map[string]map[string]Condition // by source, then device (condition.go)
	timers map[string]clock.Timer
	served []servedDevice // the plan's devices (SetPlan)
	// nvmlErr is why NVML fails as a whole (nvml.go), nil while it
	// answers; nvmlSince when it began, nvmlGPUs the GPUs it fences.
	nvmlErr     error
	nvmlSince   time.Time
	nvmlGPUs    []string
	pending     clock.Timer // a coalesced or retried state-file write
	retry       wait.Backoff
	failures    int // consecutive failed writes
	subscribers []func()
	closed      bool
}

// New returns a Tracker holding the holds of the state file that have not
// ended (a file that cannot be read is logged and ignored). Bad options
// and metrics that cannot be registered are errors.
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
	base := discovery.HealthPolicy{}.With(&opts.Policy)
	if base.QuietPeriod == nil {
		q := discovery.Period(opts.Recovery)
		base.QuietPeriod = &q
	}
	met, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	t := &Tracker{
		opts:    opts,
		base:    base,
		policy:  base,
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
	t.updateGaugeLocked()
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(deviceHealthCollector{t}); err != nil {
			return nil, errorf("registering featureplug_device_health: %v", err)
		}
	}
	return t, nil
}

// SetPolicy makes over (the node's plan.Plan.Health; nil: none) override
// the Options' policy for the events to come; holds already taken keep
// what they wait for. A change of fenceOnNVMLFailure applies at once.
func (t *Tracker) SetPolicy(over *discovery.HealthPolicy) {
	t.mu.Lock()
	t.policy = t.base.With(over)
	t.mu.Unlock()
	t.applyNVMLFence()
}

// Policy returns the policy the tracker decides events with.
func (t *Tracker) Policy() discovery.HealthPolicy {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.policy.With(nil)
}

// Subscribe registers f, called without the tracker's locks after the set
// of unhealthy devices or what a device's health says changed.
func (t *Tracker) Subscribe(f func()) {
	t.mu.Lock()
	t.subscribers = append(t.subscribers, f)
	t.mu.Unlock()
}

// notify updates the health gauge and calls the subscribers.
func (t *Tracker) notify() {
	t.mu.Lock()
	t.updateGaugeLocked()
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

// Record takes one health event and does what the policy decides: an
// until-* effect holds the event's device (the GPU with its MIG devices
// and replicas, or the one MIG device with its replicas) Unhealthy until
// what ends it; a count leaves it Healthy and is logged and counted; an
// EventResetCleared ends the until-reset holds of its GPU.
func (t *Tracker) Record(ev discovery.HealthEvent) {
	if ev.GPUUUID == "" && ev.MIGUUID == "" {
		t.log.Warn("ignoring a health event that names no device", "kind", ev.Kind, "xid", ev.XID)
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	d := discovery.Decide(ev, t.policy)
	var newly, stronger, ended bool
	switch {
	case d.EndsReset:
		ended = t.endResetLocked(ev.GPUUUID)
	case d.Effect.Unhealthy():
		newly, stronger = t.holdLocked(ev, d)
	}
	t.mu.Unlock()
	if ev.Kind != discovery.EventResetCleared {
		t.metrics.events.WithLabelValues(kindLabel(ev.Kind), xidLabel(ev.XID), string(d.Effect)).Inc()
	}
	if d.Effect.Unhealthy() || d.Effect == discovery.EffectCount {
		t.events.event(ev, d)
	}
	switch {
	case newly || stronger || ended:
		t.changed(true)
		t.notify()
	case d.Effect.Unhealthy():
		t.changed(false)
	}
	if ended {
		t.log.Info("GPU reset seen through NVML: its until-reset holds end", "gpu", ev.GPUUUID)
	}
}

// holdLocked puts the hold of decision d on ev's device. It reports
// whether the device was Healthy before and whether its hold's effect is
// new to it. t.mu is held.
func (t *Tracker) holdLocked(ev discovery.HealthEvent, d discovery.HealthDecision) (newly, stronger bool) {
	now := t.opts.Clock.Now()
	h, _ := newHold(ev, d, now, t.opts.BootID)
	key := eventKey(ev)
	r, was := t.recs[key]
	if !was {
		r = &record{Key: key, GPUUUID: ev.GPUUUID, MIGUUID: ev.MIGUUID}
		t.recs[key] = r
	}
	stronger = r.hold(h)
	if q := r.quiet(); q != nil && !q.Until.IsZero() {
		t.armLocked(key, q.Until)
	}
	return !was, stronger && was
}

// armLocked makes sure key's timer fires by at; expire re-arms it while
// the deadline moves, so a storm does not make a timer per event.
func (t *Tracker) armLocked(key string, at time.Time) {
	if _, ok := t.timers[key]; ok {
		return
	}
	t.timers[key] = t.opts.Clock.AfterFunc(at.Sub(t.opts.Clock.Now()), func() { t.expire(key) })
}

// endResetLocked drops the until-reset holds of gpu and of its MIG
// devices; it reports whether any was. t.mu is held.
func (t *Tracker) endResetLocked(gpu string) bool {
	var any bool
	for key, r := range t.recs {
		if r.GPUUUID != gpu {
			continue
		}
		if r.drop(func(h Hold) bool { return h.Effect == discovery.EffectUntilReset }) {
			any = true
			t.pruneLocked(key, r)
		}
	}
	return any
}

// pruneLocked deletes r (key's record) when no hold is left. t.mu is held.
func (t *Tracker) pruneLocked(key string, r *record) {
	if len(r.Holds) > 0 {
		return
	}
	delete(t.recs, key)
	if tm, ok := t.timers[key]; ok {
		tm.Stop()
		delete(t.timers, key)
	}
}

// expire ends key's holds whose time has come.
func (t *Tracker) expire(key string) {
	t.mu.Lock()
	delete(t.timers, key)
	r, ok := t.recs[key]
	if !ok || t.closed {
		t.mu.Unlock()
		return
	}
	now := t.opts.Clock.Now()
	r.drop(func(h Hold) bool {
		return h.Effect == discovery.EffectUntilQuiet && h.policyHold().Ended(now, t.opts.BootID)
	})
	if q := r.quiet(); q != nil && !q.Until.IsZero() {
		// A newer event moved the deadline: wait for the rest.
		t.armLocked(key, q.Until)
		t.mu.Unlock()
		return
	}
	gone := len(r.Holds) == 0
	t.pruneLocked(key, r)
	t.mu.Unlock()
	t.changed(false)
	if gone {
		t.log.Info("device recovered after a quiet period", "device", key)
	}
	t.notify()
}

// Unhealthy returns the devices held Unhealthy now (by holds, from events
// or the state file, and by conditions), sorted by key.
func (t *Tracker) Unhealthy() []Device {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.unhealthyLocked()
}

// unhealthyLocked is Unhealthy with t.mu held.
func (t *Tracker) unhealthyLocked() []Device {
	keys := t.unhealthySetLocked()
	out := make([]Device, 0, len(keys))
	for _, k := range keys {
		out = append(out, t.deviceLocked(k))
	}
	return out
}

// deviceLocked describes key's holds and conditions. t.mu is held.
func (t *Tracker) deviceLocked(key string) Device {
	d := Device{Key: key, GPUUUID: key}
	cond, held := t.conditionsLocked()[key]
	condSince := cond.Since
	r := t.recs[key]
	switch {
	case r != nil:
		h := r.strongest()
		d.GPUUUID, d.MIGUUID = r.GPUUUID, r.MIGUUID
		d.Kind, d.XID, d.Effect, d.Reason = h.Kind, h.XID, h.Effect, h.Reason
		d.Since, d.Until, d.WaitsFor = h.Since, h.Until, h.WaitsFor()
		for _, o := range r.Holds[1:] {
			if o.Since.Before(d.Since) {
				d.Since = o.Since
			}
		}
		if held {
			d.Until = time.Time{}
			d.WaitsFor += "; and " + cond.waitsFor()
		}
	case held:
		// A condition's kind is one of a fixed set (the VFIO probe's,
		// KindNVMLUnavailable): a bounded reason as it is.
		d.Kind, d.Reason, d.Since, d.WaitsFor = cond.Kind, string(cond.Kind), condSince, cond.waitsFor()
	}
	if held && !condSince.IsZero() && condSince.Before(d.Since) {
		d.Since = condSince
	}
	var c *Condition
	if held {
		c = &cond
	}
	d.Message = describe(r, c)
	return d
}

// unhealthySetLocked is the sorted keys of the devices held Unhealthy.
// t.mu is held.
func (t *Tracker) unhealthySetLocked() []string {
	set := make(map[string]bool, len(t.recs))
	for k := range t.recs {
		set[k] = true
	}
	for k := range t.conditionsLocked() {
		set[k] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// Func returns a check of the health of plan devices as it is now: true
// for a device held Unhealthy (its GPU, or it as a MIG device; a VFIO
// device by its PCI address). It is nil while every device is healthy.
func (t *Tracker) Func() func(d *plan.Device) bool {
	t.mu.Lock()
	keys := t.unhealthySetLocked()
	t.mu.Unlock()
	if len(keys) == 0 {
		return nil
	}
	bad := make(map[string]bool, len(keys))
	for _, k := range keys {
		bad[k] = true
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
