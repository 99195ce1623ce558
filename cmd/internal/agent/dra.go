package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/plugin/cdi"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/plugin/dra"
	"github.com/featureplug/featureplug/plugin/mps"
	"github.com/featureplug/featureplug/rules/plan"
)

// draSink serves the plan's DRA resources (plan.Resource.ServedBy(the
// agent's default) == dra) through Dynamic Resource Allocation as driver
// gpu.featureplug.io: it publishes the node's ResourceSlice (dra.Publisher)
// and swaps in the dra.Table the kubelet-side DRA server (dra_node.go)
// prepares claims from. The device-plugin sink leaves those resources
// alone, so a device is offered through exactly one API.
//
// When it exists: always, except with NoDevicePlugins (the scale driver's
// simulated nodes). Whether a plan serves anything through DRA is the
// rules' choice (serve: dra) or the agent's default (--serve dra), and a
// rules reload may move a resource either way, so the sink is always
// there to take it. It talks to the API server only once a device is
// served through DRA or --serve is dra (see dra.PublisherConfig.Active):
// a node whose rules serve nothing through DRA needs no ResourceSlice
// permissions and makes no request about slices. A DRA resource needs
// an API server and CDI specs: without them (no kube client, an empty
// --cdi-spec-dir) the plan is refused, naming the resource, the rule and
// the missing flag, and the last good plan keeps serving; with --serve
// dra they are start-up errors. Without a CDI device-list strategy the
// CDI sink still runs, holding only the DRA resources' devices (cdi.go).
//
// Health: devices the device-plugin manager holds Unhealthy (from health
// events, and from the health state file across a restart) carry the
// taint dra.TaintUnhealthy; the manager's OnHealthChange rebuilds the
// slice when that set changes.
type draSink struct {
	def plan.Serve
	// cdi names the CDI device IDs of the Table as the CDI sink names the
	// spec's devices.
	cdi cdi.Options
	// specDir is --cdi-spec-dir; cdiErr says why the agent has no CDI
	// spec for DRA devices (nil: it has).
	specDir string
	cdiErr  error
	manager *deviceplugin.Manager
	// mps runs the MPS control daemons (nil: none); an MPS resource's
	// devices are published only while its daemon is up, and
	// mpsUnavailable says which are not (mps.go).
	mps            *mps.Supervisor
	mpsUnavailable *prometheus.GaugeVec
	// held is which MPS resources are withheld, for the log (mps.go).
	held mpsHeld
	// pub is nil without an API server.
	pub *dra.Publisher
	log *slog.Logger

	devices prometheus.Gauge

	// table is the Table the kubelet-side server reads.
	table atomic.Pointer[dra.Table]
	// tableChanged, when set (dra_node.go, before the sinks run), is
	// called after each new Table: the kubelet-side server's device
	// health streams read it again.
	tableChanged func()

	// marker records that the node may have a slice (sliceMarker).
	marker sliceMarker

	// mu guards the last inventory and plan, which health changes rebuild
	// from outside the loop goroutine.
	mu       sync.Mutex
	lastInv  *discovery.Inventory
	lastPlan *plan.Plan
}

var (
	_ Sink   = (*draSink)(nil)
	_ Runner = (*draSink)(nil)
)

// draMetrics are the DRA sink's metrics.
type draMetrics struct {
	writes  *prometheus.CounterVec
	syncs   *prometheus.CounterVec
	devices prometheus.Gauge
}

func newDRAMetrics(reg prometheus.Registerer) (*draMetrics, error) {
	m := &draMetrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "featureplug_dra_slice_writes_total",
			Help: "Writes of the node's DRA ResourceSlices by operation (create, update, delete); publishing an unchanged slice writes nothing.",
		}, []string{"op"}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "featureplug_dra_slice_syncs_total",
			Help: "Comparisons of the node's ResourceSlice with the API server's by result (ok, error); errors are retried with backoff.",
		}, []string{"result"}),
		devices: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "featureplug_dra_devices",
			Help: "Devices the agent serves through DRA (in its ResourceSlice).",
		}),
	}
	for _, c := range []prometheus.Collector{m.writes, m.syncs, m.devices} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, op := range []string{"create", "update", "delete"} {
		m.writes.WithLabelValues(op)
	}
	for _, r := range []string{"ok", "error"} {
		m.syncs.WithLabelValues(r)
	}
	return m, nil
}

// addDRASink adds the DRA sink after the device plugins (so that it sees
// the plan they serve) and before publishing. Config problems of
// --serve dra are start-up errors.
func (a *Agent) addDRASink() error {
	def := a.cfg.DefaultServe
	if def == plan.ServeDRA {
		if a.cfg.Kube == nil {
			return errors.New("--serve dra publishes ResourceSlices: it needs an API server (in-cluster or --kubeconfig)")
		}
		if a.cfg.CDI.SpecDir == "" {
			return errors.New("--serve dra prepares devices as CDI devices: --cdi-spec-dir is empty")
		}
	}
	met, err := newDRAMetrics(a.registry)
	if err != nil {
		return err
	}
	kind := a.cfg.Plugin.CDIKind
	if kind == "" {
		kind = deviceplugin.DefaultCDIKind
	}
	s := &draSink{
		def:     def,
		cdi:     cdi.Options{Kind: kind, ByIndex: a.cfg.Plugin.DeviceIDStrategy == deviceplugin.DeviceIDIndex},
		specDir: a.cfg.CDI.SpecDir,
		manager: a.manager,
		log:     a.log.With("component", "dra"),
		devices: met.devices,
		mps:     a.mps,
		marker:  sliceMarker{path: sliceMarkerPath(a.cfg.Plugin.StateDir), log: a.log.With("component", "dra")},
	}
	if a.metrics != nil {
		s.mpsUnavailable = a.metrics.mpsUnavailable
	}
	if a.cfg.Kube != nil {
		s.pub, err = dra.NewPublisher(dra.PublisherConfig{
			NodeName:        a.cfg.NodeName,
			Slices:          a.cfg.Kube.ResourceSlices(),
			Nodes:           cachedNodes{a, a.cfg.Kube.Nodes()}, // nodecache.go
			WatchListClient: a.cfg.Kube,
			// A node whose slice an earlier run left (the marker)
			// manages its slices from the start, so that a slice
			// whose devices the device plugins now serve is deleted.
			Active:     def == plan.ServeDRA || s.marker.exists(),
			BackoffMax: publishBackoffMax,
			Jitter:     backoffJitter,
			OnWrite:    func(op string) { met.writes.WithLabelValues(op).Inc() },
			OnSync: func(err error) {
				if err != nil {
					met.syncs.WithLabelValues("error").Inc()
					return
				}
				met.syncs.WithLabelValues("ok").Inc()
				s.marker.clearIf(func() bool { return s.pub.Offered() == 0 })
			},
			Logger: s.log,
		})
		if err != nil {
			return err
		}
	}
	a.dra = s
	a.draHealth.Store(s)
	i := len(a.sinks)
	for j, x := range a.sinks {
		if x == Sink(a.publisher) {
			i = j
			break
		}
	}
	a.sinks = append(a.sinks[:i], append([]Sink{s}, a.sinks[i:]...)...)
	return a.addDRANode() // the kubelet-facing half, right after this sink: dra_node.go
}

// draNeedsCDISink reports whether the CDI sink must exist for DRA alone
// (no CDI device-list strategy): when DRA can serve at all.
func (a *Agent) draNeedsCDISink() bool {
	return a.dra != nil && (a.cfg.Kube != nil || a.cfg.DefaultServe == plan.ServeDRA)
}

// draOnly returns the plan with only its DRA resources: what the CDI
// spec holds when no CDI device-list strategy is on.
func draOnly(def plan.Serve) func(*plan.Plan) *plan.Plan {
	return func(p *plan.Plan) *plan.Plan { return p.ServedThrough(plan.ServeDRA, def) }
}

// Name implements Sink.
func (s *draSink) Name() string { return "DRA" }

// Apply implements Sink: it builds the slice's devices and the Table of
// plan's DRA resources, swaps the Table in and offers the devices to the
// publisher. A resource DRA cannot serve (no API server, no CDI spec)
// refuses the plan, naming the resource and rule. An MPS resource's
// devices are withheld until its control daemon, which the device-plugin
// sink starts for every MPS resource, is up (mps.go).
func (s *draSink) Apply(_ context.Context, inv *discovery.Inventory, p *plan.Plan) error {
	if p == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p == s.lastPlan && inv == s.lastInv {
		return nil
	}
	if err := s.canServe(p); err != nil {
		return err
	}
	b, err := s.build(inv, p)
	if err != nil {
		return err
	}
	s.lastInv, s.lastPlan = inv, p
	s.publish(b)
	return nil
}

// canServe checks that the agent can serve p's DRA resources.
func (s *draSink) canServe(p *plan.Plan) error {
	var errs []error
	for _, r := range dra.DRAResources(p, s.def) {
		rule := "?"
		if len(r.Devices) > 0 {
			rule = r.Devices[0].Rule
		}
		switch {
		case s.pub == nil:
			errs = append(errs, fmt.Errorf("resource %s (rule %s) is served through DRA, which needs an API server (in-cluster or --kubeconfig)", r.Name, rule))
		case s.specDir == "":
			errs = append(errs, fmt.Errorf("resource %s (rule %s) is served through DRA, which prepares devices as CDI devices: --cdi-spec-dir is empty", r.Name, rule))
		case s.cdiErr != nil:
			errs = append(errs, fmt.Errorf("resource %s (rule %s) is served through DRA, which needs a CDI spec: %w", r.Name, rule, s.cdiErr))
		}
	}
	return errors.Join(errs...)
}

// build makes the slice's devices and Table with the current health.
func (s *draSink) build(inv *discovery.Inventory, p *plan.Plan) (dra.Build, error) {
	return dra.BuildSlice(inv, p, dra.BuildOptions{Default: s.def, CDIKind: s.cdi.Kind, CDIName: s.cdi.DeviceName, Unhealthy: s.unhealthy(),
		Withhold: s.mpsWithheld}) // mps.go
}

// unhealthy is the device-plugin manager's unhealthy set as taint reasons.
func (s *draSink) unhealthy() dra.Unhealthy {
	bad := s.manager.Unhealthy()
	if len(bad) == 0 {
		return nil
	}
	u := make(dra.Unhealthy, len(bad))
	for _, d := range bad {
		u[d.Key] = dra.UnhealthyReason(d.Kind, d.XID)
	}
	return u
}

// publish swaps b's Table in and offers its devices. A non-empty offer
// first records in the state directory that the node may have a slice
// (sliceMarker).
func (s *draSink) publish(b dra.Build) {
	s.table.Store(b.Table)
	if s.tableChanged != nil {
		s.tableChanged()
	}
	s.devices.Set(float64(len(b.Devices)))
	if s.pub != nil {
		s.marker.offer(len(b.Devices) > 0, func() { s.pub.Offer(b.Devices) })
	}
}

// healthChanged rebuilds the slice of the last plan with the new health
// (deviceplugin.Options.OnHealthChange).
func (s *draSink) healthChanged() { s.rebuild("a health change") }

// rebuild rebuilds the slice of the last plan with the current health and
// MPS daemons; after says what changed, for the log.
func (s *draSink) rebuild(after string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastPlan == nil {
		return
	}
	b, err := s.build(s.lastInv, s.lastPlan)
	if err != nil {
		// The same plan built before; only a bug gets here.
		s.log.Error("rebuilding the ResourceSlice after "+after, "err", err)
		return
	}
	s.publish(b)
}

// currentTable returns the Table of the plan served now (nil before the
// first plan): the kubelet-side DRA server's view of the devices.
func (s *draSink) currentTable() *dra.Table { return s.table.Load() }

// Run implements Runner: the publisher's loop.
func (s *draSink) Run(ctx context.Context) error {
	if s.pub == nil {
		<-ctx.Done()
		return nil
	}
	return s.pub.Run(ctx)
}
