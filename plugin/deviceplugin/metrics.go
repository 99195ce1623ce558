package deviceplugin

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the manager's Prometheus collectors. They exist even without
// a Registerer, so the code never checks for nil.
type metrics struct {
	devices       *prometheus.GaugeVec
	allocations   *prometheus.CounterVec
	applies       *prometheus.CounterVec
	registrations *prometheus.CounterVec
	watchFallback prometheus.Gauge
	// streamsRefused counts ListAndWatch streams refused over the bound.
	streamsRefused *prometheus.CounterVec
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
			Help: "Registration attempts with the kubelet, per resource and result (ok, error, kubelet-missing: kubelet.sock does not exist).",
		}, []string{"resource", "result"}),
		streamsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "featureplug", Subsystem: "plugin", Name: "streams_refused_total",
			Help: "ListAndWatch streams refused because the resource's server already keeps the most it serves at once (8), per resource.",
		}, []string{"resource"}),
		watchFallback: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "featureplug", Subsystem: "plugin", Name: "watch_fallback",
			Help: "1 while the device-plugin directory is watched only by the periodic check (no inotify instance or watch could be had), else 0.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.devices, m.allocations, m.applies, m.registrations, m.watchFallback, m.streamsRefused} {
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

// registrationResults are the results of registrations_total, whose
// series exist from a server's start so that a kubelet that never shows up
// is visible as a rising kubelet-missing count next to ok 0.
var registrationResults = [...]string{regOK, regError, regKubeletMissing}

// initRegistrations creates a resource's registration and refused-stream
// series at 0.
func (m *metrics) initRegistrations(resource string) {
	for _, r := range registrationResults {
		m.registrations.WithLabelValues(resource, r)
	}
	m.streamsRefused.WithLabelValues(resource)
}

// forget drops a removed resource's series.
func (m *metrics) forget(resource string) {
	m.devices.DeleteLabelValues(resource, "healthy")
	m.devices.DeleteLabelValues(resource, "unhealthy")
	for _, r := range registrationResults {
		m.registrations.DeleteLabelValues(resource, r)
	}
	m.streamsRefused.DeleteLabelValues(resource)
}
