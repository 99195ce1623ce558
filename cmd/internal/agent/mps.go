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

// MPS through DRA (issue 20): an MPS resource served through DRA is
// published like a time-sliced one (dra.BuildSlice: consumable capacity,
// one share per claim). The device-plugin sink runs the control daemons
// of every MPS resource, whichever API serves it (mpsDaemons of the whole
// plan). The DRA sink withholds an MPS resource's devices from the
// ResourceSlice and the Table until its daemon is up, as the device plugin
// advertises such a resource only then, and publishes them when the
// daemon's readiness flips (Agent.applyServed); while withheld,
// featureplug_mps_resource_unavailable{resource} is 1 and a warning is
// logged. The kubelet gets only CDI device IDs from a DRA driver, so what
// the device plugin's Allocate adds for MPS (plan's mpsContainer: the
// pipe directory, the client limits, the pipe and shm mounts) is in the
// CDI spec entry of each such device (mpsCDIEdits).

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

// mpsWithheld is dra.BuildOptions.Withhold: an MPS resource whose control
// daemon is not up is left out of the slice.
func (s *draSink) mpsWithheld(r *plan.Resource) bool {
	if s.mps == nil || !needsDaemon(r.Sharing) {
		return false
	}
	ok, reason := s.mps.Ready(r.Name)
	if s.mpsUnavailable != nil {
		v := 0.0
		if !ok {
			v = 1
		}
		s.mpsUnavailable.WithLabelValues(r.Name).Set(v)
	}
	if !ok {
		s.log.Warn("MPS resource withheld from the ResourceSlice until its control daemon is up", "resource", r.Name, "reason", reason)
	}
	return !ok
}

// mpsChanged publishes or withholds the DRA MPS resources after an MPS
// daemon came up or went down.
func (s *draSink) mpsChanged() { s.rebuild("an MPS daemon's change") }

// mpsCDIEdits is cdi.Options.DeviceEdits: a device of an MPS resource
// served through DRA carries, in its own CDI spec entry, the container
// edits the device plugin's Allocate gives an MPS container of one
// replica (plan's mpsContainer, with the daemons' layout): the pipe
// directory, the per-client limits of the rule, the pipe and shm mounts.
// A claim takes one share of the device (MPS fails requests greater than
// one), and the limits name the container's CUDA device 0: a container
// given several MPS devices by DRA gets the settings of one of them.
// Other devices get nothing: the device plugin adds its own edits.
func (a *Agent) mpsCDIEdits() func(*plan.Resource, plan.Device) plan.ContainerEdits {
	def, sup := a.cfg.DefaultServe, a.mps
	if sup == nil {
		return nil
	}
	layout := sup.Layout()
	return func(r *plan.Resource, d plan.Device) plan.ContainerEdits {
		spec, _ := r.Sharing.Spec()
		if r.ServedBy(def) != plan.ServeDRA || !spec.Daemon || spec.Container == nil {
			return plan.ContainerEdits{}
		}
		return spec.Container(plan.Allocation{
			Resource: r.Name,
			Sharing:  r.Sharing,
			Devices:  []plan.AllocatedDevice{{MemoryMiB: d.MemoryMiB, Replicas: 1}},
			MPS:      layout,
		})
	}
}
