package mps

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// Sink is the agent's output for MPS: it runs the control daemons of a
// plan's MPS-shared resources, whichever API serves them, and is the
// readiness gate that holds such a resource back (plan.Resource.Held)
// until its daemon is up, so that no API advertises a resource a
// container could not use. A resource whose daemon cannot start on this
// node (no nvidia-cuda-mps-control, a failed start) is held back alone;
// the resources beside it serve. While held back,
// featureplug_mps_resource_unavailable{resource} is 1 and a warning is
// logged once per change.
type Sink struct {
	sup         *Supervisor
	log         *slog.Logger
	unavailable *prometheus.GaugeVec
	changed     chan struct{}
	held        heldLog // the agent loop's goroutine only

	// mu guards mps, the MPS resources of the plan applied last, which
	// Ready reads from the device plugins' Allocate.
	mu  sync.Mutex
	mps map[string]bool
}

// NewSink returns the MPS sink over a Supervisor made from opts (whose
// OnChange the sink sets) with its metrics on opts.Registerer.
func NewSink(opts Options) (*Sink, error) {
	s := &Sink{
		log: opts.Logger,
		unavailable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "featureplug_mps_resource_unavailable",
			Help: "1 while an MPS-shared resource is held back because its control daemon is not up.",
		}, []string{"resource"}),
		changed: make(chan struct{}, 1),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	opts.OnChange = func(string) {
		select {
		case s.changed <- struct{}{}:
		default:
		}
	}
	var err error
	if s.sup, err = New(opts); err != nil {
		return nil, err
	}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(s.unavailable); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Name implements the agent's Sink.
func (s *Sink) Name() string { return "MPS daemons" }

// Check implements the agent's Sink: the MPS sink never refuses a plan,
// it holds back what it cannot serve.
func (s *Sink) Check(*discovery.Inventory, *plan.Plan) error { return nil }

// Apply implements the agent's Sink: it starts, reconfigures or stops the
// daemons for p. Daemons that cannot be applied are logged; their
// resources stay held back.
func (s *Sink) Apply(ctx context.Context, _ *discovery.Inventory, p *plan.Plan) error {
	if p == nil {
		return nil
	}
	daemons := Daemons(p)
	names := make(map[string]bool, len(daemons))
	for _, d := range daemons {
		names[d.Resource] = true
	}
	s.mu.Lock()
	s.mps = names
	s.mu.Unlock()
	if err := s.sup.Apply(ctx, daemons); err != nil {
		s.log.Error("MPS daemons not applied", "err", err)
	}
	return nil
}

// Run implements the agent's Runner: when ctx ends it quits the daemons
// and restores the GPUs' compute modes.
func (s *Sink) Run(ctx context.Context) error {
	<-ctx.Done()
	s.sup.Stop()
	return nil
}

// Hold implements the agent's Gate: the resources of p held back now,
// with why: those whose sharing needs a control daemon that is not up.
func (s *Sink) Hold(p *plan.Plan) map[string]string {
	var held map[string]string
	names := make([]string, 0, len(p.Resources))
	for i := range p.Resources {
		r := &p.Resources[i]
		names = append(names, r.Name)
		if !NeedsDaemon(r.Sharing) {
			continue
		}
		ok, reason := s.sup.Ready(r.Name)
		s.report(r.Name, ok, reason)
		if !ok {
			if held == nil {
				held = map[string]string{}
			}
			held[r.Name] = reason
		}
	}
	s.held.keep(names)
	return held
}

// report shows whether an MPS resource is held back: the gauge always,
// the log when that changed.
func (s *Sink) report(resource string, ok bool, reason string) {
	if ok {
		s.unavailable.WithLabelValues(resource).Set(0)
	} else {
		s.unavailable.WithLabelValues(resource).Set(1)
	}
	switch changed := s.held.note(resource, !ok, reason); {
	case changed && !ok:
		s.log.Warn("MPS resource held back until its control daemon is up", "resource", resource, "reason", reason)
	case changed:
		s.log.Info("MPS resource served: its control daemon is up", "resource", resource)
	}
}

// GateChanged implements the agent's Gate: it is signalled when a daemon
// came up or went down.
func (s *Sink) GateChanged() <-chan struct{} { return s.changed }

// Ready reports whether resource may be handed to a container now, and
// why not: true for a resource that needs no daemon. The device plugins
// ask it before every Allocate (deviceplugin.Options.Gate), for the moment
// between a daemon's death and the agent holding its resource back.
func (s *Sink) Ready(resource string) (bool, string) {
	s.mu.Lock()
	mps := s.mps[resource]
	s.mu.Unlock()
	if !mps {
		return true, ""
	}
	return s.sup.Ready(resource)
}

// Layout returns the MPS directory layout the daemons run in.
func (s *Sink) Layout() plan.MPSLayout { return s.sup.Layout() }

// Daemons lists the MPS control daemons a plan needs: one per resource
// shared with MPS, over its GPUs, with the rule's per-client limits.
func Daemons(p *plan.Plan) []Daemon {
	var out []Daemon
	for _, r := range p.Resources {
		if !NeedsDaemon(r.Sharing) {
			continue
		}
		d := Daemon{Resource: r.Name}
		var limit uint64
		if r.Sharing.MPS != nil {
			d.ActiveThreadPercentage = r.Sharing.MPS.ActiveThreadPercentage
			limit = r.Sharing.MPS.PinnedMemoryLimitMiB
		}
		for _, dev := range r.Devices {
			d.Devices = append(d.Devices, Device{UUID: dev.GPUUUID, Index: dev.GPUIndex, PinnedMemoryLimitMiB: limit})
		}
		out = append(out, d)
	}
	return out
}

// NeedsDaemon reports whether a sharing strategy needs an MPS control
// daemon (plan.StrategySpec.Daemon).
func NeedsDaemon(s plan.Sharing) bool {
	spec, _ := s.Spec()
	return spec.Daemon
}

// CDIEdits returns the container edits of one device of an MPS resource
// served through DRA, for its own CDI spec entry (plugin/cdi's
// Options.DeviceEdits): what the device plugin's Allocate gives an MPS
// container of one replica (the pipe directory, the rule's per-client
// limits, the pipe and shm mounts, in the daemons' layout). A claim takes
// one share of the device (MPS fails requests greater than one), and the
// limits name the container's CUDA device 0: a container given several
// MPS devices by DRA gets the settings of one of them. Other devices get
// nothing: the device plugin adds its own edits.
func (s *Sink) CDIEdits(r *plan.Resource, d plan.Device) plan.ContainerEdits {
	spec, _ := r.Sharing.Spec()
	if r.Serve != plan.ServeDRA || !spec.Daemon || spec.Container == nil {
		return plan.ContainerEdits{}
	}
	return spec.Container(plan.Allocation{
		Resource: r.Name,
		Sharing:  r.Sharing,
		Devices:  []plan.AllocatedDevice{{MemoryMiB: d.MemoryMiB, Replicas: 1}},
		MPS:      s.sup.Layout(),
	})
}

// heldLog remembers which MPS resources are held back, and why, so that
// the log says so when holding back starts, changes reason or ends, rather
// than at every plan (a re-discovery every 30 s replans) while a daemon
// stays down; featureplug_mps_resource_unavailable says it all the time.
type heldLog struct {
	reasons map[string]string // by resource, while held back
}

// note records whether resource is held back (for reason) and reports
// whether that differs from what was noted before; a resource not noted
// before counts as served.
func (h *heldLog) note(resource string, held bool, reason string) bool {
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
func (h *heldLog) keep(names []string) {
	for r := range h.reasons {
		if !slices.Contains(names, r) {
			delete(h.reasons, r)
		}
	}
}
