package labeler

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// SinkConfig configures a Sink.
type SinkConfig struct {
	// Publisher is where the content goes; nil keeps it for
	// /debug/content only.
	Publisher Publisher
	// Labels tunes label computation; its OnDropped is chained after the
	// sink's own report of dropped label keys.
	Labels LabelOptions
	// Hold, when set, is waited for before the first publish (the agent:
	// until the kubelet accepted every device-plugin resource, or a
	// second, so that registering comes first).
	Hold func(context.Context)
	// Resync, ResyncJitter, Timestamp and Backoff are the Loop's.
	Resync       time.Duration
	ResyncJitter float64
	Timestamp    bool
	Backoff      wait.Backoff
	// DefaultServe is the agent's API for resources whose rules do not
	// choose one (--serve), which AnnotationResources records.
	DefaultServe plan.Serve
	// MoreAnnotations, when set, gives annotations of the agent's state
	// beside the plan's (AnnotationMPSControl), read at each Apply.
	MoreAnnotations func() map[string]string
	// MoreLabels, when set, gives node labels of the agent's state beside
	// the inventory's and plan's (LabelNVMLUnavailable), read at each
	// Apply.
	MoreLabels func() map[string]string
	// Logger receives the sink's logs (default discarded).
	Logger *slog.Logger
	// Registerer, when set, receives the sink's metrics.
	Registerer prometheus.Registerer
}

// Sink is the agent's output of NFD features and labels: it publishes
// each (inventory, plan) through a Loop to a NodeFeature object, a
// feature file or stdout, with the plan's Annotations, and keeps the
// content for /debug/content. It
// never refuses a plan: publishing is retried in the background. Label
// keys that are not valid keys are left out, each logged once and
// counted (featureplug_label_dropped_total).
type Sink struct {
	c        SinkConfig
	loop     *Loop
	opts     LabelOptions
	contents chan Content

	mu        sync.Mutex
	published *Content
}

// NewSink returns the publishing sink of c, with its metrics registered.
func NewSink(c SinkConfig) (*Sink, error) {
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &droppedLabels{
		log: log,
		counter: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "featureplug_label_dropped_total",
			Help: "Distinct label keys left out of the published labels because they are not valid label keys (each is logged once).",
		}),
		next: c.Labels.OnDropped,
		seen: map[string]bool{},
	}
	attempts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "featureplug_publish_attempts_total",
		Help: "Publish attempts of features and labels by result (ok, error).",
	}, []string{"result"})
	s := &Sink{c: c, opts: c.Labels, contents: make(chan Content, 1)}
	s.opts.OnDropped = d.dropped
	collectors := []prometheus.Collector{d.counter, attempts}
	if st, ok := c.Publisher.(interface{ Stats() WriteStats }); ok {
		collectors = append(collectors, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "featureplug_publish_writes_total",
			Help: "Writes of the NodeFeature object or feature file (publishes that found the content unchanged write nothing).",
		}, func() float64 { return float64(st.Stats().Writes()) }))
	}
	if c.Registerer != nil {
		for _, m := range collectors {
			if err := c.Registerer.Register(m); err != nil {
				return nil, err
			}
		}
	}
	if c.Publisher != nil {
		s.loop = &Loop{
			Publisher: c.Publisher, Resync: c.Resync, ResyncJitter: c.ResyncJitter,
			Timestamp: c.Timestamp, Backoff: c.Backoff, Logger: log,
			OnPublish: func(err error) {
				if err != nil {
					attempts.WithLabelValues("error").Inc()
					return
				}
				attempts.WithLabelValues("ok").Inc()
			},
		}
	}
	return s, nil
}

// Name implements the agent's Sink.
func (s *Sink) Name() string { return "publish" }

// Check implements the agent's Sink: publishing never refuses a plan.
func (s *Sink) Check(*discovery.Inventory, *plan.Plan) error { return nil }

// Apply implements the agent's Sink: it offers the content of (inv, p) to
// the publishing loop (a plan nil before any: the inventory's features
// and labels).
func (s *Sink) Apply(_ context.Context, inv *discovery.Inventory, p *plan.Plan) error {
	c := NewContent(inv, p, s.opts)
	c.Annotations = Annotations(p, s.c.DefaultServe)
	if c.Annotations != nil && s.c.MoreAnnotations != nil {
		maps.Copy(c.Annotations, s.c.MoreAnnotations())
	}
	if more := s.moreLabels(); len(more) > 0 {
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		maps.Copy(c.Labels, more)
	}
	s.mu.Lock()
	s.published = &c
	s.mu.Unlock()
	if s.loop != nil {
		Offer(s.contents, c)
	}
	return nil
}

// moreLabels returns MoreLabels' labels, nil without it.
func (s *Sink) moreLabels() map[string]string {
	if s.c.MoreLabels == nil {
		return nil
	}
	return s.c.MoreLabels()
}

// Run implements the agent's Runner: the publishing loop, after Hold.
func (s *Sink) Run(ctx context.Context) error {
	if s.loop == nil {
		<-ctx.Done()
		return nil
	}
	if s.c.Hold != nil {
		s.c.Hold(ctx)
	}
	return s.loop.Run(ctx, s.contents)
}

// Published returns the content last applied, or nil.
func (s *Sink) Published() *Content {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.published
}

// OutputFiles implements the agent's WatchedOutput: the feature file
// ("features"), when the sink publishes one.
func (s *Sink) OutputFiles() map[string]string {
	if f, ok := s.c.Publisher.(*FilePublisher); ok {
		return map[string]string{"features": f.Path()}
	}
	return nil
}

// RestoreOutput implements the agent's Restorer: a feature file deleted
// or changed behind the agent's back is written again (the publisher
// writes only what differs). Other outputs are left to the loop's resync.
func (s *Sink) RestoreOutput() {
	c := s.Published()
	if _, file := s.c.Publisher.(*FilePublisher); c == nil || !file {
		return
	}
	Offer(s.contents, *c)
}

// Endpoints implements the agent's Endpoints: GET /debug/content serves
// the content last applied, as JSON.
func (s *Sink) Endpoints(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/content", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Published())
	})
}

// droppedLabels reports label keys the labeler leaves out because they are
// not valid label keys: a warning the first time each key is dropped, and
// featureplug_label_dropped_total counting the distinct keys dropped.
type droppedLabels struct {
	log     *slog.Logger
	counter prometheus.Counter
	next    func(key, reason string)

	mu   sync.Mutex
	seen map[string]bool
}

// dropped is a LabelOptions.OnDropped.
func (d *droppedLabels) dropped(key, reason string) {
	d.mu.Lock()
	first := !d.seen[key]
	d.seen[key] = true
	d.mu.Unlock()
	if first {
		d.counter.Inc()
		d.log.Warn("label left out: its key is not a valid label key", "key", key, "reason", reason)
	}
	if d.next != nil {
		d.next(key, reason)
	}
}
