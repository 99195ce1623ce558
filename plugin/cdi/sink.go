package cdi

import (
	"context"
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// SinkConfig configures a Sink.
type SinkConfig struct {
	// Options name the spec's kind and devices (and add per-device edits).
	Options Options
	// Writer writes the spec file.
	Writer Writer
	// Generator finds the container edits of the devices.
	Generator Generator
	// Only, when set, is the one API whose resources' devices the spec
	// holds: DRA prepares devices as CDI devices, so without a CDI
	// device-list strategy the spec holds the DRA resources only. Empty
	// holds every resource's devices.
	Only plan.Serve
	// Cleanup, when set, runs when the sink stops (a temporary fake
	// driver root).
	Cleanup func()
	// Logger receives the sink's logs (default discarded).
	Logger *slog.Logger
	// Registerer, when set, receives the sink's metrics.
	Registerer prometheus.Registerer
}

// Sink keeps a CDI spec for exactly the devices of the plan served: whole
// GPUs and MIG devices, the replicas of a shared device being that
// device. It comes before the device plugins and DRA, so that a device is
// advertised only once its CDI name resolves: a spec that cannot be made
// refuses the plan (Check), one that cannot be written keeps the sinks
// after it on the last good plan. Its first write removes the spec files
// an earlier run left for another vendor/class. A spec removed or edited
// behind the agent's back is written again (RestoreOutput).
type Sink struct {
	c   SinkConfig
	log *slog.Logger

	writes prometheus.Counter
	// restores counts specs written again after they were removed or
	// changed behind the agent's back.
	restores prometheus.Counter
	devices  prometheus.Gauge

	// The agent loop's goroutine only.
	specState
	cleaned bool
}

// built is a spec made for one inventory and plan.
type built struct {
	inv  *discovery.Inventory
	plan *plan.Plan
	spec *specs.Spec
}

// specState is what a spec sink keeps on the agent loop's goroutine: the
// spec its Check made last, for Apply, and the plan, inventory and spec it
// applied last (lastSpec nil: no device, no file).
type specState struct {
	checked  built
	lastPlan *plan.Plan
	lastInv  *discovery.Inventory
	lastSpec *specs.Spec
}

// current reports whether there is nothing to do for inv and p: no plan
// yet, or the plan and inventory applied last.
func (st *specState) current(inv *discovery.Inventory, p *plan.Plan) bool {
	return p == nil || (p == st.lastPlan && inv == st.lastInv)
}

// checkedSpec returns the spec check made for inv and p, running check
// first when the last one was for others.
func (st *specState) checkedSpec(inv *discovery.Inventory, p *plan.Plan, check func(*discovery.Inventory, *plan.Plan) error) (*specs.Spec, error) {
	if st.checked.inv != inv || st.checked.plan != p {
		if err := check(inv, p); err != nil {
			return nil, err
		}
	}
	return st.checked.spec, nil
}

// applied records spec as written for inv and p.
func (st *specState) applied(inv *discovery.Inventory, p *plan.Plan, spec *specs.Spec) {
	st.lastPlan, st.lastInv, st.lastSpec = p, inv, spec
}

// NewSink returns the CDI spec sink of c.
func NewSink(c SinkConfig) (*Sink, error) {
	if c.Generator == nil {
		return nil, errors.New("CDI sink: no generator")
	}
	s := &Sink{
		c:   c,
		log: c.Logger,
		writes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "featureplug_cdi_spec_writes_total",
			Help: "Writes (and removals) of the agent's CDI spec file; an unchanged spec is not written.",
		}),
		restores: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "featureplug_cdi_spec_restores_total",
			Help: "CDI spec files written again after they were removed or changed behind the agent's back.",
		}),
		devices: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "featureplug_cdi_spec_devices",
			Help: "Devices in the CDI spec file the agent keeps current.",
		}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if c.Registerer != nil {
		for _, m := range []prometheus.Collector{s.writes, s.restores, s.devices} {
			if err := c.Registerer.Register(m); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// Name implements the agent's Sink.
func (s *Sink) Name() string { return "CDI spec" }

// Check implements the agent's Sink: the spec of p's devices can be made.
// Before any plan there is nothing to describe.
func (s *Sink) Check(inv *discovery.Inventory, p *plan.Plan) error {
	if s.current(inv, p) {
		return nil
	}
	served := p
	if s.c.Only != "" {
		served = p.ServedThrough(s.c.Only, "")
	}
	spec, err := Build(s.c.Options, s.c.Generator, inv, served)
	if err != nil {
		return err
	}
	s.checked = built{inv: inv, plan: p, spec: spec}
	return nil
}

// Apply implements the agent's Sink: it writes the spec Check made (a spec
// an earlier run left stays until the first plan).
func (s *Sink) Apply(_ context.Context, inv *discovery.Inventory, p *plan.Plan) error {
	if s.current(inv, p) {
		return nil
	}
	spec, err := s.checkedSpec(inv, p, s.Check)
	if err != nil {
		return err
	}
	kind := s.c.Options.Kind
	changed, err := s.c.Writer.Write(kind, spec)
	if err != nil {
		return err
	}
	n := 0
	if spec != nil {
		n = len(spec.Devices)
	}
	s.devices.Set(float64(n))
	if changed {
		s.writes.Inc()
		if spec == nil {
			s.log.Info("CDI spec removed: no device is advertised", "path", s.c.Writer.Path(kind))
		} else {
			s.log.Info("CDI spec written", "path", s.c.Writer.Path(kind), "devices", n, "cdiVersion", spec.Version)
		}
	}
	s.removeStale()
	s.applied(inv, p, spec)
	return nil
}

// removeStale removes, once, the spec files an earlier run left for
// another vendor/class.
func (s *Sink) removeStale() {
	if s.cleaned {
		return
	}
	removed, err := s.c.Writer.RemoveStale(s.c.Options.Kind, VFIOKind) // VFIOSink keeps its own
	for _, f := range removed {
		s.log.Info("stale CDI spec removed", "file", f)
	}
	if err != nil {
		// Not fatal: the current spec is in place; retried next time.
		s.log.Warn("could not remove a stale CDI spec", "err", err)
		return
	}
	s.cleaned = true
}

// OutputFiles implements the agent's WatchedOutput: the spec file
// ("cdi"), which the agent watches to restore it at once.
func (s *Sink) OutputFiles() map[string]string {
	return map[string]string{"cdi": s.c.Writer.Path(s.c.Options.Kind)}
}

// RestoreOutput implements the agent's Restorer: a spec file removed (its
// directory too) or edited by someone else is written again as the agent
// last wrote it, so that the CDI names Allocate returns keep resolving.
func (s *Sink) RestoreOutput() {
	if s.lastPlan == nil {
		return
	}
	path := s.c.Writer.Path(s.c.Options.Kind)
	changed, err := s.c.Writer.Write(s.c.Options.Kind, s.lastSpec)
	if err != nil {
		s.log.Warn("cannot restore the CDI spec; retrying at the next re-discovery", "path", path, "err", err)
		return
	}
	if changed {
		s.writes.Inc()
		s.restores.Inc()
		s.log.Warn("the CDI spec was removed or changed behind the agent's back; written again", "path", path)
	}
}

// Run implements the agent's Runner: it runs Cleanup when the agent
// stops. The spec stays: containers made from it keep running.
func (s *Sink) Run(ctx context.Context) error {
	<-ctx.Done()
	if s.c.Cleanup != nil {
		s.c.Cleanup()
	}
	return nil
}

// FakeRoot is the Generator of a fake node: Layout lays the node's driver
// root out in Dir (device nodes, libraries as stubs), and
// the edits are read from there as Root reads them, so that the spec has
// the shape of a real one and follows the node's MIG layout.
type FakeRoot struct {
	Dir    string
	Layout func(dir string) error
}

// Edits implements Generator.
func (g FakeRoot) Edits(inv *discovery.Inventory, devs []plan.Device) (Edits, error) {
	if err := g.Layout(g.Dir); err != nil {
		return Edits{}, err
	}
	return Root{Dir: g.Dir}.Edits(inv, devs)
}
