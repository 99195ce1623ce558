package deviceplugin

import (
	"slices"
	"strings"

	"github.com/featureplug/featureplug/discovery"
)

// UnhealthyDevice is a device the manager holds Unhealthy.
type UnhealthyDevice struct {
	// Key is the device held Unhealthy: a MIG UUID for an event on one
	// MIG device, else a GPU UUID (the GPU and all its MIG devices).
	Key string
	// GPUUUID is the physical GPU; MIGUUID the MIG device, if any.
	GPUUUID, MIGUUID string
	// Kind and XID are those of the latest event.
	Kind discovery.HealthEventKind
	XID  uint64
}

// Unhealthy returns the devices held Unhealthy now (from health events,
// or from the health state file at start until their recovery deadline),
// sorted by key. Other APIs than the device plugins (the DRA sink) serve
// the same devices with the same health through it.
func (m *Manager) Unhealthy() []UnhealthyDevice {
	h := m.health
	h.mu.Lock()
	out := make([]UnhealthyDevice, 0, len(h.recs))
	for _, r := range h.recs {
		out = append(out, UnhealthyDevice{Key: r.Key, GPUUUID: r.GPUUUID, MIGUUID: r.MIGUUID, Kind: r.Kind, XID: r.XID})
	}
	h.mu.Unlock()
	slices.SortFunc(out, func(a, b UnhealthyDevice) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// healthChanged tells Options.OnHealthChange that the unhealthy set
// changed.
func (m *Manager) healthChanged() {
	if m.opts.OnHealthChange != nil {
		m.opts.OnHealthChange()
	}
}
