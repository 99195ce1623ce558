package health

import (
	"maps"
	"slices"
	"time"

	"github.com/featureplug/featureplug/discovery"
)

// Conditions are the other half of the tracker's record: states that hold a
// device Unhealthy for as long as a probe finds them (a GPU passed through
// to VMs that left vfio-pci), rather than events that hold it for a quiet
// period. A probe sets all of its conditions at once at every look, so a
// device is Healthy again at the first look that finds it well. They are
// not written to the state file: the probe looks again at start, before
// the first plan is served.

// Condition is why a probe holds a device Unhealthy now.
type Condition struct {
	// Kind says what the probe found (discovery.EventVFIOUnbound, ...).
	Kind discovery.HealthEventKind
	// Reason says it for people: "bound to nvidia, not vfio-pci".
	Reason string
	// Since is when the condition of its kind began on the device; set by
	// SetConditions.
	Since time.Time
}

// waitsFor says in a few words what ends the condition.
func (c Condition) waitsFor() string {
	if c.Kind == KindNVMLUnavailable {
		return "NVML answering again"
	}
	return "the probe finding the device well again"
}

// SetConditions replaces the conditions of source (the probe's name) with
// conds, keyed by device (a GPU UUID, or a VFIO device's PCI address: the
// plan device's GPUUUID). Subscribers are told when the set of unhealthy
// devices or their kinds changed; a change of a reason alone is logged
// only. Empty conds clears the source.
func (t *Tracker) SetConditions(source string, conds map[string]Condition) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	old := t.conds[source]
	now := t.opts.Clock.Now()
	stamped := make(map[string]Condition, len(conds))
	for k, c := range conds {
		c.Since = now
		if o, ok := old[k]; ok && o.Kind == c.Kind {
			c.Since = o.Since
		}
		stamped[k] = c
	}
	conds = stamped
	changed := len(old) != len(conds)
	for k, c := range conds {
		if o, ok := old[k]; !ok || o.Kind != c.Kind {
			changed = true
		}
	}
	var turned, recovered []string
	for k, c := range conds {
		if o, ok := old[k]; !ok || o.Kind != c.Kind || o.Reason != c.Reason {
			turned = append(turned, k+": "+c.Reason)
		}
	}
	for k := range old {
		if _, ok := conds[k]; !ok {
			recovered = append(recovered, k)
		}
	}
	if len(conds) == 0 {
		delete(t.conds, source)
	} else {
		t.conds[source] = maps.Clone(conds)
	}
	if changed {
		t.countConditionsLocked()
	}
	t.mu.Unlock()
	if len(turned) > 0 {
		t.log.Warn("devices Unhealthy while a condition lasts", "source", source, "devices", turned)
	}
	if len(recovered) > 0 {
		t.log.Info("devices Healthy again: their condition ended", "source", source, "devices", recovered)
	}
	if changed {
		t.notify()
	}
}

// conditionsLocked returns the devices some condition holds now, with the
// condition (the first source's, by name, when two hold one). t.mu is
// held.
func (t *Tracker) conditionsLocked() map[string]Condition {
	if len(t.conds) == 0 {
		return nil
	}
	out := map[string]Condition{}
	for _, src := range slices.Sorted(maps.Keys(t.conds)) {
		for k, c := range t.conds[src] {
			if _, ok := out[k]; !ok {
				out[k] = c
			}
		}
	}
	return out
}

// vfioKinds are the condition kinds the VFIO probe sets, whose series the
// conditions gauge has from the start.
var vfioKinds = []discovery.HealthEventKind{discovery.EventVFIOUnbound, discovery.EventVFIOGone, discovery.EventVFIONoGroupNode}

// countConditionsLocked sets the conditions gauge: the VFIO kinds always
// have their series (0 when no device has them), another kind while a
// device has it. t.mu is held.
func (t *Tracker) countConditionsLocked() {
	n := map[discovery.HealthEventKind]int{}
	for _, k := range vfioKinds {
		n[k] = 0
	}
	for _, c := range t.conditionsLocked() {
		n[c.Kind]++
	}
	t.metrics.conditions.Reset()
	for k, v := range n {
		t.metrics.conditions.WithLabelValues(string(k)).Set(float64(v))
	}
}
