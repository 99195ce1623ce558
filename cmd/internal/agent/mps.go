package agent

import (
	"context"
	"errors"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/plugin/mps"
	"github.com/featureplug/featureplug/rules/plan"
)

// setComputeMode is the MPS supervisor's mps.ComputeModeFunc: it sets a
// GPU's compute mode through the NVML of the latest discovery (the real
// library, or the fake node, which records the mode). The supervisor calls
// it from Apply and Stop, which run on the agent loop, the goroutine that
// owns a.lib.
func (a *Agent) setComputeMode(uuid string, mode nvml.ComputeMode) (nvml.ComputeMode, error) {
	if a.lib == nil {
		return 0, errors.New("no NVML library: GPUs not discovered yet")
	}
	return discovery.SetComputeMode(a.lib, uuid, mode)
}

// mpsDaemons lists the MPS control daemons a plan needs: one per resource
// shared with MPS, over its GPUs, with the rule's per-client limits.
func mpsDaemons(plan *plan.Plan) []mps.Daemon {
	var out []mps.Daemon
	for _, r := range plan.Resources {
		if !needsDaemon(r.Sharing) {
			continue
		}
		d := mps.Daemon{Resource: r.Name}
		var limit uint64
		if r.Sharing.MPS != nil {
			d.ActiveThreadPercentage = r.Sharing.MPS.ActiveThreadPercentage
			limit = r.Sharing.MPS.PinnedMemoryLimitMiB
		}
		for _, dev := range r.Devices {
			d.Devices = append(d.Devices, mps.Device{UUID: dev.GPUUUID, Index: dev.GPUIndex, PinnedMemoryLimitMiB: limit})
		}
		out = append(out, d)
	}
	return out
}

// servedPlan is plan without the MPS resources whose control daemon is not
// up: a resource is advertised only when a container could use it.
func (s *devicePluginSink) servedPlan(plan *plan.Plan) *plan.Plan {
	if s.mps == nil {
		s.served.Store(plan)
		return plan
	}
	served := *plan
	served.Resources = nil
	for _, r := range plan.Resources {
		if needsDaemon(r.Sharing) {
			if ok, reason := s.mps.Ready(r.Name); !ok {
				s.metrics.mpsUnavailable.WithLabelValues(r.Name).Set(1)
				s.log.Warn("MPS resource held back until its control daemon is up", "resource", r.Name, "reason", reason)
				continue
			}
			s.metrics.mpsUnavailable.WithLabelValues(r.Name).Set(0)
		}
		served.Resources = append(served.Resources, r)
	}
	s.served.Store(&served)
	return &served
}

// mpsGate lets Allocate through for every resource but an MPS resource
// whose daemon is not up.
func (s *devicePluginSink) mpsGate(resource string) (bool, string) {
	plan := s.served.Load()
	if s.mps == nil || plan == nil {
		return true, ""
	}
	if r, ok := plan.Resource(resource); !ok || !needsDaemon(r.Sharing) {
		return true, ""
	}
	return s.mps.Ready(resource)
}

// applyMPS starts, reconfigures or stops the MPS daemons for plan.
func (s *devicePluginSink) applyMPS(ctx context.Context, plan *plan.Plan) {
	if s.mps == nil {
		return
	}
	if err := s.mps.Apply(ctx, mpsDaemons(plan)); err != nil {
		s.log.Error("MPS daemons not applied", "err", err)
	}
}

// needsDaemon reports whether a resource's sharing strategy needs an MPS
// control daemon (plan.StrategySpec.Daemon).
func needsDaemon(s plan.Sharing) bool {
	spec, _ := s.Spec()
	return spec.Daemon
}
