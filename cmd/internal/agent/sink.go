package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// Sink is one output of the agent: it makes each (inventory, plan) the
// loop decides on true in its API (device plugins, DRA, a CDI spec, MPS
// daemons, NFD publishing). Each sink owns its state; the loop hands it
// the latest inventory and plan, in the order New declares, in two
// phases: every sink checks the plan, and only when none refuses it does
// every sink apply it. A plan one sink refuses is thus applied by none.
//
// plan is nil while no rules were ever accepted. The plan a sink sees is
// final: each resource's kubelet API is resolved (plan.Resource.Serve)
// and the resources a Gate holds back are marked (plan.Resource.Held).
type Sink interface {
	// Name names the sink in logs and errors.
	Name() string
	// Check reports whether the sink can serve plan on inv, changing
	// nothing: an error refuses the plan for every sink. What can be known
	// before serving is checked here (a resource the sink's API cannot
	// serve, a spec that cannot be built), so that Apply fails only on
	// what cannot (a disk that is full).
	Check(inv *discovery.Inventory, plan *plan.Plan) error
	// Apply serves plan, after every sink's Check passed for it. A plan
	// the sink already applied may come again (with a new inventory) and
	// must then change nothing. An error means the sink keeps what it
	// served before; the sinks after it then keep the last good plan.
	Apply(ctx context.Context, inv *discovery.Inventory, plan *plan.Plan) error
}

// Runner is a sink (or a part of the agent) with work of its own
// (servers, a publishing loop): the agent runs it beside the loop until
// ctx ends. An error stops the agent.
type Runner interface {
	Run(ctx context.Context) error
}

// Restorer is a sink whose output lives where others can delete or edit
// it behind the agent's back (a file on the host that runtimes read):
// RestoreOutput writes again what the sink last wrote when it is gone or
// differs. The loop calls it at every periodic re-discovery that changed
// nothing, so that such an output is back within one interval.
type Restorer interface {
	RestoreOutput()
}

// WatchedOutput is a Restorer whose output files the loop watches, so
// that one deleted or edited is restored at once (within the file
// watcher's settle time).
type WatchedOutput interface {
	Restorer
	// OutputFiles are the files to watch by a short name of each (the
	// file label of featureplug_file_watch_fallback); none when the sink
	// writes none.
	OutputFiles() map[string]string
}

// Gate is a sink that holds resources back while it cannot serve them
// (the MPS sink: an MPS resource whose control daemon is not up). The loop
// asks every gate before the sinks check a plan, and marks the resources
// held (plan.Resource.Held) in the plan every sink then sees; serving
// sinks leave them out, so the resources beside them keep serving.
type Gate interface {
	// Hold returns the resources of plan held back now, with why.
	Hold(plan *plan.Plan) map[string]string
	// GateChanged is signalled when a Hold answer may have changed; the
	// loop then applies the last good plan again.
	GateChanged() <-chan struct{}
}

// Reserver is a sink that holds devices for its own use (the DRA node: MIG
// devices made for claims), which the loop leaves out of every other
// resource (plan.WithoutReserved).
type Reserver interface {
	// Reserved returns the device IDs reserved now, with why.
	Reserved() map[string]string
}

// Readiness is a sink that knows whether what it serves has reached its
// consumer (the kubelet registered every device plugin): /readyz and
// featureplug_ready follow every such sink.
type Readiness interface {
	// Ready returns nil when ready, else why not.
	Ready() error
}

// Endpoints is a sink with HTTP endpoints of its own on the agent's
// metrics address (the publishing sink's /debug/content).
type Endpoints interface {
	Endpoints(mux *http.ServeMux)
}

// namedRunner is a part of the agent with work of its own.
type namedRunner struct {
	name string
	run  func(context.Context) error
}

// addSink appends s to the sinks and notes its capabilities.
func (a *Agent) addSink(s Sink) {
	a.sinks = append(a.sinks, s)
	if r, ok := s.(Runner); ok {
		a.runners = append(a.runners, namedRunner{s.Name(), r.Run})
	}
	if g, ok := s.(Gate); ok {
		a.gates = append(a.gates, g)
	}
	if r, ok := s.(Reserver); ok {
		a.reservers = append(a.reservers, r)
	}
}

// errRefused marks a plan a sink refused in its Check phase, as opposed
// to a sink that failed to apply one.
var errRefused = errors.New("refused")

// serve hands the current inventory and p to every sink: p marked with
// what the gates hold back, checked by every sink, then applied by every
// sink in order. A plan a sink refuses is applied by none (the error
// wraps errRefused and names every refusing sink). A sink that fails to
// apply it leaves the sinks after it on the last good plan (a.served), so
// that what is published is what is served.
func (a *Agent) serve(ctx context.Context, p *plan.Plan) error {
	gated := a.gate(p)
	if err := a.check(gated); err != nil {
		return err
	}
	for i, s := range a.sinks {
		if err := s.Apply(ctx, a.inv, gated); err != nil {
			for _, later := range a.sinks[i+1:] {
				if err := later.Apply(ctx, a.inv, a.served); err != nil {
					a.log.Error("a sink did not take the last good plan either", "sink", later.Name(), "err", err)
				}
			}
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
	}
	a.served, a.servedFrom = gated, p
	return nil
}

// check runs every sink's Check phase on p; it returns every refusal,
// each naming its sink.
func (a *Agent) check(p *plan.Plan) error {
	var errs []error
	for _, s := range a.sinks {
		if err := s.Check(a.inv, p); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.Name(), err))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", errRefused, errors.Join(errs...))
}

// gate returns p with the resources every gate holds back marked; the
// plan served now when that is what it would be again, so that a sink
// that sees the same plan changes nothing.
func (a *Agent) gate(p *plan.Plan) *plan.Plan {
	if p == nil {
		return nil
	}
	held := map[string]string{}
	for _, g := range a.gates {
		maps.Copy(held, g.Hold(p))
	}
	reserved := map[string]string{}
	for _, r := range a.reservers {
		maps.Copy(reserved, r.Reserved())
	}
	gated := p.WithHeld(held).WithoutReserved(reserved)
	if p == a.servedFrom && a.served != nil && sameHeld(gated, a.served) && len(gated.Problems) == len(a.served.Problems) {
		return a.served
	}
	return gated
}

// sameHeld reports whether two versions of one plan hold back the same
// resources.
func sameHeld(x, y *plan.Plan) bool {
	if len(x.Resources) != len(y.Resources) {
		return false
	}
	for i := range x.Resources {
		if x.Resources[i].Held != y.Resources[i].Held {
			return false
		}
	}
	return true
}

// ready returns nil while every Readiness sink is ready, else why not.
func (a *Agent) ready() error {
	var errs []error
	if a.health != nil {
		if err := a.nvmlReady(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range a.sinks {
		if r, ok := s.(Readiness); ok {
			if err := r.Ready(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// restoreOutputs restores the outputs of the sinks that keep one.
func (a *Agent) restoreOutputs() {
	for _, s := range a.sinks {
		if r, ok := s.(Restorer); ok {
			r.RestoreOutput()
		}
	}
}

// watchOutputs watches the output files of the WatchedOutput sinks: a
// change (once settled) asks the loop to restore that sink's output.
func (a *Agent) watchOutputs(ctx context.Context, goRun func(string, func(context.Context) error)) {
	for _, s := range a.sinks {
		w, ok := s.(WatchedOutput)
		if !ok {
			continue
		}
		for name, path := range w.OutputFiles() {
			snaps, _ := a.watcher.File(path, s.Name()+" output", maxOutputSize, nil, a.fallbackGauge(name))
			goRun(s.Name()+" output watch", func(ctx context.Context) error {
				for {
					select {
					case <-ctx.Done():
						return nil
					case <-snaps:
					}
					select {
					case a.outputs <- w:
					case <-ctx.Done():
						return nil
					}
				}
			})
		}
	}
}

// maxOutputSize bounds the read of a watched output file, which is only
// hashed (the sink compares with what it wrote).
const maxOutputSize = 4 << 20

// relayHealth hands the health events on ch to the health tracker until
// ctx ends or ch is closed.
func (a *Agent) relayHealth(ctx context.Context, ch <-chan discovery.HealthEvent) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-ch:
			if !ok {
				return
			}
			a.health.Record(ev)
		}
	}
}

// isReady reports whether every Readiness sink is ready.
func (a *Agent) isReady() bool { return a.ready() == nil }
