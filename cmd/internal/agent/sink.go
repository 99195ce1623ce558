package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/plugin/mps"
	"github.com/featureplug/featureplug/rules/plan"
)

// Sink is one output of the agent: it makes each (inventory, plan) the
// loop decides on true in its API (device plugins, NFD features; DRA
// would be a third). Each sink owns its state; the loop only hands it the
// latest inventory and plan, in the order of the agent's sink list.
type Sink interface {
	// Name names the sink in logs and errors.
	Name() string
	// Apply takes the current inventory and plan. plan is nil while no
	// rules were ever accepted; a plan the sink already applied may come
	// again (with a new inventory) and must then change nothing. An error
	// means the sink did not take plan and keeps what it served before.
	Apply(ctx context.Context, inv *discovery.Inventory, plan *plan.Plan) error
}

// Runner is a sink with work of its own (servers, a publishing loop):
// the agent runs it beside the loop until ctx ends. An error stops the
// agent.
type Runner interface {
	Run(ctx context.Context) error
}

// HealthSink is a sink that takes the devices' health events.
type HealthSink interface {
	// Health takes one critical health event.
	Health(ev discovery.HealthEvent)
}

// outputRestorer is a sink whose output lives where others can delete or
// edit it behind the agent's back (a file on the host that runtimes read):
// restoreOutput writes again what the sink last wrote when it is gone or
// differs. The agent calls it at every periodic re-discovery that changed
// nothing, so such an output is back within one re-discovery interval.
type outputRestorer interface {
	restoreOutput()
}

// restoreSinkOutputs restores the outputs of the sinks that keep one.
func (a *Agent) restoreSinkOutputs() {
	for _, s := range a.sinks {
		if r, ok := s.(outputRestorer); ok {
			r.restoreOutput()
		}
	}
}

// applySinks applies plan to every sink in order. A sink that fails
// leaves the sinks after it on the last good plan (a.plan), so that what
// is published is what is served; the first error, naming the sink, is
// returned. Sinks that serve devices therefore come before sinks that
// report them.
func (a *Agent) applySinks(ctx context.Context, plan *plan.Plan) error {
	var firstErr error
	for _, s := range a.sinks {
		p := plan
		if firstErr != nil {
			p = a.plan
		}
		if err := s.Apply(ctx, a.inv, p); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("%s: %w", s.Name(), err)
		}
	}
	return firstErr
}

// relayHealth hands the health events on ch to every HealthSink until ctx
// ends or ch is closed.
func (a *Agent) relayHealth(ctx context.Context, ch <-chan discovery.HealthEvent) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-ch:
			if !ok {
				return
			}
			a.healthToSinks(ev)
		}
	}
}

func (a *Agent) healthToSinks(ev discovery.HealthEvent) {
	for _, s := range a.sinks {
		if h, ok := s.(HealthSink); ok {
			h.Health(ev)
		}
	}
}

// devicePluginSink serves a plan through the kubelet's device-plugin API:
// one server per resource (deviceplugin.Manager), with the MPS control daemons
// that MPS-shared resources need. An MPS resource is advertised only while
// its daemon is up (see mps.go).
type devicePluginSink struct {
	manager *deviceplugin.Manager
	mps     *mps.Supervisor
	metrics *metrics
	log     *slog.Logger
	// serve is the agent's default API: the sink serves only the
	// resources ServedBy(serve) gives to the device plugins (serve.go).
	serve plan.Serve

	// in is the plan last applied and last its device-plugin part
	// (loop goroutine only).
	in, last *plan.Plan
	// served is the plan last handed to the manager, read by the Allocate
	// gate.
	served atomic.Pointer[plan.Plan]
	// held is which MPS resources are held back, for the log (mps.go).
	held mpsHeld
}

var (
	_ Sink       = (*devicePluginSink)(nil)
	_ Runner     = (*devicePluginSink)(nil)
	_ HealthSink = (*devicePluginSink)(nil)
)

// Name implements Sink.
func (s *devicePluginSink) Name() string { return "device plugins" }

// Apply implements Sink: MPS daemons first, then the servers.
func (s *devicePluginSink) Apply(ctx context.Context, _ *discovery.Inventory, in *plan.Plan) error {
	if in == nil || in == s.in {
		return nil
	}
	// The MPS daemons of every MPS resource, DRA's too: mps.go.
	s.applyMPS(ctx, in)
	own := in.ServedThrough(plan.ServeDevicePlugin, s.serve) // without the DRA resources
	if err := s.manager.Apply(s.servedPlan(own)); err != nil {
		return err
	}
	s.in, s.last = in, own
	return nil
}

// reapply serves the last plan again after an MPS daemon came up or went
// down, advertising or withdrawing its resource.
func (s *devicePluginSink) reapply() (bool, error) {
	if s.last == nil {
		return false, nil
	}
	return true, s.manager.Apply(s.servedPlan(s.last))
}

// Run implements Runner.
func (s *devicePluginSink) Run(ctx context.Context) error { return s.manager.Run(ctx) }

// Health implements HealthSink.
func (s *devicePluginSink) Health(ev discovery.HealthEvent) { s.manager.Health(ev) }

// publishSink publishes the inventory and plan as NFD features and labels
// (a NodeFeature object, a feature file or stdout) through a labeler.Loop.
// With no publisher it still keeps the content for /debug/content.
type publishSink struct {
	pub      labeler.Publisher
	loop     *labeler.Loop
	opts     labeler.LabelOptions
	contents chan labeler.Content
	// annotations gives the NodeFeature annotations of a plan (explain.go);
	// nil gives none.
	annotations func(*plan.Plan) map[string]string
	// hold, when set, is waited for before the first publish
	// (Config.PublishHold).
	hold func(context.Context)

	mu        sync.Mutex
	published *labeler.Content
}

var (
	_ Sink   = (*publishSink)(nil)
	_ Runner = (*publishSink)(nil)
)

// Name implements Sink.
func (s *publishSink) Name() string { return "publish" }

// Apply implements Sink. It never fails: the loop publishes (and retries)
// in the background.
func (s *publishSink) Apply(_ context.Context, inv *discovery.Inventory, plan *plan.Plan) error {
	c := labeler.NewContent(inv, plan, s.opts)
	if s.annotations != nil {
		c.Annotations = s.annotations(plan)
	}
	s.mu.Lock()
	s.published = &c
	s.mu.Unlock()
	if s.pub != nil {
		labeler.Offer(s.contents, c)
	}
	return nil
}

// Run implements Runner.
func (s *publishSink) Run(ctx context.Context) error {
	if s.pub == nil {
		<-ctx.Done()
		return nil
	}
	if s.hold != nil {
		s.hold(ctx)
	}
	return s.loop.Run(ctx, s.contents)
}

// content returns the content last applied, or nil.
func (s *publishSink) content() *labeler.Content {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.published
}

// republish offers the content last published again, so that a feature
// file deleted or changed behind the agent's back is rewritten (the
// publisher writes only what differs).
func (s *publishSink) republish() {
	c := s.content()
	if c == nil || s.pub == nil {
		return
	}
	labeler.Offer(s.contents, *c)
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

// dropped is a labeler.LabelOptions.OnDropped.
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
