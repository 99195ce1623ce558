// Package agent is the featureplug daemon: it wires discovery, publishing,
// rules and the device-plugin servers into one process and keeps them
// current as the hardware, the rules file and the kubelet change.
//
// Data flows one way: the GPU source gives an Inventory, the rules turn it
// into a Plan, and each (Inventory, Plan) goes to the agent's sinks, its
// outputs: the device plugins, then NFD publishing (sink.go). A single loop
// owns that state; the sinks' own work, the health watcher and the HTTP
// server run beside it and never call back into it.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/featureplug/featureplug/cmd/internal/kube"
	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/plugin"
	"github.com/featureplug/featureplug/plugin/mps"
	"github.com/featureplug/featureplug/rules/plan"
)

// PublishMode says where features and labels go.
type PublishMode string

// Publish modes.
const (
	PublishNodeFeature PublishMode = "nodefeature"
	PublishFile        PublishMode = "file"
	PublishStdout      PublishMode = "stdout"
	PublishNone        PublishMode = "none"
)

// Defaults of the agent's intervals.
const (
	DefaultRediscoverInterval = 30 * time.Second
	DefaultResyncInterval     = time.Hour
)

// Config is everything the agent needs. The command line fills it.
type Config struct {
	// NodeName is the Kubernetes node the agent runs on.
	NodeName string
	// Namespace is the agent's namespace, for the NodeFeature object
	// (Events about the Node go to the default namespace, see
	// newEventRecorder).
	Namespace string
	// Source reads the GPUs.
	Source GPUSource
	// Rules is a builtin rules name or a rules file path; "" means the
	// builtin default. A file is watched and reloaded on change.
	Rules string
	// RulesEngine loads Rules (see rulesengine.go); required.
	RulesEngine RulesEngine
	// DefaultServe is the kubelet API of the resources whose rules do not
	// choose one (plan.Resource.ServedBy); "" means plan.ServeDevicePlugin
	// (serve.go).
	DefaultServe plan.Serve
	// NodeLabels are node labels the rules' node selectors see in addition
	// to the Node object's labels (when Kube is set).
	NodeLabels map[string]string
	// Publish says where features and labels go.
	Publish PublishMode
	// FeaturesFile is the nfd-worker feature file for PublishFile.
	FeaturesFile string
	// Labels tunes label computation.
	Labels labeler.LabelOptions
	// TimestampLabel publishes nvidia.com/gfd.timestamp, renewed at every
	// publish and resync (so every resync writes); see labeler.Loop.
	TimestampLabel bool
	// Owner says what owns the NodeFeature (owner.go); the zero value is
	// the agent's Pod and DaemonSet, or the Node outside a Pod.
	Owner OwnerConfig
	// ResyncInterval republishes unchanged content this often (writes only
	// happen when something differs).
	ResyncInterval time.Duration
	// RediscoverInterval re-reads the GPUs this often.
	RediscoverInterval time.Duration
	// Rediscover triggers an immediate re-discovery (SIGHUP).
	Rediscover <-chan struct{}
	// Kube is the API client (package kube; kubeclientset adapts
	// client-go's clientsets); nil runs without an API server (no
	// NodeFeature, no Events, node labels from NodeLabels only).
	Kube kube.Interface
	// Plugin configures the device-plugin servers. Its Logger and
	// Registerer are set by the agent.
	Plugin plugin.Options
	// MPS configures the MPS control daemons of MPS-shared resources. Its
	// Logger, Registerer and OnChange are set by the agent.
	MPS mps.Options
	// CDI configures the CDI spec written with a CDI device-list
	// strategy (cdi.go).
	CDI CDIConfig
	// DRARegistryDir and DRAPluginDir are where the kubelet-facing DRA
	// driver makes its registration socket and its DRA service socket
	// (dra_node.go; the command line's defaults are dra.DefaultRegistryDir
	// and dra.DefaultPluginDir); either empty runs no kubelet-facing DRA
	// driver, so claims of DRA devices cannot be prepared on this node.
	DRARegistryDir, DRAPluginDir string
	// Health configures the NVML health watcher.
	Health discovery.HealthOptions
	// FileCheckInterval is the period of the backstop check of the rules
	// file and the feature file (a stat and a content hash, no API calls),
	// which catches what file events miss; zero means
	// DefaultFileCheckInterval.
	FileCheckInterval time.Duration
	// FileSettle is how long a changed rules file must stay unchanged
	// before it is applied; zero means DefaultFileSettle.
	FileSettle time.Duration
	// NewFileWatcher makes the inotify watchers of the rules file and the
	// feature file; nil means fsnotify.NewWatcher. When it fails, the files
	// are checked every FileCheckInterval instead.
	NewFileWatcher func() (*fsnotify.Watcher, error)
	// LivenessTimeout is how long the agent loop may make no progress
	// before /healthz fails; zero means DefaultLivenessTimeout.
	LivenessTimeout time.Duration
	// MetricsAddr serves /metrics, /healthz and /readyz; "" disables it.
	MetricsAddr string
	// PublishHold is how long the first publish of features and labels
	// waits, at most, for the kubelet to accept every device-plugin
	// resource: register first (issue 17), so that building and writing
	// the NodeFeature or feature file does not take the CPU from the
	// registrations. Zero publishes at once. `featureplug run` uses
	// DefaultPublishHold.
	PublishHold time.Duration
	// AfterStartup, when set, runs once every resource is registered (or
	// start-up has lasted 30 s), not when the agent stops before: the
	// command line sets the collector's serving target there (TuneGC).
	AfterStartup func()
	// NoDevicePlugins runs without the device-plugin sink: plans are
	// published, not served (the scale driver's simulated nodes, see
	// cmd/featureplug-scale).
	NoDevicePlugins bool
	// Stdout receives PublishStdout output.
	Stdout io.Writer
	// Logger receives the agent's logs.
	Logger *slog.Logger
}

// Agent is a running featureplug daemon.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	registry *prometheus.Registry
	metrics  *metrics
	manager  *plugin.Manager
	pub      labeler.Publisher
	events   *eventRecorder
	health   chan discovery.HealthEvent
	mps      *mps.Supervisor

	// nodes watches the agent's Node (kube.go); nil without an API server.
	nodes *nodeWatch

	// sinks are the agent's outputs, in the order plans are applied:
	// plugins serves devices, publisher reports them (sink.go).
	sinks     []Sink
	plugins   *devicePluginSink
	publisher *publishSink
	// dra serves the plan's DRA resources (dra.go); nil with
	// NoDevicePlugins. Its currentTable is what the kubelet-side DRA
	// server prepares claims from.
	dra *draSink
	// draHealth is dra for the device-plugin manager's OnHealthChange,
	// which a restored health record's timer may call while New is
	// still building the agent.
	draHealth atomic.Pointer[draSink]
	// mpsChanged is signalled when an MPS daemon's readiness flips.
	mpsChanged chan struct{}
	// planReport reports devices the plan leaves out (planreport.go).
	planReport *planReport
	// live answers /healthz.
	live *liveness
	// rulesKick makes the rules file watcher re-arm and check (SIGHUP).
	rulesKick chan struct{}
	// stall and unstall hold the loop still on a fake node (test hook of
	// /healthz, see stallLoop).
	stall, unstall chan struct{}

	// State owned by the loop goroutine.
	inv        *discovery.Inventory
	lib        nvml.Interface
	ruleSet    RuleSet
	plan       *plan.Plan
	nodeLabels map[string]string
	stopHealth context.CancelFunc
	// rulesKey identifies the rules file state last handled (content hash
	// or kind of error); rulesMissing is set while the file is lost.
	rulesKey     string
	rulesMissing bool
	// explain is the served plan's rules digest and the last plan its
	// ResourcesChanged Event described (explain.go).
	explain explainState

	// current is the latest inventory, read by the health watcher.
	current atomic.Pointer[discovery.Inventory]
}

// New checks the configuration and builds the agent's parts. Nothing runs
// until Run.
func New(cfg Config) (*Agent, error) {
	if cfg.Source == nil {
		return nil, errors.New("agent: no GPU source")
	}
	if cfg.NodeName == "" {
		return nil, errors.New("--node-name: empty (set it or NODE_NAME)")
	}
	if !cfg.RulesEngine.complete() {
		return nil, errors.New("agent: no rules engine")
	}
	if err := checkDefaultServe(&cfg); err != nil { // serve.go
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RediscoverInterval <= 0 {
		cfg.RediscoverInterval = DefaultRediscoverInterval
	}
	if cfg.Publish == "" {
		cfg.Publish = PublishNone
	}
	a := &Agent{
		cfg:      cfg,
		log:      cfg.Logger,
		registry: prometheus.NewRegistry(),
		health:   make(chan discovery.HealthEvent, 64),

		mpsChanged: make(chan struct{}, 1),
		live:       newLiveness(nil, cfg.LivenessTimeout),
		rulesKick:  make(chan struct{}, 1),
		stall:      make(chan struct{}),
		unstall:    make(chan struct{}),
	}
	var err error
	popts := cfg.Plugin
	popts.Logger = cfg.Logger.With("component", "plugin")
	popts.Registerer = a.registry
	// An MPS resource is withdrawn when its daemon dies; until the loop has
	// done so, Allocate refuses it rather than hand out a dead pipe.
	a.plugins = &devicePluginSink{log: cfg.Logger, serve: cfg.DefaultServe}
	popts.Gate = a.plugins.mpsGate
	// The DRA sink taints the devices the manager holds Unhealthy (dra.go).
	popts.OnHealthChange = func() {
		if s := a.draHealth.Load(); s != nil {
			s.healthChanged()
		}
	}
	if a.manager, err = plugin.NewManager(popts); err != nil {
		return nil, err
	}
	a.plugins.manager = a.manager
	if a.metrics, err = newMetrics(a.registry, a.manager.Ready); err != nil {
		return nil, err
	}
	if err := a.registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "featureplug_loop_heartbeat_age_seconds",
		Help: "Seconds since the agent loop last made progress; /healthz fails past --liveness-timeout.",
	}, func() float64 { return a.live.heartbeatAge(componentLoop).Seconds() })); err != nil {
		return nil, err
	}
	mopts := cfg.MPS
	mopts.Logger = cfg.Logger.With("component", "mps")
	mopts.Registerer = a.registry
	mopts.ComputeMode = a.setComputeMode // EXCLUSIVE_PROCESS for MPS (mps.go)
	mopts.OnChange = func(string) {
		select {
		case a.mpsChanged <- struct{}{}:
		default:
		}
	}
	if a.mps, err = mps.New(mopts); err != nil {
		return nil, err
	}
	a.plugins.mps, a.plugins.metrics = a.mps, a.metrics
	if a.pub, err = a.newPublisher(); err != nil {
		return nil, err
	}
	if a.publisher, err = a.newPublishSink(); err != nil {
		return nil, err
	}
	a.sinks = []Sink{a.plugins, a.publisher}
	if cfg.NoDevicePlugins {
		a.sinks = []Sink{a.publisher}
	} else if err := a.addDRASink(); err != nil { // dra.go
		return nil, err
	} else if err := a.addCDISink(); err != nil { // the CDI spec comes first: cdi.go
		return nil, err
	}
	if st, ok := a.pub.(interface{ Stats() labeler.WriteStats }); ok {
		writes := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "featureplug_publish_writes_total",
			Help: "Writes of the NodeFeature object or feature file (publishes that found the content unchanged write nothing).",
		}, func() float64 { return float64(st.Stats().Writes()) })
		if err := a.registry.Register(writes); err != nil {
			return nil, err
		}
	}
	if cfg.Kube != nil {
		a.nodes = newNodeWatch(cfg.Kube, cfg.NodeName)
		a.events = newEventRecorder(cfg.NodeName, a.nodes.uid, a.log.With("component", "events"))
	}
	return a, nil
}

func (a *Agent) newPublisher() (labeler.Publisher, error) {
	switch a.cfg.Publish {
	case PublishNodeFeature:
		if a.cfg.Kube == nil {
			return nil, errors.New("--publish nodefeature needs an API server (in-cluster or --kubeconfig)")
		}
		if a.cfg.Namespace == "" {
			return nil, errors.New("--publish nodefeature: --namespace is empty (set it or POD_NAMESPACE)")
		}
		owners, err := ownerResolver(a.cfg.Namespace, a.cfg.Owner, a.log.With("component", "publish")) // owner.go
		if err != nil {
			return nil, err
		}
		return labeler.NewNodeFeaturePublisher(labeler.NodeFeatureConfig{
			NodeName: a.cfg.NodeName, Namespace: a.cfg.Namespace, NFD: labeler.NFDClientOf(a.cfg.Kube.NodeFeatures), Kube: cachedNodes{a, a.cfg.Kube.Nodes()}, // nodecache.go
			Owners: owners,
			Logger: a.log.With("component", "publish"),
		})
	case PublishFile:
		return labeler.NewFilePublisher(labeler.FileConfig{Path: a.cfg.FeaturesFile, Logger: a.log.With("component", "publish")})
	case PublishStdout:
		w := a.cfg.Stdout
		if w == nil {
			return nil, errors.New("--publish stdout: no output")
		}
		return labeler.NewWriterPublisher(w, labeler.FormatLabels)
	case PublishNone:
		return nil, nil
	default:
		return nil, fmt.Errorf("--publish: %q is not a mode (use nodefeature, file, stdout or none)", a.cfg.Publish)
	}
}

// newPublishSink makes the publishing sink around a.pub (nil: the content
// is only kept for /debug/content). Its label options report dropped label
// keys (a warning once per set of keys, featureplug_label_dropped_total).
func (a *Agent) newPublishSink() (*publishSink, error) {
	opts := a.cfg.Labels
	d := &droppedLabels{
		log: a.log.With("component", "publish"),
		counter: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "featureplug_label_dropped_total",
			Help: "Distinct label keys left out of the published labels because they are not valid label keys (each is logged once).",
		}),
		next: opts.OnDropped,
		seen: map[string]bool{},
	}
	if err := a.registry.Register(d.counter); err != nil {
		return nil, err
	}
	opts.OnDropped = d.dropped
	s := &publishSink{pub: a.pub, opts: opts, contents: make(chan labeler.Content, 1), annotations: a.planAnnotations, hold: a.holdForRegistration}
	if a.pub != nil {
		s.loop = &labeler.Loop{
			Publisher: a.pub,
			Resync:    a.cfg.ResyncInterval,
			// Jittered, so that agents started together do not resync or
			// retry together (kube.go).
			ResyncJitter: periodJitter,
			Timestamp:    a.cfg.TimestampLabel,
			Backoff:      labeler.Backoff{Max: publishBackoffMax, Jitter: backoffJitter},
			Logger:       a.log.With("component", "publish"),
			OnPublish: func(err error) {
				if err != nil {
					a.metrics.publishes.WithLabelValues("error").Inc()
					return
				}
				a.metrics.publishes.WithLabelValues("ok").Inc()
			},
		}
	}
	return s, nil
}

// Registry returns the registry the agent's metrics are on.
func (a *Agent) Registry() *prometheus.Registry { return a.registry }

// Run runs the agent until ctx ends. It fails only when it cannot start
// (the first discovery failed, the metrics address is taken); later
// failures are logged, counted and retried, and never stop what already
// serves. A file it cannot watch for lack of inotify is checked
// periodically instead. /healthz fails while the loop makes no progress
// for Config.LivenessTimeout or the health watcher has stopped. On return every device
// plugin server has stopped; the NodeFeature stays in place.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	inv, lib, err := a.discover()
	if err != nil {
		return fmt.Errorf("discovering GPUs: %w", err)
	}
	a.setInventory(inv)
	a.lib = lib
	a.log.Info("discovered GPUs", "gpus", len(inv.GPUs), "migDevices", inv.MIGDeviceCount(),
		"driver", inv.DriverVersion, "cuda", inv.CUDADriverVersion)

	var wg sync.WaitGroup
	errs := make(chan error, 8) // one per goRun, so none blocks after the loop ends
	goRun := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}

	if a.cfg.MetricsAddr != "" {
		srv, err := a.listen()
		if err != nil {
			return err
		}
		goRun("metrics server", srv)
	}
	for _, s := range a.sinks {
		if r, ok := s.(Runner); ok {
			goRun(s.Name(), r.Run)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.relayHealth(ctx, a.health)
		if ctx.Err() == nil {
			a.live.stop(componentHealthRelay, "stopped passing health events to the device plugins")
		}
	}()
	// A file watcher never fails for lack of inotify: it falls back to
	// its periodic check (see fileWatcher).
	rulesSnaps := make(chan fileSnapshot, 1)
	if path, ok := a.rulesFile(); ok {
		fw := a.newFileWatcher(path, "rules file", a.cfg.RulesEngine.MaxFileSize, "rules", a.rulesKick)
		goRun("rules watcher", func(ctx context.Context) error { return fw.Run(ctx, rulesSnaps) })
	}
	featureSnaps := make(chan fileSnapshot, 1)
	if fp, ok := a.pub.(*labeler.FilePublisher); ok {
		fw := a.newFileWatcher(fp.Path(), "feature file", 2*labeler.MaxFeatureFileSize, "features", nil)
		goRun("feature file watcher", func(ctx context.Context) error { return fw.Run(ctx, featureSnaps) })
	}

	a.live.beat(componentLoop)
	a.startKube(ctx) // Events and the Node watch, not waiting (kube.go)
	a.loadRules(ctx)
	a.waitNodeLabels(ctx) // only when the rules select on them: register first (kube.go)
	a.refreshNodeLabels(ctx)
	a.startupEvidence()
	a.replan(ctx, "start")
	a.restartHealthWatcher(ctx, &wg)
	a.startAfterStartup(ctx, &wg) // memory.go

	// A jittered period, so that agents started together drift apart.
	ticker := time.NewTicker(wait.Jitter(a.cfg.RediscoverInterval, periodJitter))
	defer ticker.Stop()
	heartbeat := time.NewTicker(a.live.heartbeatInterval())
	defer heartbeat.Stop()
	var runErr error
loop:
	for {
		a.live.beat(componentLoop)
		select {
		case <-ctx.Done():
			break loop
		case err := <-errs:
			runErr = err
			break loop
		case <-heartbeat.C:
		case <-ticker.C:
			a.rediscover(ctx, &wg, "interval")
		case <-a.nodes.changed():
			a.nodeLabelsChanged(ctx)
		case <-a.cfg.Rediscover:
			// SIGHUP: the rules file is read again (and its watch
			// re-armed) as well as the GPUs.
			select {
			case a.rulesKick <- struct{}{}:
			default:
			}
			a.rereadRules(ctx)
			a.rediscover(ctx, &wg, "signal")
		case s := <-rulesSnaps:
			if a.applyRulesSnapshot(ctx, s) {
				a.replan(ctx, "rules")
			}
		case <-featureSnaps:
			a.publisher.republish()
		case <-a.mpsChanged:
			a.applyServed(ctx, "mps")
		case <-a.stall:
			a.log.Warn("agent loop held still on request (fake node test hook); /healthz will fail")
			select {
			case <-a.unstall:
				a.log.Info("agent loop released")
			case <-ctx.Done():
			}
		}
	}
	a.mps.Stop()
	cancel()
	if a.stopHealth != nil {
		a.stopHealth()
	}
	wg.Wait()
	return runErr
}

// newFileWatcher returns a watcher of path whose fallback shows on the
// featureplug_file_watch_fallback metric with the given file label.
func (a *Agent) newFileWatcher(path, what string, maxSize int64, label string, kick <-chan struct{}) *fileWatcher {
	gauge := a.metrics.fileWatchFallback.WithLabelValues(label)
	gauge.Set(0)
	return &fileWatcher{
		path:       path,
		what:       what,
		interval:   a.cfg.FileCheckInterval,
		settle:     a.cfg.FileSettle,
		maxSize:    maxSize,
		newWatcher: a.cfg.NewFileWatcher,
		fallback: func(on bool) {
			if on {
				gauge.Set(1)
			} else {
				gauge.Set(0)
			}
		},
		log:  a.log.With("component", "watch"),
		kick: kick,
	}
}

func (a *Agent) rulesFile() (string, bool) {
	if a.cfg.Rules == "" {
		return "", false
	}
	for _, name := range a.cfg.RulesEngine.Builtins {
		if name == a.cfg.Rules {
			return "", false
		}
	}
	return a.cfg.Rules, true
}

// setInventory makes inv the current inventory.
func (a *Agent) setInventory(inv *discovery.Inventory) {
	a.inv = inv
	a.current.Store(inv)
}

func (a *Agent) discover() (*discovery.Inventory, nvml.Interface, error) {
	return a.discoverFor(a.ruleSet)
}

// discoverFor reads the GPUs as the rule set rs needs them: with the MIG
// geometry when it asks for it (miggeometry.go).
func (a *Agent) discoverFor(rs RuleSet) (*discovery.Inventory, nvml.Interface, error) {
	start := time.Now()
	inv, lib, err := a.cfg.Source.Discover()
	if err == nil {
		err = readMIGGeometry(rs, inv, lib)
	}
	a.metrics.discoveryDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		a.metrics.discoveries.WithLabelValues("error").Inc()
		return nil, nil, err
	}
	a.metrics.discoveries.WithLabelValues("ok").Inc()
	return inv, lib, nil
}

// rediscover re-reads the GPUs and, when anything changed, makes a new plan.
func (a *Agent) rediscover(ctx context.Context, wg *sync.WaitGroup, why string) {
	inv, lib, err := a.discover()
	if err != nil {
		a.log.Error("re-discovery failed; keeping the last inventory", "trigger", why, "err", err)
		return
	}
	a.refreshNodeLabels(ctx)
	changed := !reflect.DeepEqual(inv, a.inv)
	a.setInventory(inv)
	if lib != a.lib {
		a.lib = lib
		a.restartHealthWatcher(ctx, wg)
	}
	if !changed && why == "interval" {
		a.replanIfLabelsChanged(ctx)
		// A feature file deleted or edited behind the agent's back is
		// rewritten now at the latest (the publisher compares).
		if _, ok := a.pub.(*labeler.FilePublisher); ok {
			a.publisher.republish()
		}
		// So is a CDI spec, which runtimes need to resolve the names
		// Allocate returns (cdi.go).
		a.restoreSinkOutputs()
		return
	}
	a.log.Info("re-discovered GPUs", "trigger", why, "changed", changed, "gpus", len(inv.GPUs), "migDevices", inv.MIGDeviceCount())
	a.replan(ctx, "discovery")
}

// startupEvidence hands the device plugins the evidence of earlier failures
// NVML keeps across processes (pending row remapping or retired pages,
// volatile double-bit ECC counts, GPUs lost at discovery) before the first
// plan is served, so those GPUs are Unhealthy in the first ListAndWatch.
// The health watcher reads it again when it starts and while it lasts.
// (Issue 12 finding 5, the NVML part; added by the discovery helper.)
func (a *Agent) startupEvidence() {
	if a.lib == nil {
		return
	}
	w := discovery.NewHealthWatcher(a.lib, withLogger(a.cfg.Health, a.log.With("component", "health")))
	evs, _ := w.ReadEvidence(a.inv)
	for _, ev := range evs {
		a.healthToSinks(ev)
	}
}

// restartHealthWatcher (re)starts the NVML health watcher on the current
// NVML, stopping the previous one.
func (a *Agent) restartHealthWatcher(ctx context.Context, wg *sync.WaitGroup) {
	if a.stopHealth != nil {
		a.stopHealth()
	}
	hctx, stop := context.WithCancel(ctx)
	a.stopHealth = stop
	w := discovery.NewHealthWatcher(a.lib, withLogger(a.cfg.Health, a.log.With("component", "health")))
	a.live.running(componentHealthWatcher)
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := w.Run(hctx, a.current.Load, a.health)
		if hctx.Err() != nil {
			return // stopped by the agent
		}
		reason := "stopped"
		if err != nil {
			reason = "stopped: " + err.Error()
		}
		a.log.Error("health watcher stopped; devices keep their last health and /healthz fails", "err", err)
		a.live.stop(componentHealthWatcher, reason)
	}()
}

func withLogger(o discovery.HealthOptions, log *slog.Logger) discovery.HealthOptions {
	o.Logger = log
	return o
}

// loadRules loads the rules at start: a builtin, or the rules file once it
// has settled. An invalid file is reported and the last good rules stay; it
// returns whether the rules changed.
func (a *Agent) loadRules(ctx context.Context) bool {
	if path, ok := a.rulesFile(); ok {
		s, settled := readStable(ctx, clock.RealClock{}, path, a.cfg.RulesEngine.MaxFileSize, a.fileSettle())
		if !settled {
			a.log.Warn("rules file is still changing; it is applied once it settles", "rules", path)
			return false
		}
		return a.applyRulesSnapshot(ctx, s)
	}
	if a.cfg.Rules == "" {
		return a.acceptRules(ctx, a.cfg.RulesEngine.Default(), nil)
	}
	rs, err := a.cfg.RulesEngine.Load(a.cfg.Rules)
	return a.acceptRules(ctx, rs, err)
}

// rereadRules reads the rules file again (SIGHUP) and takes it when it
// changed; the caller replans.
func (a *Agent) rereadRules(ctx context.Context) {
	if _, ok := a.rulesFile(); !ok {
		return
	}
	a.log.Info("re-reading the rules file on signal", "rules", a.cfg.Rules)
	a.loadRules(ctx)
}

func (a *Agent) fileSettle() time.Duration {
	if a.cfg.FileSettle > 0 {
		return a.cfg.FileSettle
	}
	return DefaultFileSettle
}

// applyRulesSnapshot takes a settled state of the rules file: a lost file
// keeps the last good plan and says so, a new content is loaded. It returns
// whether the rules changed.
func (a *Agent) applyRulesSnapshot(ctx context.Context, s fileSnapshot) bool {
	if s.key == a.rulesKey {
		return false
	}
	a.rulesKey = s.key
	if s.Err != nil {
		a.reportRulesMissing(ctx, s.Err)
		return false
	}
	if a.rulesMissing {
		a.rulesMissing = false
		a.metrics.rulesMissing.Set(0)
		a.log.Info("rules file is back", "rules", a.cfg.Rules)
	} else if a.ruleSet != nil {
		a.log.Info("rules file changed", "rules", a.cfg.Rules)
	}
	rs, err := a.cfg.RulesEngine.Parse(a.cfg.Rules, s.Data)
	rs = withDigest(rs, s.Data) // for the NodeFeature's annotation (explain.go)
	return a.acceptRules(ctx, rs, err)
}

// reportRulesMissing says that the rules file is gone (deleted, replaced by
// a directory, missing from a new ..data): log, metric and Event; the last
// good plan keeps serving.
func (a *Agent) reportRulesMissing(ctx context.Context, err error) {
	a.rulesMissing = true
	a.metrics.rulesMissing.Set(1)
	a.metrics.ruleReloads.WithLabelValues("missing").Inc()
	serving := a.servingDescription()
	a.log.Warn("rules file lost; keeping "+serving, "rules", a.cfg.Rules, "err", err)
	if a.events != nil {
		a.events.warn(ctx, "RulesFileMissing", fmt.Sprintf("rules file %s lost (%v); serving %s until it is back", a.cfg.Rules, err, serving))
	}
}

func (a *Agent) servingDescription() string {
	if a.plan == nil {
		return "nothing yet"
	}
	return fmt.Sprintf("the last good plan (%d resources)", len(a.plan.Resources))
}

// acceptRules takes a loaded rule set, or reports why it cannot be taken.
func (a *Agent) acceptRules(ctx context.Context, rs RuleSet, err error) bool {
	if err != nil {
		a.metrics.ruleReloads.WithLabelValues("invalid").Inc()
		a.reportRuleError(ctx, "InvalidRules", err)
		return false
	}
	for _, w := range rs.Warnings() {
		a.log.Warn("rules warning", "rules", rs.Source(), "warning", w)
	}
	a.withMIGGeometryFor(rs) // miggeometry.go
	// Rules that cannot plan on this node (or serve none of the devices
	// they claim) must not replace the last good: see planreport.go.
	return a.takeRules(ctx, rs)
}

func (a *Agent) reportRuleError(ctx context.Context, reason string, err error) {
	a.metrics.ruleErrors.Inc()
	serving := a.servingDescription()
	a.log.Error("rules rejected; keeping "+serving, "rules", a.cfg.Rules, "err", err)
	if a.events != nil {
		a.events.warn(ctx, reason, fmt.Sprintf("rules %s rejected, serving %s: %v", a.cfg.Rules, serving, err))
	}
}

// reportApplyError says that a sink (err names it) did not take a plan.
// That is not a rules problem, and is not reported as one.
func (a *Agent) reportApplyError(ctx context.Context, err error) {
	serving := a.servingDescription()
	a.log.Error("a sink did not take the plan; keeping "+serving, "err", err)
	if a.events != nil {
		a.events.warn(ctx, "PlanRejected", fmt.Sprintf("a sink did not take the plan, serving %s: %v", serving, err))
	}
}

// refreshNodeLabels takes the Node's labels for the rules' node selectors
// from the node watch's cache (no request). While the Node is not in the
// cache the last labels stay, or only --node-labels at start.
func (a *Agent) refreshNodeLabels(context.Context) {
	labels := maps.Clone(a.cfg.NodeLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	if nodeLabels, ok := a.kubeNodeLabels(); ok {
		for k, v := range nodeLabels {
			if _, set := labels[k]; !set {
				labels[k] = v
			}
		}
	} else if a.cfg.Kube != nil && a.nodeLabels != nil {
		return
	}
	a.nodeLabels = labels
}

func (a *Agent) replanIfLabelsChanged(ctx context.Context) {
	if a.plan == nil || a.ruleSet == nil {
		return
	}
	plan, err := a.planFor(a.ruleSet) // serve.go
	if err == nil && !reflect.DeepEqual(plan, a.plan) {
		a.replan(ctx, "node labels")
	}
}

// replan makes a plan from the current rules and inventory and applies it
// to the sinks. A plan that cannot be made, or that a sink refuses, keeps
// the last good one; the sinks still see the current inventory.
func (a *Agent) replan(ctx context.Context, why string) {
	if a.ruleSet == nil {
		a.applyLastGood(ctx)
		return
	}
	plan, err := a.planFor(a.ruleSet) // serve.go
	if err != nil {
		a.metrics.planErrors.Inc()
		a.reportRuleError(ctx, "PlanFailed", err)
		a.applyLastGood(ctx)
		return
	}
	if err := a.applySinks(ctx, plan); err != nil {
		a.metrics.planErrors.Inc()
		a.reportApplyError(ctx, err)
		return
	}
	a.plan = plan
	a.planServed(ctx, plan) // annotation digest and ResourcesChanged Event: explain.go
	a.log.Info("plan applied", "trigger", why, "resources", resourceSummary(plan))
	a.reportPlanProblems(ctx, plan) // devices left out by their rule: planreport.go
}

// applyLastGood hands the sinks the current inventory with the last good
// plan (nil before any); sinks that already serve that plan change
// nothing, the publisher publishes the new inventory.
func (a *Agent) applyLastGood(ctx context.Context) {
	if err := a.applySinks(ctx, a.plan); err != nil {
		a.reportApplyError(ctx, err)
	}
}

// applyServed re-applies the current plan after an MPS daemon came up or
// went down, advertising or withdrawing its resource.
func (a *Agent) applyServed(ctx context.Context, why string) {
	if a.dra != nil {
		a.dra.mpsChanged() // publish or withhold a DRA MPS resource: mps.go
	}
	applied, err := a.plugins.reapply()
	if err != nil {
		a.reportApplyError(ctx, fmt.Errorf("%s: %w", a.plugins.Name(), err))
		return
	}
	if applied {
		a.log.Info("served resources updated", "trigger", why)
	}
}

func resourceSummary(p *plan.Plan) map[string]int {
	out := make(map[string]int, len(p.Resources))
	for _, r := range p.Resources {
		n := len(r.Devices)
		if r.Sharing.Replicas > 1 {
			n *= r.Sharing.Replicas
		}
		out[r.Name] = n
	}
	return out
}

// listen binds the metrics address now, so a taken port fails Run at once,
// and returns the function that serves it until ctx ends.
func (a *Agent) listen() (func(context.Context) error, error) {
	srv := &http.Server{Addr: a.cfg.MetricsAddr, Handler: a.handler(), ReadHeaderTimeout: 5 * time.Second}
	ln, err := listenTCP(a.cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", a.cfg.MetricsAddr, err)
	}
	a.log.Info("serving metrics and probes", "addr", ln.Addr().String())
	return func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			shutdown, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdown)
		}()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}, nil
}
