package plugin

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the manager's Prometheus collectors. They exist even without
// a Registerer, so the code never checks for nil.
type metrics struct {
	devices       *prometheus.GaugeVec
	allocations   *prometheus.CounterVec
	applies       *prometheus.CounterVec
	registrations *prometheus.CounterVec
	healthEvents  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		devices: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "featureplug", Subsystem: "plugin", Name: "devices",
			Help: "Devices advertised to the kubelet, per resource and health.",
		}, []string{"resource", "health"}),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "featureplug", Subsystem: "plugin", Name: "allocations_total",
			Help: "Allocate calls per resource and result (ok, invalid, unavailable, error).",
		}, []string{"resource", "result"}),
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "featureplug", Subsystem: "plugin", Name: "plan_applies_total",
			Help: "Plans applied, by result (ok, invalid).",
		}, []string{"result"}),
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "featureplug", Subsystem: "plugin", Name: "registrations_total",
			Help: "Registration attempts with the kubelet, per resource and result (ok, error).",
		}, []string{"resource", "result"}),
		healthEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "featureplug", Subsystem: "plugin", Name: "health_events_total",
			Help: "Critical health events received, by kind and XID (empty for non-XID events).",
		}, []string{"kind", "xid"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.devices, m.allocations, m.applies, m.registrations, m.healthEvents} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if errors.As(err, &already) {
				return nil, fmt.Errorf("registering plugin metrics: %w (one Manager per Registerer)", err)
			}
			return nil, fmt.Errorf("registering plugin metrics: %w", err)
		}
	}
	return m, nil
}

// setDevices records a resource's device counts.
func (m *metrics) setDevices(resource string, total, unhealthy int) {
	m.devices.WithLabelValues(resource, "healthy").Set(float64(total - unhealthy))
	m.devices.WithLabelValues(resource, "unhealthy").Set(float64(unhealthy))
}

// forget drops a removed resource's series.
func (m *metrics) forget(resource string) {
	m.devices.DeleteLabelValues(resource, "healthy")
	m.devices.DeleteLabelValues(resource, "unhealthy")
}

// xidLabel formats an XID for the health_events_total label.
func xidLabel(xid uint64) string {
	if xid == 0 {
		return ""
	}
	return strconv.FormatUint(xid, 10)
}
