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

// stateVersion is the format version of the health state file.
const stateVersion = 1

// maxStateBytes bounds the state file read at start: a node has at most a
// few hundred GPUs and MIG devices, each record a few hundred bytes.
const maxStateBytes = 4 << 20

// record is one device held Unhealthy, as the state file keeps it.
type record struct {
	// Key is the device the record holds Unhealthy: the MIG UUID for an
	// event on one MIG device, else the GPU UUID.
	Key string `json:"device"`
	// GPUUUID is the physical GPU.
	GPUUUID string `json:"gpuUUID"`
	// MIGUUID is the MIG device, empty for the whole GPU.
	MIGUUID string `json:"migUUID,omitempty"`
	// Kind and XID are those of the latest event.
	Kind discovery.HealthEventKind `json:"kind"`
	XID  uint64                    `json:"xid,omitempty"`
	// FirstSeen and LastSeen are the first and latest event.
	FirstSeen time.Time `json:"firstSeen"`
	LastSeen  time.Time `json:"lastSeen"`
	// Deadline is when the device recovers unless more events come; zero
	// means never (recovery disabled).
	Deadline time.Time `json:"recoverAt,omitzero"`
	// Events counts the events since FirstSeen.
	Events uint64 `json:"events"`
}

// state is the content of the state file.
type state struct {
	Version int      `json:"version"`
	Devices []record `json:"devices"`
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
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", s.path, err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("%s: version %d, want %d", s.path, st.Version, stateVersion)
	}
	for i, r := range st.Devices {
		if r.Key == "" || r.GPUUUID == "" {
			return nil, fmt.Errorf("%s: devices[%d]: device and gpuUUID must be set (have %q, %q)", s.path, i, r.Key, r.GPUUUID)
		}
	}
	return st.Devices, nil
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

// restore loads the records of the state file whose deadline has not
// passed and schedules their recovery. A file that cannot be read or
// parsed is logged at WARN, naming the file, and gives no records: the
// agent starts, and health events rebuild the state.
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
		if !r.Deadline.IsZero() && !r.Deadline.After(now) {
			continue
		}
		if r.Deadline.IsZero() && t.opts.Recovery > 0 {
			// Saved while recovery was disabled: a fresh quiet period.
			r.Deadline = now.Add(t.opts.Recovery)
		}
		t.recs[r.Key] = &r
		if !r.Deadline.IsZero() {
			key := r.Key
			t.timers[key] = t.opts.Clock.AfterFunc(r.Deadline.Sub(now), func() { t.expire(key) })
		}
		t.log.Warn("device held Unhealthy from the health state file",
			"device", r.Key, "gpu", r.GPUUUID, "mig", r.MIGUUID, "kind", r.Kind, "xid", r.XID,
			"firstSeen", r.FirstSeen.Format(time.RFC3339), "recoverAt", formatDeadline(r.Deadline), "file", t.store.path)
	}
	t.metrics.records.Set(float64(len(t.recs)))
}

// formatDeadline formats a recovery deadline; zero is "never".
func formatDeadline(d time.Time) string {
	if d.IsZero() {
		return "never"
	}
	return d.Format(time.RFC3339)
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
		recs = append(recs, *r)
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
