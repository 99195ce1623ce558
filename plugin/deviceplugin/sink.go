package deviceplugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// Sink serves a plan's device-plugin part (plan.Resource.Serve is
// plan.ServeDevicePlugin) through the kubelet's device-plugin API: one
// server per resource (Manager). A resource held back (an MPS resource
// whose control daemon is not up) is not advertised until it is
// released.
type Sink struct {
	m *Manager
	// in is the plan applied last (the agent loop's goroutine only).
	in *plan.Plan
}

// NewSink returns the sink of m.
func NewSink(m *Manager) *Sink { return &Sink{m: m} }

// Name implements the agent's Sink.
func (s *Sink) Name() string { return "device plugins" }

// Check implements the agent's Sink: the part of p the device plugins
// serve is a valid plan (names, sizes, caps) whose every resource has a
// socket path.
func (s *Sink) Check(_ *discovery.Inventory, p *plan.Plan) error {
	if p == nil || p == s.in {
		return nil
	}
	own := p.Serving(plan.ServeDevicePlugin)
	if err := validatePlan(own); err != nil {
		return err
	}
	var errs []error
	for _, r := range servedResources(own) {
		if _, err := s.m.socketPath(r.Name); err != nil {
			errs = append(errs, fmt.Errorf("resource %s: %w", r.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Apply implements the agent's Sink.
func (s *Sink) Apply(_ context.Context, _ *discovery.Inventory, p *plan.Plan) error {
	if p == nil || p == s.in {
		return nil
	}
	if err := s.m.Apply(p.Serving(plan.ServeDevicePlugin)); err != nil {
		return err
	}
	s.in = p
	return nil
}

// Run implements the agent's Runner.
func (s *Sink) Run(ctx context.Context) error { return s.m.Run(ctx) }

// Ready implements the agent's Readiness: every resource of the plan is
// registered with the kubelet that owns kubelet.sock now.
func (s *Sink) Ready() error {
	if s.m.Ready() {
		return nil
	}
	return errors.New("not every resource of the current plan is registered with the kubelet")
}

// WaitReady waits until the sink is ready or ctx ends, and reports
// whether it is (Manager.WaitReady).
func (s *Sink) WaitReady(ctx context.Context) bool { return s.m.WaitReady(ctx) }
