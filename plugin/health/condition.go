package health

import (
	"slices"
	"time"
)

// SourceNVML is the condition source of NVML failures (NVMLFailing).
const SourceNVML = "nvml"

// Condition is a live state a health source checks itself, such as NVML
// failing or a VFIO device unbound: its devices are Unhealthy while it
// lasts and Healthy again when the source clears it. Unlike holds, a
// condition is not kept in the state file: the source finds it again
// after a restart.
type Condition struct {
	// Source names who set the condition ("nvml"); one condition per
	// source, the latest wins.
	Source string
	// Keys are the devices: GPU UUIDs (with their MIG devices), MIG UUIDs
	// or plan device IDs.
	Keys []string
	// Reason is a short, bounded label ("nvml-unavailable").
	Reason string
	// Message says in one line what is wrong.
	Message string
	// WaitsFor says in a few words what ends it ("NVML answering again").
	WaitsFor string
}

// condition is a Condition as the tracker keeps it.
type condition struct {
	keys     map[string]bool
	reason   string
	message  string
	waitsFor string
	since    time.Time
}

// SetCondition holds c.Keys Unhealthy until the source clears it
// (ClearCondition, or a SetCondition without keys); a condition of the
// same source is replaced, keeping its start when its reason stays.
func (t *Tracker) SetCondition(c Condition) {
	if len(c.Keys) == 0 {
		t.ClearCondition(c.Source)
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	before := t.unhealthySetLocked()
	prev := t.conds[c.Source]
	next := &condition{keys: map[string]bool{}, reason: c.Reason, message: c.Message, waitsFor: c.WaitsFor, since: t.opts.Clock.Now()}
	if prev != nil && prev.reason == c.Reason {
		next.since = prev.since
	}
	for _, k := range c.Keys {
		next.keys[k] = true
	}
	t.conds[c.Source] = next
	changed := !slices.Equal(before, t.unhealthySetLocked()) || prev == nil || prev.message != c.Message
	t.mu.Unlock()
	if changed {
		t.notify()
	}
}

// ClearCondition ends the condition of source; its devices are Healthy
// again unless a hold or another condition keeps them.
func (t *Tracker) ClearCondition(source string) {
	t.mu.Lock()
	_, had := t.conds[source]
	delete(t.conds, source)
	t.mu.Unlock()
	if had {
		t.notify()
	}
}

// NVMLFailing records that NVML fails (every call answers an error, the
// driver is gone): with the policy's fenceOnNVMLFailure (the default),
// every device of gpus is Unhealthy until NVMLAnswers, so that a node
// whose GPUs nobody can check does not keep advertising them. err says
// why, in the devices' messages and NVMLFailure.
func (t *Tracker) NVMLFailing(gpus []string, err error) {
	t.mu.Lock()
	if t.nvmlErr == nil {
		t.nvmlSince = t.opts.Clock.Now()
	}
	t.nvmlErr = err
	t.nvmlGPUs = slices.Clone(gpus)
	t.mu.Unlock()
	t.applyNVMLFence()
}

// NVMLAnswers records that NVML answers again: the NVMLFailing fence ends.
func (t *Tracker) NVMLAnswers() {
	t.mu.Lock()
	was := t.nvmlErr != nil
	t.nvmlErr, t.nvmlGPUs = nil, nil
	t.mu.Unlock()
	if was {
		t.ClearCondition(SourceNVML)
	}
}

// NVMLFailure returns since when and why NVML fails; a nil error while
// it answers.
func (t *Tracker) NVMLFailure() (time.Time, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nvmlSince, t.nvmlErr
}

// applyNVMLFence sets or clears the NVML condition as NVML's state and the
// policy's fenceOnNVMLFailure say.
func (t *Tracker) applyNVMLFence() {
	t.mu.Lock()
	err, gpus, fence := t.nvmlErr, t.nvmlGPUs, t.policy.Fences()
	t.mu.Unlock()
	if err == nil || !fence {
		t.ClearCondition(SourceNVML)
		return
	}
	t.SetCondition(Condition{Source: SourceNVML, Keys: gpus, Reason: ReasonNVMLUnavailable,
		Message: "NVML fails (" + err.Error() + ")", WaitsFor: "NVML answering again"})
}
