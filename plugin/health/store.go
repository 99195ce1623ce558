package health

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/statedir"
)

// stateVersion is the format version of the health state file: 2 keeps
// holds per device; version 1 kept one deadline per device, read as an
// until-quiet hold.
const stateVersion = 2

// maxStateBytes bounds the state file read at start: a node has at most a
// few hundred GPUs and MIG devices, each record a few hundred bytes.
const maxStateBytes = 4 << 20

// state is the content of the state file.
type state struct {
	Version int      `json:"version"`
	Devices []record `json:"devices"`
}

// recordV1 is a device as version 1 of the state file kept it.
type recordV1 struct {
	Key       string                    `json:"device"`
	GPUUUID   string                    `json:"gpuUUID"`
	MIGUUID   string                    `json:"migUUID,omitempty"`
	Kind      discovery.HealthEventKind `json:"kind"`
	XID       uint64                    `json:"xid,omitempty"`
	FirstSeen time.Time                 `json:"firstSeen"`
	LastSeen  time.Time                 `json:"lastSeen"`
	Deadline  time.Time                 `json:"recoverAt,omitzero"`
	Events    uint64                    `json:"events"`
}

// hold is the until-quiet hold a version 1 record meant.
func (r recordV1) hold() record {
	return record{Key: r.Key, GPUUUID: r.GPUUUID, MIGUUID: r.MIGUUID, Holds: []Hold{{
		Effect: discovery.EffectUntilQuiet, Until: r.Deadline, Kind: r.Kind, XID: r.XID,
		Reason: Reason(r.Kind, r.XID), Because: "restored from a version 1 state file",
		Since: r.FirstSeen, Last: r.LastSeen, Events: r.Events,
	}}}
}

// store reads and writes the health state file.
type store struct {
	path string
}

// newStore returns the store of the state directory, or nil without one.
func newStore(dir statedir.Dir) *store {
	if !dir.Enabled() {
		return nil
	}
	return &store{path: dir.Path(statedir.HealthFile)}
}

// read reads and checks the state file; a missing file is no records.
func (s *store) read() ([]record, error) {
	data, err := statedir.ReadFile(s.path, maxStateBytes)
	if err != nil || data == nil {
		return nil, err
	}
	var head struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("%s: %w", s.path, err)
	}
	var recs []record
	switch head.Version {
	case stateVersion:
		var st state
		if err := json.Unmarshal(data, &st); err != nil {
			return nil, fmt.Errorf("%s: %w", s.path, err)
		}
		recs = st.Devices
	case 1:
		var st struct {
			Devices []recordV1 `json:"devices"`
		}
		if err := json.Unmarshal(data, &st); err != nil {
			return nil, fmt.Errorf("%s: %w", s.path, err)
		}
		for _, r := range st.Devices {
			recs = append(recs, r.hold())
		}
	default:
		return nil, fmt.Errorf("%s: version %d, want %d (or 1)", s.path, head.Version, stateVersion)
	}
	for i, r := range recs {
		if r.Key == "" || r.GPUUUID == "" {
			return nil, fmt.Errorf("%s: devices[%d]: device and gpuUUID must be set (have %q, %q)", s.path, i, r.Key, r.GPUUUID)
		}
		for j, h := range r.Holds {
			if !h.Effect.Unhealthy() {
				return nil, fmt.Errorf("%s: devices[%d].holds[%d].effect: %q is not until-quiet, until-reset or until-reboot", s.path, i, j, h.Effect)
			}
		}
	}
	return recs, nil
}

// write replaces the state file atomically (statedir.WriteFile).
func (s *store) write(recs []record) error {
	if recs == nil {
		recs = []record{}
	}
	data, err := json.MarshalIndent(state{Version: stateVersion, Devices: recs}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", s.path, err)
	}
	return statedir.WriteFile(s.path, append(data, '\n'), statedir.Private, nil)
}

// restore loads the holds of the state file that have not ended: an
// until-quiet hold until its deadline (one saved without a deadline, while
// recovery was disabled, gets a fresh quiet period when recovery is on),
// an until-reboot hold while the boot is the same, an until-reset hold
// until the health watcher sees the reset. A file that cannot be read or
// parsed is logged at WARN, naming the file, and gives no holds: the agent
// starts, and health events rebuild the state.
func (t *Tracker) restore() {
	if t.store == nil {
		return
	}
	recs, err := t.store.read()
	if err != nil {
		t.log.Warn("ignoring the health state file; starting with no unhealthy devices", "file", t.store.path, "err", err)
		return
	}
	now := t.opts.Clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range recs {
		r.drop(func(h Hold) bool { return h.policyHold().Ended(now, t.opts.BootID) })
		if len(r.Holds) == 0 {
			continue
		}
		if q := r.quiet(); q != nil && q.Until.IsZero() {
			if p := t.policy.QuietPeriodFor(q.Kind); p > 0 {
				q.Until = now.Add(p)
			}
		}
		rec := r
		t.recs[r.Key] = &rec
		if q := rec.quiet(); q != nil && !q.Until.IsZero() {
			t.armLocked(r.Key, q.Until)
		}
		h := rec.strongest()
		t.log.Warn("device held Unhealthy from the health state file",
			"device", r.Key, "gpu", r.GPUUUID, "mig", r.MIGUUID, "effect", h.Effect, "reason", h.Reason,
			"since", h.Since.Format(time.RFC3339), "waitsFor", h.WaitsFor(), "file", t.store.path)
	}
}

// changed has the state file follow the records: at once when urgent,
// else within persistDelay.
func (t *Tracker) changed(urgent bool) {
	if t.store == nil {
		return
	}
	if urgent {
		t.flush()
		return
	}
	t.schedule(persistDelay)
}

// schedule writes the state file after delay, unless a write is pending
// already.
func (t *Tracker) schedule(delay time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending != nil || t.closed {
		return
	}
	t.pending = t.opts.Clock.AfterFunc(delay, func() {
		t.mu.Lock()
		t.pending = nil
		closed := t.closed
		t.mu.Unlock()
		if !closed {
			t.flush()
		}
	})
}

// flush writes the current records to the state file. A failed write is
// retried with the retry backoff until one succeeds (a newer change
// writes at once meanwhile); the first failure of a run is logged at
// ERROR, its end at INFO.
func (t *Tracker) flush() {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	t.mu.Lock()
	recs := make([]record, 0, len(t.recs))
	for _, r := range t.recs {
		c := *r
		c.Holds = slices.Clone(r.Holds)
		recs = append(recs, c)
	}
	t.mu.Unlock()
	slices.SortFunc(recs, func(a, b record) int { return strings.Compare(a.Key, b.Key) })
	err := t.store.write(recs)
	t.mu.Lock()
	failures := t.failures
	var delay time.Duration
	if err == nil {
		t.failures, t.retry = 0, t.opts.RetryBackoff
	} else {
		t.failures++
		delay = t.retry.Step()
	}
	t.mu.Unlock()
	if err == nil {
		t.metrics.writes.WithLabelValues("ok").Inc()
		if failures > 0 {
			t.log.Info("health state file written after failures", "file", t.store.path, "failures", failures)
		}
		return
	}
	t.metrics.writes.WithLabelValues("error").Inc()
	if failures == 0 {
		t.log.Error("writing the health state file; unhealthy devices may be advertised Healthy after a restart; retrying",
			"file", t.store.path, "err", err, "retryIn", delay)
	} else {
		t.log.Debug("writing the health state file failed again; retrying", "file", t.store.path, "err", err, "retryIn", delay)
	}
	t.schedule(delay)
}
