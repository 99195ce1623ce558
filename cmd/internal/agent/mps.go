package agent

import (
	"context"

	"github.com/featureplug/featureplug/plugin/mps"
	"github.com/featureplug/featureplug/rules"
)

// mpsDaemons lists the MPS control daemons a plan needs: one per resource
// shared with MPS, over its GPUs, with the rule's per-client limits.
func mpsDaemons(plan *rules.Plan) []mps.Daemon {
	var out []mps.Daemon
	for _, r := range plan.Resources {
		if r.Sharing.Strategy != rules.SharingMPS {
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
func (a *Agent) servedPlan(plan *rules.Plan) *rules.Plan {
	if a.mps == nil {
		a.served.Store(plan)
		return plan
	}
	served := *plan
	served.Resources = nil
	for _, r := range plan.Resources {
		if r.Sharing.Strategy == rules.SharingMPS {
			if ok, reason := a.mps.Ready(r.Name); !ok {
				a.metrics.mpsUnavailable.WithLabelValues(r.Name).Set(1)
				a.log.Warn("MPS resource held back until its control daemon is up", "resource", r.Name, "reason", reason)
				continue
			}
			a.metrics.mpsUnavailable.WithLabelValues(r.Name).Set(0)
		}
		served.Resources = append(served.Resources, r)
	}
	a.served.Store(&served)
	return &served
}

// mpsGate lets Allocate through for every resource but an MPS resource
// whose daemon is not up.
func (a *Agent) mpsGate(resource string) (bool, string) {
	plan := a.served.Load()
	if a.mps == nil || plan == nil {
		return true, ""
	}
	if r, ok := plan.Resource(resource); !ok || r.Sharing.Strategy != rules.SharingMPS {
		return true, ""
	}
	return a.mps.Ready(resource)
}

// applyMPS starts, reconfigures or stops the MPS daemons for plan.
func (a *Agent) applyMPS(ctx context.Context, plan *rules.Plan) {
	if a.mps == nil {
		return
	}
	if err := a.mps.Apply(ctx, mpsDaemons(plan)); err != nil {
		a.log.Error("MPS daemons not applied", "err", err)
	}
}
