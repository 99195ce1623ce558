package agent

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the agent's own metrics; the plugin manager and the MPS
// supervisor register theirs on the same registry.
type metrics struct {
	ruleErrors        prometheus.Counter
	ruleReloads       *prometheus.CounterVec
	planErrors        prometheus.Counter
	discoveries       *prometheus.CounterVec
	discoveryDuration prometheus.Histogram
	rulesMissing      prometheus.Gauge
	fileWatchFallback *prometheus.GaugeVec
	nvmlAvailable     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, ready func() bool) (*metrics, error) {
	m := &metrics{
		ruleErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "featureplug_rule_errors_total",
			Help: "Rules files or plans that were rejected; the last good plan kept serving.",
		}),
		ruleReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "featureplug_rule_reloads_total",
			Help: "Rules file reloads by result: applied; partial (some devices left out because of their rules, the rest served); invalid, missing and refused (the file was rejected, lost, or would have withdrawn every resource without saying so, and the last good plan kept serving).",
		}, []string{"result"}),
		planErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "featureplug_plan_errors_total",
			Help: "Plans that could not be made from the current rules and inventory.",
		}),
		discoveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "featureplug_discoveries_total",
			Help: "GPU discoveries by result (ok, error).",
		}, []string{"result"}),
		discoveryDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "featureplug_discovery_duration_seconds",
			Help:    "Time one NVML discovery of the node took.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}),
		rulesMissing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "featureplug_rules_file_missing",
			Help: "1 while the rules file is lost (deleted, a directory, missing from a new ..data); the last good plan keeps serving.",
		}),
		fileWatchFallback: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "featureplug_file_watch_fallback",
			Help: "1 while a watched file (file: rules, features, cdi) is checked only periodically because no inotify instance or watch could be had.",
		}, []string{"file"}),
		nvmlAvailable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "featureplug_nvml_available",
			Help: "1 while NVML answers (the latest discovery succeeded), 0 while it fails and every device of its GPUs is advertised Unhealthy.",
		}),
	}
	m.nvmlAvailable.Set(1)
	for _, c := range []prometheus.Collector{
		m.ruleErrors, m.ruleReloads, m.planErrors, m.discoveries, m.discoveryDuration,
		m.rulesMissing, m.fileWatchFallback, m.nvmlAvailable,
		// go_* and process_* (memory, goroutines, open fds, CPU): what an
		// operator needs to see a leak or fd exhaustion coming.
		&runtimeCollectors{},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "featureplug_ready",
			Help: "1 while every resource of the current plan is registered with the kubelet (as /readyz).",
		}, func() float64 {
			if ready() {
				return 1
			}
			return 0
		}),
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// runtimeCollectors serves client_golang's Go and process collectors
// (go_*, process_*), made on the first scrape rather than at start: making
// and registering them describes every runtime/metrics entry, about 1 ms of
// CPU before the first registration with the kubelet. It is an
// unchecked collector (it describes nothing), so the registry takes it at
// no cost; its metric names cannot collide with featureplug's own.
type runtimeCollectors struct {
	once sync.Once
	all  []prometheus.Collector
}

// Describe implements prometheus.Collector: nothing, which makes the
// collector unchecked.
func (*runtimeCollectors) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (r *runtimeCollectors) Collect(ch chan<- prometheus.Metric) {
	r.once.Do(func() {
		r.all = []prometheus.Collector{
			collectors.NewGoCollector(),
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		}
	})
	for _, c := range r.all {
		c.Collect(ch)
	}
}
