package dra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/migplace"
	"github.com/featureplug/featureplug/discovery/statedir"
	"github.com/featureplug/featureplug/plugin/health"
	"github.com/featureplug/featureplug/plugin/migpartition"
	"github.com/featureplug/featureplug/rules/plan"
)

// SinkConfig configures a Sink.
type SinkConfig struct {
	// NodeName is the node the slice is published for.
	NodeName string
	// Slices, Node and WatchListClient reach the API server (see
	// PublisherConfig); a nil Slices means there is none, and a plan that
	// serves a resource through DRA is refused.
	Slices          ResourceSlices
	Node            func(ctx context.Context) (*corev1.Node, error)
	WatchListClient any
	// CDIKind and CDIName name the CDI device IDs of the Table as the CDI
	// sink names the spec's devices (BuildOptions).
	CDIKind string
	CDIName func(plan.Device) string
	// VFIOCDIName is the CDI device ID of a VFIO device (BuildOptions);
	// nil says there is no VFIO spec (no --cdi-spec-dir): a plan that
	// serves a VFIO resource through DRA is refused.
	VFIOCDIName func(plan.Device) string
	// NoCDI, when set, says why the devices cannot be prepared as CDI
	// devices (no --cdi-spec-dir, no spec generator): a plan that serves a
	// resource through DRA is refused with it.
	NoCDI error
	// Health gives the devices' health: an unhealthy device carries
	// TaintUnhealthy, and the slice follows each change.
	Health *health.Tracker
	// StateDir holds the slice marker (statedir.DRASliceMarkerFile).
	StateDir statedir.Dir
	// Active publishes from the start (--serve dra); otherwise the sink
	// talks to the API server only once a device is served through DRA,
	// or an earlier run's marker says the node may have a slice.
	Active bool
	// Backoff paces the publisher's retries (default
	// DefaultPublishBackoff).
	Backoff wait.Backoff
	// Logger receives the sink's logs (default discarded).
	Logger *slog.Logger
	// Registerer, when set, receives the sink's metrics.
	Registerer prometheus.Registerer
}

// Sink serves the plan's DRA resources (plan.Resource.Serve is
// plan.ServeDRA) through Dynamic Resource Allocation as driver
// gpu.featureplug.io: it publishes the node's ResourceSlice (Publisher)
// and swaps in the Table the kubelet-facing NodeSink prepares claims from.
// The device-plugin sink leaves those resources alone, so a device is
// offered through exactly one API.
//
// Whether a plan serves anything through DRA is the rules' choice or the
// agent's default, and a rules reload may move a resource either way, so
// the sink is always there to take it. It talks to the API server only
// once a device is served through DRA or SinkConfig.Active is set: a node
// whose rules serve nothing through DRA needs no ResourceSlice permissions
// and makes no request about slices. A DRA resource needs an API server
// and CDI specs: without them the plan is refused (Check), naming the
// resource, the rule and what is missing, and the last good plan keeps
// serving. A resource held back (an MPS resource whose daemon is not up)
// is left out of the slice and the Table until it is released. Devices the
// health tracker holds Unhealthy carry TaintUnhealthy.
type Sink struct {
	c   SinkConfig
	log *slog.Logger
	pub *Publisher // nil without an API server

	devices prometheus.Gauge
	// table is the Table the kubelet-facing server reads.
	table atomic.Pointer[Table]
	// marker records that the node may have a slice (sliceMarker).
	marker sliceMarker

	// mu guards the last inventory and plan, which health changes rebuild
	// from outside the loop goroutine, and tableChanged.
	mu         sync.Mutex
	lastInv    *discovery.Inventory
	lastPlan   *plan.Plan
	checked    Build // the build Check made last, of checkedFor
	checkedFor struct {
		inv *discovery.Inventory
		p   *plan.Plan
	}
	// tableChanged are called after each new Table (NodeSink's device
	// health streams).
	tableChanged []func()
	// createdMIG reports whether the kubelet-facing Node created a MIG
	// device for a claim (Node.CreatedMIG); unset: none.
	createdMIG atomic.Pointer[func(gpu, uuid string, pl migplace.Placement) bool]
	// withheld is what logWithheld said last; guarded by mu.
	withheld string
}

// NewSink returns the DRA sink of c, with its metrics registered.
func NewSink(c SinkConfig) (*Sink, error) {
	s := &Sink{c: c, log: c.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.marker = sliceMarker{path: c.StateDir.Path(statedir.DRASliceMarkerFile), log: s.log}
	met, err := newSinkMetrics(c.Registerer)
	if err != nil {
		return nil, err
	}
	s.devices = met.devices
	if c.Slices != nil {
		s.pub, err = NewPublisher(PublisherConfig{
			NodeName:        c.NodeName,
			Slices:          c.Slices,
			Node:            c.Node,
			WatchListClient: c.WatchListClient,
			// A node whose slice an earlier run left (the marker)
			// manages its slices from the start, so that a slice
			// whose devices the device plugins now serve is deleted.
			Active:  c.Active || s.marker.exists(),
			Backoff: c.Backoff,
			OnWrite: func(op string) { met.writes.WithLabelValues(op).Inc() },
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
			return nil, err
		}
	}
	if c.Health != nil {
		c.Health.Subscribe(func() { s.rebuild("a health change") })
	}
	return s, nil
}

// sinkMetrics are the DRA sink's metrics.
type sinkMetrics struct {
	writes  *prometheus.CounterVec
	syncs   *prometheus.CounterVec
	devices prometheus.Gauge
}

func newSinkMetrics(reg prometheus.Registerer) (*sinkMetrics, error) {
	m := &sinkMetrics{
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
	if reg != nil {
		for _, c := range []prometheus.Collector{m.writes, m.syncs, m.devices} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
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

// Name implements the agent's Sink.
func (s *Sink) Name() string { return "DRA" }

// Check implements the agent's Sink: the agent can serve p's DRA
// resources (an API server, CDI specs) and their slice can be built.
func (s *Sink) Check(inv *discovery.Inventory, p *plan.Plan) error {
	if p == nil {
		return nil
	}
	if err := s.canServe(p); err != nil {
		return err
	}
	b, err := s.build(inv, p)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.checked, s.checkedFor.inv, s.checkedFor.p = b, inv, p
	s.mu.Unlock()
	return nil
}

// Apply implements the agent's Sink: it swaps the Table Check built in
// and offers its devices to the publisher.
func (s *Sink) Apply(_ context.Context, inv *discovery.Inventory, p *plan.Plan) error {
	if p == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p == s.lastPlan && inv == s.lastInv {
		return nil
	}
	b := s.checked
	if s.checkedFor.inv != inv || s.checkedFor.p != p {
		if err := s.canServe(p); err != nil {
			return err
		}
		var err error
		if b, err = s.build(inv, p); err != nil {
			return err
		}
	}
	s.lastInv, s.lastPlan = inv, p
	s.publishLocked(b)
	return nil
}

// canServe checks that the agent can serve p's DRA resources.
func (s *Sink) canServe(p *plan.Plan) error {
	var errs []error
	for _, r := range DRAResources(p) {
		rule := "?"
		if len(r.Devices) > 0 {
			rule = r.Devices[0].Rule
		} else if r.Dynamic {
			rule = dynamicRule(p, r.Name) // dynmig.go
		}
		switch {
		case s.pub == nil:
			errs = append(errs, fmt.Errorf("resource %s (rule %s) is served through DRA, which needs an API server (in-cluster or --kubeconfig)", r.Name, rule))
		case isVFIO(r) && s.c.VFIOCDIName == nil:
			errs = append(errs, fmt.Errorf("resource %s (rule %s) is served through DRA, which prepares a VFIO device as a CDI device: no VFIO CDI spec (--cdi-spec-dir is empty)", r.Name, rule))
		case isVFIO(r):
		case s.c.NoCDI != nil:
			errs = append(errs, fmt.Errorf("resource %s (rule %s) is served through DRA, which prepares devices as CDI devices: %w", r.Name, rule, s.c.NoCDI))
		}
	}
	return errors.Join(errs...)
}

// build makes the slice's devices and Table with the current health.
func (s *Sink) build(inv *discovery.Inventory, p *plan.Plan) (Build, error) {
	return BuildSlice(inv, p, BuildOptions{CDIKind: s.c.CDIKind, CDIName: s.c.CDIName, VFIOCDIName: s.c.VFIOCDIName, Unhealthy: s.unhealthy(), Created: s.created()})
}

// created is what the Node created for claims, for the layout of the GPUs
// partitioned on demand (set once, before the first plan).
func (s *Sink) created() func(gpu, uuid string, pl migplace.Placement) bool {
	if f := s.createdMIG.Load(); f != nil {
		return *f
	}
	return nil
}

// unhealthy is the health tracker's unhealthy set as taint reasons.
func (s *Sink) unhealthy() Unhealthy {
	if s.c.Health == nil {
		return nil
	}
	bad := s.c.Health.Unhealthy()
	if len(bad) == 0 {
		return nil
	}
	u := make(Unhealthy, len(bad))
	for _, d := range bad {
		u[d.Key] = d.Reason // bounded: health.Reason, or a condition's ("nvml-unavailable")
		if u[d.Key] == "" {
			u[d.Key] = UnhealthyReason(d.Kind, d.XID)
		}
	}
	return u
}

// publishLocked swaps b's Table in and offers its devices. A non-empty
// offer first records in the state directory that the node may have a
// slice (sliceMarker). s.mu is held.
func (s *Sink) publishLocked(b Build) {
	s.logWithheld(b.Withheld)
	s.table.Store(b.Table)
	for _, f := range s.tableChanged {
		f()
	}
	n := 0
	for _, sl := range b.Slices {
		n += len(sl.Devices)
	}
	s.devices.Set(float64(n))
	if s.pub != nil {
		s.marker.offer(len(b.Slices) > 0, func() { s.pub.OfferSlices(b.Slices) })
	}
}

// logWithheld says, when it changes, which GPUs partitioned on demand are
// not offered and why. s.mu is held.
func (s *Sink) logWithheld(ws []migpartition.Withheld) {
	text := fmt.Sprint(ws)
	if text == s.withheld {
		return
	}
	s.withheld = text
	for _, w := range ws {
		s.log.Warn("a GPU partitioned on demand is not offered", "gpu", w.GPU, "why", w.Reason)
	}
}

// rebuild rebuilds the slice of the last plan with the current health;
// after says what changed, for the log.
func (s *Sink) rebuild(after string) {
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
	s.publishLocked(b)
}

// Table returns the Table of the plan served now (nil before the first
// plan): the kubelet-facing DRA server's view of the devices.
func (s *Sink) Table() *Table { return s.table.Load() }

// OnTableChange registers f, called after each new Table.
func (s *Sink) OnTableChange(f func()) {
	s.mu.Lock()
	s.tableChanged = append(s.tableChanged, f)
	s.mu.Unlock()
}

// Run implements the agent's Runner: the publisher's loop.
func (s *Sink) Run(ctx context.Context) error {
	if s.pub == nil {
		<-ctx.Done()
		return nil
	}
	return s.pub.Run(ctx)
}
