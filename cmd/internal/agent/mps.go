package agent

import (
	"context"
	"errors"
	"slices"
	"sync"

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
	names := make([]string, 0, len(plan.Resources))
	for _, r := range plan.Resources {
		names = append(names, r.Name)
		if needsDaemon(r.Sharing) {
			ok, reason := s.mps.Ready(r.Name)
			changed := s.held.note(r.Name, !ok, reason)
			if !ok {
				s.metrics.mpsUnavailable.WithLabelValues(r.Name).Set(1)
				if changed {
					s.log.Warn("MPS resource held back until its control daemon is up", "resource", r.Name, "reason", reason)
				}
				continue
			}
			s.metrics.mpsUnavailable.WithLabelValues(r.Name).Set(0)
			if changed {
				s.log.Info("MPS resource served: its control daemon is up", "resource", r.Name)
			}
		}
		served.Resources = append(served.Resources, r)
	}
	s.held.keep(names)
	s.served.Store(&served)
	return &served
}

// mpsHeld remembers which MPS resources a sink holds back, and why, so
// that the log says so when holding back starts, changes reason or ends,
// rather than at every plan (a re-discovery every 30 s replans) while a
// daemon stays down; featureplug_mps_resource_unavailable says it all the
// time.
type mpsHeld struct {
	mu      sync.Mutex
	reasons map[string]string // by resource, while held back
}

// note records whether resource is held back (for reason) and reports
// whether that differs from what was noted before; a resource not noted
// before counts as served.
func (h *mpsHeld) note(resource string, held bool, reason string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	before, was := h.reasons[resource]
	if !held {
		delete(h.reasons, resource)
		return was
	}
	if h.reasons == nil {
		h.reasons = map[string]string{}
	}
	h.reasons[resource] = reason
	return !was || before != reason
}

// keep forgets the resources not in names: a resource that leaves the plan
// and comes back held is reported again.
func (h *mpsHeld) keep(names []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for r := range h.reasons {
		if !slices.Contains(names, r) {
			delete(h.reasons, r)
		}
	}
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
	switch changed := s.held.note(r.Name, !ok, reason); {
	case changed && !ok:
		s.log.Warn("MPS resource withheld from the ResourceSlice until its control daemon is up", "resource", r.Name, "reason", reason)
	case changed:
		s.log.Info("MPS resource offered in the ResourceSlice: its control daemon is up", "resource", r.Name)
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
