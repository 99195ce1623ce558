package dra

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of the prepare and unprepare counters.
const (
	// resultPrepared: the claim was prepared now (and checkpointed).
	resultPrepared = "prepared"
	// resultCheckpointed: the claim was prepared before; the checkpointed
	// answer was given again.
	resultCheckpointed = "checkpointed"
	// resultUnprepared: a prepared claim was unprepared.
	resultUnprepared = "unprepared"
	// resultUnknown: unprepare of a claim not prepared here (success).
	resultUnknown = "unknown"
	// resultError: the claim failed; the per-claim error says why.
	resultError = "error"
	// resultOK: a write succeeded.
	resultOK = "ok"
)

// nodeMetrics are the kubelet-side server's Prometheus collectors. They
// exist even without a Registerer, so the code never checks for nil.
type nodeMetrics struct {
	prepares       *prometheus.CounterVec
	unprepares     *prometheus.CounterVec
	preparedClaims prometheus.Gauge
	registeredNow  prometheus.Gauge
	registrations  *prometheus.CounterVec
	socketStarts   *prometheus.CounterVec
	ckptWrites     *prometheus.CounterVec
	statusWrites   *prometheus.CounterVec
	healthStreams  prometheus.Gauge
}

func newNodeMetrics(reg prometheus.Registerer) (*nodeMetrics, error) {
	m := &nodeMetrics{
		prepares: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "featureplug", Subsystem: "dra", Name: "prepare_total",
			Help: "Claims the kubelet asked to prepare, by result (prepared, checkpointed: prepared before and answered from the checkpoint, error).",
		}, []string{"result"}),
		unprepares: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "featureplug", Subsystem: "dra", Name: "unprepare_total",
			Help: "Claims the kubelet asked to unprepare, by result (unprepared, unknown: not prepared here, a success; error).",
		}, []string{"result"}),
		preparedClaims: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "featureplug", Subsystem: "dra", Name: "prepared_claims",
			Help: "Claims prepared on this node now (as checkpointed in the state directory).",
		}),
		registeredNow: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "featureplug", Subsystem: "dra", Name: "registered",
			Help: "1 while the kubelet's last registration status for the DRA driver was a success, else 0 (refused, or not reported since the registration socket was made).",
		}),
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "featureplug", Subsystem: "dra", Name: "registrations_total",
			Help: "Registration statuses the kubelet reported for the DRA driver, by result (registered, refused).",
		}, []string{"result"}),
		socketStarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "featureplug", Subsystem: "dra", Name: "socket_starts_total",
			Help: "Times a DRA socket was created, by socket (registration, dra): once at start, then each time it was found deleted or replaced.",
		}, []string{"socket"}),
		ckptWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "featureplug", Subsystem: "dra", Name: "checkpoint_writes_total",
			Help: "Writes of the prepared-claims checkpoint, by result (ok, error).",
		}, []string{"result"}),
		statusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "featureplug", Subsystem: "dra", Name: "claim_status_writes_total",
			Help: "Writes of a prepared claim's status.devices, by result (ok, error: the claim stays prepared; the log says why).",
		}, []string{"result"}),
		healthStreams: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "featureplug", Subsystem: "dra", Name: "health_streams",
			Help: "DRAResourceHealth NodeWatchResources streams open now (the kubelet keeps one open while it watches device health).",
		}),
	}
	// Every series exists from the start, at 0.
	for _, r := range []string{resultPrepared, resultCheckpointed, resultError} {
		m.prepares.WithLabelValues(r)
	}
	for _, r := range []string{resultUnprepared, resultUnknown, resultError} {
		m.unprepares.WithLabelValues(r)
	}
	for _, r := range []string{"registered", "refused"} {
		m.registrations.WithLabelValues(r)
	}
	for _, r := range []string{"registration", "dra"} {
		m.socketStarts.WithLabelValues(r)
	}
	for _, r := range []string{resultOK, resultError} {
		m.ckptWrites.WithLabelValues(r)
		m.statusWrites.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.prepares, m.unprepares, m.preparedClaims, m.registeredNow, m.registrations, m.socketStarts, m.ckptWrites, m.statusWrites, m.healthStreams} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("DRA node metrics: %w", err)
		}
	}
	return m, nil
}

// registered records a registration status from the kubelet.
func (m *nodeMetrics) registered(ok bool) {
	if ok {
		m.registrations.WithLabelValues("registered").Inc()
		m.registeredNow.Set(1)
		return
	}
	m.registrations.WithLabelValues("refused").Inc()
	m.registeredNow.Set(0)
}
