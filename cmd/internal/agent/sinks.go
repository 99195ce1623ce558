package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/cmd/internal/events"
	"github.com/featureplug/featureplug/cmd/internal/kube"
	"github.com/featureplug/featureplug/cmd/internal/liveness"
	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fswatch"
	"github.com/featureplug/featureplug/discovery/statedir"
	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/plugin/cdi"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/plugin/dra"
	"github.com/featureplug/featureplug/plugin/health"
	"github.com/featureplug/featureplug/plugin/mps"
	"github.com/featureplug/featureplug/rules/plan"
)

// This file is the agent's construction: the one place that knows the
// concrete sinks. The loop (agent.go) sees them only through the Sink
// contract and its optional capabilities (sink.go).

// Jitter and caps of the agent's periodic work and retries: each period is
// lengthened by a random fraction of up to periodJitter, each retry by up
// to backoffJitter (wait.Jitter), so that agents started together (a
// DaemonSet rollout) do not re-discover, resync or retry in lockstep.
// retryCap caps the publishers' retry delay before jitter, so that after
// an API-server outage of any length every agent has published again
// within retryCap*(1+backoffJitter) = 22.5 s of the server's return,
// spread over that window (docs/scale.md).
const (
	periodJitter  = 0.1
	backoffJitter = 0.5
	retryCap      = 15 * time.Second
)

// retryBackoff is the backoff of the agent's publishers: from first,
// doubling to retryCap, jittered.
func retryBackoff(first time.Duration) wait.Backoff {
	return wait.Backoff{Duration: first, Factor: 2, Jitter: backoffJitter, Steps: 1 << 30, Cap: retryCap}
}

// New checks the configuration and builds the agent's parts. Nothing runs
// until Run.
func New(cfg agentconfig.Config) (*Agent, error) {
	if err := cfg.Complete(); err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:        cfg,
		log:        cfg.Logger,
		registry:   prometheus.NewRegistry(),
		healthCh:   make(chan discovery.HealthEvent, 64),
		live:       liveness.New(nil, cfg.LivenessTimeout),
		kicks:      make(chan struct{}, 1),
		migChanged: make(chan struct{}, 1),
		gated:      make(chan struct{}, 1),
		outputs:    make(chan Restorer, 8),
		stall:      make(chan struct{}),
		unstall:    make(chan struct{}),
	}
	var err error
	if a.metrics, err = newMetrics(a.registry, func() bool { return a.ready() == nil }); err != nil {
		return nil, err
	}
	if err := a.registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "featureplug_loop_heartbeat_age_seconds",
		Help: "Seconds since the agent loop last made progress; /healthz fails past --liveness-timeout.",
	}, func() float64 { return a.live.HeartbeatAge(componentLoop).Seconds() })); err != nil {
		return nil, err
	}
	watch := fswatch.Options{Interval: cfg.FileCheckInterval, Settle: cfg.FileSettle, Logger: cfg.Logger.With("component", "watch")}
	if cfg.NoInotify {
		watch.NewInotify = fswatch.NoInotify
	}
	a.watcher = fswatch.New(watch)
	if cfg.Kube != nil {
		a.nodes = kube.NewNodeWatch(cfg.Kube, cfg.NodeName)
		a.events = events.New(cfg.NodeName, a.nodes.UID, a.log.With("component", "events"))
	}
	if err := a.buildSinks(); err != nil {
		return nil, err
	}
	return a, nil
}

// builder holds the sinks made so far, for the wiring between them.
type builder struct {
	a       *Agent
	tracker *health.Tracker
	mps     *mps.Sink
	plugins *deviceplugin.Sink
	dra     *dra.Sink
	// claimSpecs writes DRA claims' CDI specs (no Generator: no CDI sink).
	claimSpecs cdi.ClaimSpecs
	// noCDI says why DRA devices have no CDI spec (nil: they have one).
	noCDI error
	// vfioCDIName names the CDI devices of the VFIO spec (nil: no spec).
	vfioCDIName func(plan.Device) string
}

// buildSinks makes the agent's sinks in the order every plan is applied,
// declared here once: the MPS daemons first (the gate that holds an MPS
// resource back until its daemon is up), the CDI spec (a device is
// advertised only once its CDI name resolves; the VFIO spec of VMs'
// GPUs served through DRA), the VFIO health probe (the
// first device list of a GPU passed through to VMs has its health), the
// device plugins, DRA and
// its kubelet-facing half, and publishing last (what is published is what
// is served). With NoDevicePlugins only publishing runs. The device health
// tracker and the file watcher are shared by the sinks that need them.
func (a *Agent) buildSinks() error {
	b := &builder{a: a}
	var err error
	b.tracker, err = health.New(health.Options{Recovery: a.cfg.HealthRecovery, Policy: a.flagHealthPolicy(), BootID: a.bootID(),
		StateDir: statedir.Dir(a.cfg.StateDir),
		Logger:   a.log.With("component", "health"), Registerer: a.registry})
	if err != nil {
		return err
	}
	a.health = b.tracker
	a.runners = append(a.runners, namedRunner{"file watcher", a.watcher.Run}, namedRunner{"health tracker", closeOnDone(b.tracker.Close)})
	steps := []func() (Sink, error){b.mpsSink, b.cdiSink, b.vfioCDISink, b.vfioProbeSink, b.pluginSink, b.draSink, b.draNodeSink, b.publishSink}
	if a.cfg.NoDevicePlugins {
		steps = steps[len(steps)-1:]
	}
	for _, step := range steps {
		s, err := step()
		if err != nil {
			return err
		}
		if s != nil {
			a.addSink(s)
		}
	}
	return nil
}

// nvmlLabels are the node labels of NVML's state, which the publishing
// sink reads at each Apply: labeler.LabelNVMLUnavailable while it fails.
func (a *Agent) nvmlLabels() map[string]string {
	if a.nvmlReady() == nil {
		return nil
	}
	return map[string]string{labeler.LabelNVMLUnavailable: "true"}
}

// flagHealthPolicy is the health policy of the flags, which the rules
// file's health section overrides: the ignored XIDs have effect none.
func (a *Agent) flagHealthPolicy() discovery.HealthPolicy {
	var p discovery.HealthPolicy
	for _, x := range a.cfg.Health.IgnoredXIDs {
		if p.XIDs == nil {
			p.XIDs = map[uint64]discovery.HealthEffect{}
		}
		p.XIDs[x] = discovery.EffectNone
	}
	return p
}

// bootID reads the node's boot ID; unknown ("", logged) ends no
// until-reboot hold.
func (a *Agent) bootID() string {
	path := a.cfg.BootIDFile
	if path == "" {
		path = discovery.BootIDPath
	}
	id, err := discovery.ReadBootID(path)
	if err != nil {
		a.log.Warn("the boot ID is unknown: until-reboot health holds last until a restart of the agent sees one", "err", err)
	}
	return id
}

// closeOnDone is a Runner's Run that calls done when ctx ends.
func closeOnDone(done func()) func(context.Context) error {
	return func(ctx context.Context) error {
		<-ctx.Done()
		done()
		return nil
	}
}

func (b *builder) mpsSink() (Sink, error) {
	o := b.a.cfg.MPS
	o.Logger = b.a.log.With("component", "mps")
	o.Registerer = b.a.registry
	o.ComputeMode = b.a.setComputeMode // EXCLUSIVE_PROCESS for MPS
	s, err := mps.NewSink(o)
	b.mps = s
	return s, err
}

// vfioProbeSink is the health probe of the GPUs passed through to VMs,
// reading sysfs where discovery reads it (a fake node's tree).
func (b *builder) vfioProbeSink() (Sink, error) {
	root := "/"
	if s, ok := b.a.cfg.Source.(interface{ SysfsRoot() string }); ok && s.SysfsRoot() != "" {
		root = s.SysfsRoot()
	}
	return health.NewVFIOProbe(b.tracker, root, b.a.cfg.VFIOProbeInterval), nil
}

func (b *builder) pluginSink() (Sink, error) {
	o := b.a.cfg.Plugin
	o.Logger = b.a.log.With("component", "plugin")
	o.Registerer = b.a.registry
	o.Health = b.tracker
	o.Watcher = b.a.watcher
	// An MPS resource is withdrawn when its daemon dies; until the loop has
	// done so, Allocate refuses it rather than hand out a dead pipe.
	o.Gate = b.mps.Ready
	m, err := deviceplugin.NewManager(o)
	if err != nil {
		return nil, err
	}
	b.plugins = deviceplugin.NewSink(m)
	return b.plugins, nil
}

// cdiEnabled reports whether Allocate returns CDI names.
func cdiEnabled(o deviceplugin.Options) bool {
	return slices.Contains(o.DeviceListStrategies, deviceplugin.DeviceListCDIAnnotations) ||
		slices.Contains(o.DeviceListStrategies, deviceplugin.DeviceListCDICRI)
}

// cdiOptions name the CDI devices as the device plugins do.
func (b *builder) cdiOptions() cdi.Options {
	kind := b.a.cfg.Plugin.CDIKind
	if kind == "" {
		kind = deviceplugin.DefaultCDIKind
	}
	return cdi.Options{Kind: kind, ByIndex: b.a.cfg.Plugin.DeviceIDStrategy == deviceplugin.DeviceIDIndex}
}

// cdiSink makes the CDI spec sink when a CDI device-list strategy is on,
// or else, holding only the DRA resources' devices, when DRA can serve (it
// prepares devices as CDI devices). A spec that cannot be made for DRA
// alone is a start-up error only with --serve dra; otherwise plans that
// serve a resource through DRA are refused with the reason.
func (b *builder) cdiSink() (Sink, error) {
	a := b.a
	draOnly := !cdiEnabled(a.cfg.Plugin)
	if a.cfg.CDI.SpecDir == "" {
		b.noCDI = errors.New("--cdi-spec-dir is empty")
	}
	if draOnly && a.cfg.Kube == nil && a.cfg.DefaultServe != plan.ServeDRA {
		return nil, nil
	}
	s, err := b.newCDISink(draOnly)
	if err != nil && draOnly && a.cfg.DefaultServe != plan.ServeDRA {
		b.noCDI = fmt.Errorf("no CDI spec can be made: %w", err)
		a.log.Warn("no CDI spec for DRA devices; a resource served through DRA will be refused", "err", err)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (b *builder) newCDISink(draOnly bool) (*cdi.Sink, error) {
	a := b.a
	log := a.log.With("component", "cdi")
	c := cdi.SinkConfig{Options: b.cdiOptions(), Writer: cdi.Writer{Dir: a.cfg.CDI.SpecDir}, Logger: log, Registerer: a.registry}
	c.Options.DeviceEdits = b.mps.CDIEdits // the MPS client settings of DRA devices
	if draOnly {
		c.Only = plan.ServeDRA
	}
	gen, cleanup, err := cdi.NewGenerator(a.cfg.Source, a.cfg.CDI, log)
	if err != nil {
		return nil, err
	}
	c.Generator, c.Cleanup = gen, cleanup
	b.claimSpecs = cdi.ClaimSpecs{Options: b.cdiOptions(), Writer: c.Writer, Generator: gen, Discover: a.cfg.Source.Discover}
	return cdi.NewSink(c)
}

// vfioCDISink makes the spec of the GPUs passed through to VMs and served
// through DRA, whenever there is a CDI spec directory: it needs no
// generator (its devices' edits are their VFIO device nodes).
func (b *builder) vfioCDISink() (Sink, error) {
	a := b.a
	if a.cfg.CDI.SpecDir == "" {
		return nil, nil
	}
	b.vfioCDIName = cdi.VFIOQualifiedName
	return cdi.NewVFIOSink(cdi.Writer{Dir: a.cfg.CDI.SpecDir}, a.log.With("component", "cdi-vfio")), nil
}

// draSink makes the DRA sink: always (a rules reload may move a resource
// to DRA), talking to the API server only once DRA is in use.
func (b *builder) draSink() (Sink, error) {
	a := b.a
	o := b.cdiOptions()
	c := dra.SinkConfig{
		NodeName: a.cfg.NodeName, CDIKind: o.Kind, CDIName: o.DeviceName, VFIOCDIName: b.vfioCDIName, NoCDI: b.noCDI, Health: b.tracker,
		StateDir: statedir.Dir(a.cfg.StateDir), Active: a.cfg.DefaultServe == plan.ServeDRA,
		Backoff: retryBackoff(dra.DefaultPublishBackoff.Duration), Logger: a.log.With("component", "dra"), Registerer: a.registry,
	}
	if a.cfg.Kube != nil {
		c.Slices, c.Node, c.WatchListClient = a.cfg.Kube.ResourceSlices(), a.nodes.Get, a.cfg.Kube
	}
	s, err := dra.NewSink(c)
	b.dra = s
	return s, err
}

// draNodeSink makes the kubelet-facing half of the DRA driver. Without an
// API server there is none: claims cannot be read, and the DRA sink
// refuses DRA resources then. Without its two directories there is none
// either (said once when --serve is dra).
func (b *builder) draNodeSink() (Sink, error) {
	a := b.a
	if a.cfg.Kube == nil {
		return nil, nil
	}
	log := a.log.With("component", "dra-node")
	if a.cfg.DRARegistryDir == "" || a.cfg.DRAPluginDir == "" {
		if a.cfg.DefaultServe == plan.ServeDRA {
			log.Warn("no --kubelet-registry-dir or --dra-plugin-dir: the kubelet cannot prepare claims of this node's DRA devices",
				"kubeletRegistryDir", a.cfg.DRARegistryDir, "draPluginDir", a.cfg.DRAPluginDir)
		}
		return nil, nil
	}
	node, err := dra.NewNode(dra.NodeOptions{
		NodeName: a.cfg.NodeName, RegistryDir: a.cfg.DRARegistryDir, PluginDir: a.cfg.DRAPluginDir, StateDir: a.cfg.StateDir,
		Instance: a.cfg.DRAInstance,
		Claims:   func(ns string) dra.ResourceClaims { return a.cfg.Kube.ResourceClaims(ns) },
		Table:    b.dra.Table, Watcher: a.watcher, Logger: log, Registerer: a.registry,
		Partition: dra.Partitioner{NVML: a.nvml, CrashAt: a.cfg.DRACrashAt, Changed: func() { signal(a.migChanged) },
			WriteCDI: b.claimSpecs.Write, RemoveCDI: b.claimSpecs.Remove},
	})
	if err != nil {
		return nil, err
	}
	s := dra.NewNodeSink(node, b.dra, retryBackoff(time.Second), log)
	if a.cfg.DefaultServe == plan.ServeDRA {
		s.Activate("--serve dra")
	}
	return s, nil
}

// publishSink makes the publishing sink: labels and features to the
// NodeFeature object, a feature file or stdout (none: kept for
// /debug/content only), after the device plugins' registrations.
func (b *builder) publishSink() (Sink, error) {
	a := b.a
	pub, err := a.newPublisher()
	if err != nil {
		return nil, err
	}
	c := labeler.SinkConfig{
		Publisher: pub, Labels: a.cfg.Labels,
		Resync: a.cfg.ResyncInterval, ResyncJitter: periodJitter, Timestamp: a.cfg.TimestampLabel,
		Backoff: retryBackoff(time.Second), DefaultServe: a.cfg.DefaultServe, MoreAnnotations: b.mpsControl,
		MoreLabels: a.nvmlLabels,
		Logger:     a.log.With("component", "publish"), Registerer: a.registry,
	}
	if b.plugins != nil && a.cfg.PublishHold > 0 {
		hold := a.cfg.PublishHold
		c.Hold = func(ctx context.Context) {
			ctx, cancel := context.WithTimeout(ctx, hold)
			defer cancel()
			if !b.plugins.WaitReady(ctx) && ctx.Err() == context.DeadlineExceeded {
				a.log.Debug("publishing before the kubelet accepted every resource", "waited", hold)
			}
		}
	}
	return labeler.NewSink(c)
}

// mpsControl is the NodeFeature's annotation of whether MPS daemons can
// start on this node, looked up again at each publish.
func (b *builder) mpsControl() map[string]string {
	state := labeler.MPSControlFound
	if _, err := mps.ResolveControlBinary(b.a.cfg.MPS.ControlBinary); err != nil {
		state = err.Error()
	}
	return map[string]string{labeler.AnnotationMPSControl: state}
}

func (a *Agent) newPublisher() (labeler.Publisher, error) {
	c := labeler.PublisherConfig{Mode: a.cfg.Publish, NodeName: a.cfg.NodeName, Namespace: a.cfg.Namespace,
		FeaturesFile: a.cfg.FeaturesFile, Stdout: a.cfg.Stdout, Logger: a.log.With("component", "publish")}
	if a.cfg.Publish == labeler.PublishNodeFeature && a.cfg.Kube != nil && a.cfg.Namespace != "" {
		owners, err := kube.OwnerResolver(a.cfg.Namespace, a.cfg.Owner, c.Logger)
		if err != nil {
			return nil, err
		}
		c.NFD, c.Node, c.Owners = a.cfg.Kube.NodeFeatures, a.nodes.Get, owners
	}
	return labeler.NewPublisher(c)
}
