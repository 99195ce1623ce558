package mps

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the supervisor's Prometheus collectors. They exist even
// without a Registerer, so the code never checks for nil.
type metrics struct {
	up            *prometheus.GaugeVec
	restarts      *prometheus.CounterVec
	startFailures *prometheus.CounterVec
	binaryMissing prometheus.Gauge
	exclusive     *prometheus.GaugeVec
	shmShared     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "featureplug", Subsystem: "mps", Name: "daemon_up",
			Help: "1 when the resource's MPS control daemon is up and configured, else 0.",
		}, []string{"resource"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "featureplug", Subsystem: "mps", Name: "daemon_restarts_total",
			Help: "MPS control daemons found dead by the liveness check, per resource.",
		}, []string{"resource"}),
		startFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "featureplug", Subsystem: "mps", Name: "daemon_start_failures_total",
			Help: "Failed attempts to start or configure an MPS control daemon, per resource.",
		}, []string{"resource"}),
		binaryMissing: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "featureplug", Subsystem: "mps", Name: "control_binary_missing",
			Help: "1 when nvidia-cuda-mps-control could not be found at the last start attempt, else 0.",
		}),
		exclusive: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "featureplug", Subsystem: "mps", Name: "compute_mode_exclusive",
			Help: "Per MPS-shared GPU: 1 when featureplug holds it in EXCLUSIVE_PROCESS compute mode, 0 when setting the mode failed (MPS then runs in the GPU's current mode).",
		}, []string{"gpu"}),
		shmShared: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "featureplug", Subsystem: "mps", Name: "shm_shared",
			Help: "1 when the MPS daemons' /dev/shm is the shared memory directory mounted into MPS clients, 0 when it is not (clients cannot reach their server).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.up, m.restarts, m.startFailures, m.binaryMissing, m.exclusive, m.shmShared} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering MPS metrics (one Supervisor per Registerer): %w", err)
		}
	}
	return m, nil
}

// add creates a resource's series, so they show before the first event.
func (m *metrics) add(resource string) {
	m.up.WithLabelValues(resource).Set(0)
	m.restarts.WithLabelValues(resource)
	m.startFailures.WithLabelValues(resource)
}

// forget drops a removed resource's series.
func (m *metrics) forget(resource string) {
	m.up.DeleteLabelValues(resource)
	m.restarts.DeleteLabelValues(resource)
	m.startFailures.DeleteLabelValues(resource)
}
