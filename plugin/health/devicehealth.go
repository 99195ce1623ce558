package health

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// ReasonHealthy is the reason label of featureplug_device_health for a
// device that is Healthy.
const ReasonHealthy = "healthy"

// servedDevice is one device of a plan's resource, as
// featureplug_device_health names it.
type servedDevice struct {
	resource string
	device   plan.Device
}

// SetPlan makes p the node's plan: its health policy decides the events to
// come (SetPolicy(p.Health)), and its devices are the series of
// featureplug_device_health. A nil plan serves nothing.
func (t *Tracker) SetPlan(p *plan.Plan) {
	var devs []servedDevice
	var over *discovery.HealthPolicy
	if p != nil {
		over = p.Health
		for _, r := range p.Resources {
			for _, d := range r.Devices {
				devs = append(devs, servedDevice{resource: r.Name, device: d})
			}
		}
	}
	t.mu.Lock()
	t.served = devs
	t.mu.Unlock()
	t.SetPolicy(over)
}

// keyOf is the tracker key that holds d, "" when none does: the MIG
// device's own, else its GPU's.
func (t *Tracker) keyOfLocked(d plan.Device, unhealthy map[string]bool) string {
	if d.Kind == plan.DeviceMIG && unhealthy[d.ID] {
		return d.ID
	}
	if unhealthy[d.GPUUUID] {
		return d.GPUUUID
	}
	return ""
}

// deviceHealthDesc describes featureplug_device_health.
var deviceHealthDesc = prometheus.NewDesc("featureplug_device_health",
	"Health of each device the plan serves (a whole GPU or MIG device, not its replicas): 1 Healthy, 0 Unhealthy; "+
		"reason is \"healthy\", the latest event of the strongest hold (xid-<n> for an XID of NVIDIA's catalog, xid-other, "+
		"or the event kind, such as retired-pages-pending) or a condition (nvml-unavailable).",
	[]string{"resource", "device", "reason"}, nil)

// deviceHealthCollector exports featureplug_device_health from the
// tracker's plan and holds at each scrape.
type deviceHealthCollector struct{ t *Tracker }

// Describe implements prometheus.Collector.
func (c deviceHealthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- deviceHealthDesc }

// Collect implements prometheus.Collector.
func (c deviceHealthCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.t.DeviceHealth() {
		v := 1.0
		if s.Device.Reason != ReasonHealthy {
			v = 0
		}
		ch <- prometheus.MustNewConstMetric(deviceHealthDesc, prometheus.GaugeValue, v, s.Resource, s.Device.Key, s.Device.Reason)
	}
}

// DeviceState is one served device's health: what featureplug health
// prints and featureplug_device_health exports.
type DeviceState struct {
	// Resource is the resource that serves the device.
	Resource string `json:"resource"`
	// Device is the device's health; Device.Key is the plan's device ID.
	// Its Reason is ReasonHealthy while it is Healthy.
	Device Device `json:"device"`
}

// DeviceHealth returns the health of every device of the plan (SetPlan),
// sorted by resource and device.
func (t *Tracker) DeviceHealth() []DeviceState {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := t.unhealthySetLocked()
	bad := make(map[string]bool, len(keys))
	for _, k := range keys {
		bad[k] = true
	}
	out := make([]DeviceState, 0, len(t.served))
	for _, s := range t.served {
		d := Device{Key: s.device.ID, GPUUUID: s.device.GPUUUID, Reason: ReasonHealthy}
		if s.device.Kind == plan.DeviceMIG {
			d.MIGUUID = s.device.ID
		}
		if k := t.keyOfLocked(s.device, bad); k != "" {
			held := t.deviceLocked(k)
			held.Key, held.GPUUUID, held.MIGUUID = d.Key, d.GPUUUID, d.MIGUUID
			d = held
		}
		out = append(out, DeviceState{Resource: s.resource, Device: d})
	}
	slices.SortFunc(out, func(a, b DeviceState) int {
		if c := strings.Compare(a.Resource, b.Resource); c != 0 {
			return c
		}
		return strings.Compare(a.Device.Key, b.Device.Key)
	})
	return out
}
