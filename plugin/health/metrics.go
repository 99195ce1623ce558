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
			Help: "Critical health events received, by kind and XID: one of the XIDs featureplug knows by number, \"other\" for any other XID, empty for non-XID events.",
		}, []string{"kind", "xid"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "featureplug", Subsystem: "plugin", Name: "health_state_writes_total",
			Help: "Writes of the health state file, by result (ok, error); a failed write is retried with backoff until one succeeds.",
		}, []string{"result"}),
		records: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "featureplug", Subsystem: "plugin", Name: "unhealthy_records",
			Help: "Devices (GPUs or MIG devices) held Unhealthy now, restored from the state file or from health events.",
		}),
		conditions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "featureplug", Subsystem: "plugin", Name: "unhealthy_conditions",
			Help: "Devices held Unhealthy now by a condition a probe found, by kind (vfio-unbound, vfio-gone, vfio-no-group-node: GPUs passed through to VMs).",
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

// knownXID reports whether xid is one of the XIDs the xid label of
// health_events_total names by number; any other XID is counted as
// "other", so the label has a bounded set of values whatever NVML (or a
// fake node) reports. The table holds the XIDs of NVIDIA's XID catalogue
// that take a GPU out of service or that NVIDIA's device plugin treats
// specially:
//
//	13, 31, 43, 45, 68, 109  application errors (ignored by default)
//	48                       double-bit ECC error
//	61, 62, 69               internal micro-controller / GPU errors
//	63, 64                   ECC page retirement or row remapping event / failure
//	74                       NVLink error
//	79                       GPU has fallen off the bus
//	92                       high single-bit ECC error rate
//	94, 95                   contained / uncontained ECC error
//	119, 120                 GSP RPC timeout / GSP error
//	121                      C2C link error
//	140                      unrecovered ECC error
//	143, 154, 155            GPU initialisation failure, recovery action
//	                         changed, NVLink/C2C failure
func knownXID(xid uint64) bool {
	switch xid {
	case 13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 121, 140, 143, 154, 155:
		return true
	}
	return false
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
