package health

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/featureplug/featureplug/discovery"
)

// metrics are the tracker's Prometheus collectors. They exist even
// without a Registerer, so the code never checks for nil. Their names are
// those of the device-plugin era (featureplug_plugin_*), which dashboards
// use.
type metrics struct {
	events     *prometheus.CounterVec
	writes     *prometheus.CounterVec
	records    prometheus.Gauge
	conditions *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "featureplug", Subsystem: "plugin", Name: "health_events_total",
			Help: "Health events received, by kind, XID (an XID of NVIDIA's catalog by number, \"other\" for any other, empty for non-XID events) and the policy's effect (none, count, until-quiet, until-reset, until-reboot).",
		}, []string{"kind", "xid", "effect"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "featureplug", Subsystem: "plugin", Name: "health_state_writes_total",
			Help: "Writes of the health state file, by result (ok, error); a failed write is retried with backoff until one succeeds.",
		}, []string{"result"}),
		records: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "featureplug", Subsystem: "plugin", Name: "unhealthy_records",
			Help: "Devices (GPUs or MIG devices) held Unhealthy now by health events (or the state file); conditions are featureplug_plugin_unhealthy_conditions.",
		}),
		conditions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "featureplug", Subsystem: "plugin", Name: "unhealthy_conditions",
			Help: "Devices held Unhealthy now by a condition a probe found, by kind (vfio-unbound, vfio-gone, vfio-no-group-node: GPUs passed through to VMs; nvml-unavailable: NVML failing as a whole).",
		}, []string{"kind"}),
	}
	for _, k := range vfioKinds {
		m.conditions.WithLabelValues(string(k))
	}
	m.writes.WithLabelValues("ok")
	m.writes.WithLabelValues("error")
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.events, m.writes, m.records, m.conditions} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if errors.As(err, &already) {
				return nil, fmt.Errorf("registering health metrics: %w (one Tracker per Registerer)", err)
			}
			return nil, fmt.Errorf("registering health metrics: %w", err)
		}
	}
	return m, nil
}

// errorf makes an error about the tracker's options.
func errorf(format string, args ...any) error {
	return fmt.Errorf("health tracker options: "+format, args...)
}

// knownXID reports whether xid is one of NVIDIA's XID catalog, which the
// xid label of health_events_total names by number; any other XID is
// counted as "other", so the label has a bounded set of values whatever
// NVML (or a fake node) reports.
func knownXID(xid uint64) bool {
	_, ok := discovery.LookupXID(xid)
	return ok
}

// xidOther is the xid label of an XID outside knownXIDs.
const xidOther = "other"

// xidLabel formats an XID for the health_events_total label: a known XID
// as its number, 0 (not an XID event) as "", anything else as "other".
func xidLabel(xid uint64) string {
	if xid == 0 {
		return ""
	}
	if knownXID(xid) {
		return strconv.FormatUint(xid, 10)
	}
	return xidOther
}

// kindLabel bounds the kind label of health_events_total to the kinds
// discovery defines.
func kindLabel(k discovery.HealthEventKind) string {
	if slices.Contains(discovery.HealthEventKinds(), k) {
		return string(k)
	}
	return "other"
}

// updateGaugeLocked sets the unhealthy-records gauge (devices with holds;
// conditions have their own gauge). t.mu is held.
func (t *Tracker) updateGaugeLocked() {
	t.metrics.records.Set(float64(len(t.recs)))
}
