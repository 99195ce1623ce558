package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/plugin"
	"github.com/featureplug/featureplug/plugin/cdi"
	"github.com/featureplug/featureplug/rules/plan"
)

// CDIConfig configures the CDI spec the agent writes while a CDI
// device-list strategy (cdi-annotations, cdi-cri) is on, so that the CDI
// names Allocate returns resolve. Its vendor/class is Plugin.CDIKind and
// its device names follow Plugin.DeviceIDStrategy.
type CDIConfig struct {
	// SpecDir is the directory the spec is written to (default
	// cdi.DefaultSpecDir, /var/run/cdi).
	SpecDir string
	// DriverRoot is the root of the driver installation NVIDIA's nvcdi
	// reads on real hardware (default "/"). With a fake node, it is where
	// the fake driver root is laid out when set; otherwise a temporary
	// directory is, and removed when the agent stops.
	DriverRoot string
	// HostDriverRoot is where DriverRoot is on the host, for the spec's
	// host paths: "/" when the agent sees the host's root at DriverRoot
	// (default: DriverRoot, mounted at the same path). Real GPUs only.
	HostDriverRoot string
	// HookPath is the nvidia-cdi-hook that the real specs' hooks run
	// (default: nvcdi's /usr/bin/nvidia-cdi-hook).
	HookPath string
}

// cdiSink keeps a CDI spec for exactly the devices of the plan served:
// whole GPUs and MIG devices, the replicas of a shared device being that
// device. It comes before the device plugins, so a device is advertised
// only once its CDI name resolves; a spec that cannot be made or written
// keeps the device plugins on the last good plan. Its first write removes
// the spec files an earlier run left for another vendor/class.
type cdiSink struct {
	opts   cdi.Options
	gen    cdi.Generator
	writer cdi.Writer
	log    *slog.Logger
	writes prometheus.Counter
	// restores counts specs written again after they were removed or
	// changed behind the agent's back.
	restores prometheus.Counter
	devices  prometheus.Gauge
	// cleanup removes a temporary fake driver root at the end of Run.
	cleanup func()
	// only, when set, is the part of a plan the spec holds (the DRA
	// resources, when no CDI device-list strategy is on); nil: all.
	only func(*plan.Plan) *plan.Plan

	// Loop goroutine only.
	lastPlan *plan.Plan
	lastInv  *discovery.Inventory
	// lastSpec is the spec last written for lastPlan (nil: no device, no
	// file).
	lastSpec *specs.Spec
	cleaned  bool
}

var (
	_ Sink   = (*cdiSink)(nil)
	_ Runner = (*cdiSink)(nil)

	_ outputRestorer = (*cdiSink)(nil)
)

// cdiEnabled reports whether Allocate returns CDI names.
func cdiEnabled(o plugin.Options) bool {
	return slices.Contains(o.DeviceListStrategies, plugin.DeviceListCDIAnnotations) ||
		slices.Contains(o.DeviceListStrategies, plugin.DeviceListCDICRI)
}

// addCDISink puts the CDI spec sink first in a.sinks when a CDI
// device-list strategy is on, or else, holding only the DRA resources'
// devices, when DRA can serve (dra.go: DRA prepares devices as CDI
// devices). A CDI spec that cannot be made for DRA alone is a start-up
// error only with --serve dra; otherwise plans that serve a resource
// through DRA are refused with the reason.
func (a *Agent) addCDISink() error {
	draOnlySpec := !cdiEnabled(a.cfg.Plugin)
	if draOnlySpec && !a.draNeedsCDISink() {
		return nil
	}
	s, err := a.newCDISink()
	if err != nil {
		if draOnlySpec && a.cfg.DefaultServe != plan.ServeDRA {
			a.dra.cdiErr = err
			a.log.Warn("no CDI spec for DRA devices; a resource served through DRA will be refused", "err", err)
			return nil
		}
		return err
	}
	if draOnlySpec {
		s.only = draOnly(a.cfg.DefaultServe)
	}
	a.sinks = append([]Sink{s}, a.sinks...)
	return nil
}

func (a *Agent) newCDISink() (*cdiSink, error) {
	kind := a.cfg.Plugin.CDIKind
	if kind == "" {
		kind = plugin.DefaultCDIKind
	}
	log := a.log.With("component", "cdi")
	s := &cdiSink{
		opts: cdi.Options{Kind: kind, ByIndex: a.cfg.Plugin.DeviceIDStrategy == plugin.DeviceIDIndex,
			DeviceEdits: a.mpsCDIEdits()}, // the MPS client settings of DRA devices: mps.go
		writer:  cdi.Writer{Dir: a.cfg.CDI.SpecDir},
		log:     log,
		cleanup: func() {},
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
	for _, c := range []prometheus.Collector{s.writes, s.restores, s.devices} {
		if err := a.registry.Register(c); err != nil {
			return nil, err
		}
	}
	switch src := a.cfg.Source.(type) {
	case *FakeSource:
		dir := a.cfg.CDI.DriverRoot
		if dir == "" || dir == "/" {
			tmp, err := os.MkdirTemp("", "featureplug-fake-driver-root-")
			if err != nil {
				return nil, fmt.Errorf("fake driver root: %w", err)
			}
			dir = tmp
			s.cleanup = func() { _ = os.RemoveAll(tmp) }
		}
		s.gen = fakeRootGenerator{src: src, dir: dir}
		log.Info("CDI specs come from a fake driver root", "driverRoot", dir)
	case *RealSource:
		gen, err := newNVCDIGenerator(src, a.cfg.CDI, log) // cdi_nvcdi.go
		if err != nil {
			return nil, err
		}
		s.gen = gen
	default:
		return nil, fmt.Errorf("CDI specs: GPU source %T has no driver root", a.cfg.Source)
	}
	return s, nil
}

// Name implements Sink.
func (s *cdiSink) Name() string { return "CDI spec" }

// Apply implements Sink. Before any plan there is nothing to describe,
// and a spec an earlier run left stays until the first plan.
func (s *cdiSink) Apply(_ context.Context, inv *discovery.Inventory, p *plan.Plan) error {
	if p == nil || (p == s.lastPlan && inv == s.lastInv) {
		return nil
	}
	served := p
	if s.only != nil {
		served = s.only(p)
	}
	spec, err := cdi.Build(s.opts, s.gen, inv, served)
	if err != nil {
		return err
	}
	changed, err := s.writer.Write(s.opts.Kind, spec)
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
			s.log.Info("CDI spec removed: no device is advertised", "path", s.writer.Path(s.opts.Kind))
		} else {
			s.log.Info("CDI spec written", "path", s.writer.Path(s.opts.Kind), "devices", n, "cdiVersion", spec.Version)
		}
	}
	if !s.cleaned {
		removed, err := s.writer.RemoveStale(s.opts.Kind)
		for _, f := range removed {
			s.log.Info("stale CDI spec removed", "file", f)
		}
		if err != nil {
			// Not fatal: the current spec is in place; retried next time.
			s.log.Warn("could not remove a stale CDI spec", "err", err)
		} else {
			s.cleaned = true
		}
	}
	s.lastPlan, s.lastInv, s.lastSpec = p, inv, spec
	return nil
}

// restoreOutput implements outputRestorer: a spec file removed (its
// directory too) or edited by someone else is written again as the agent
// last wrote it, so that the CDI names Allocate returns keep resolving.
func (s *cdiSink) restoreOutput() {
	if s.lastPlan == nil {
		return
	}
	path := s.writer.Path(s.opts.Kind)
	changed, err := s.writer.Write(s.opts.Kind, s.lastSpec)
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

// Run implements Runner: it removes a temporary fake driver root when
// the agent stops. The spec stays: containers made from it keep running.
func (s *cdiSink) Run(ctx context.Context) error {
	<-ctx.Done()
	s.cleanup()
	return nil
}

// fakeRootGenerator lays out the fake node's driver root (device nodes,
// libraries as stubs) and reads the edits from it, so the
// spec has the shape of a real one and follows the node's MIG layout.
type fakeRootGenerator struct {
	src *FakeSource
	dir string
}

// Edits implements cdi.Generator.
func (g fakeRootGenerator) Edits(inv *discovery.Inventory, devs []plan.Device) (cdi.Edits, error) {
	node := g.src.current()
	if node == nil {
		return cdi.Edits{}, errors.New("fake driver root: no fake node")
	}
	if err := node.WriteDriverRoot(g.dir); err != nil {
		return cdi.Edits{}, err
	}
	return cdi.Root{Dir: g.dir}.Edits(inv, devs)
}
