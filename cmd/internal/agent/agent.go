// Package agent is the featureplug daemon's loop: it reads the GPUs, makes
// a plan of them with the rules, and hands each (inventory, plan) to its
// sinks, the outputs that serve and report it (device plugins, DRA, the
// CDI spec, MPS daemons, NFD publishing), keeping them current as the
// hardware, the rules file, the Node's labels and the kubelet change.
//
// Data flows one way: the GPU source gives an Inventory, the rules turn it
// into a Plan, and the plan goes to every sink through the two-phase
// contract of sink.go (every sink checks it, then every sink applies it).
// The loop knows the sinks only through that contract and its optional
// capabilities; sinks.go, the construction, is the one file that knows the
// concrete ones. A single goroutine owns the loop's state; the sinks' own
// work, the file watcher, the health watcher and the HTTP server run
// beside it and never call back into it.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/cmd/internal/events"
	"github.com/featureplug/featureplug/cmd/internal/kube"
	"github.com/featureplug/featureplug/cmd/internal/liveness"
	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fswatch"
	"github.com/featureplug/featureplug/rules/plan"
)

// HealthRecorder takes the devices' health events and the node's health
// policy: the one device health tracker (health.Tracker).
type HealthRecorder interface {
	Record(ev discovery.HealthEvent)
	SetPlan(p *plan.Plan)
	NVMLFailing(gpus []string, err error)
	NVMLAnswers()
	NVMLFailure() (time.Time, error)
}

// Agent is a running featureplug daemon.
type Agent struct {
	cfg      agentconfig.Config
	log      *slog.Logger
	registry *prometheus.Registry
	metrics  *metrics
	events   *events.Recorder // nil without an API server
	nodes    *kube.NodeWatch  // nil without an API server
	watcher  *fswatch.Watcher
	health   HealthRecorder
	healthCh chan discovery.HealthEvent

	// sinks are the agent's outputs, in the order plans are applied
	// (buildSinks); gates are those that hold resources back, runners
	// the parts with work of their own.
	sinks     []Sink
	gates     []Gate
	reservers []Reserver
	runners   []namedRunner

	// planReport reports devices the plan leaves out (planreport.go).
	planReport *planReport
	// live answers /healthz.
	live *liveness.Liveness
	// kicks makes the rules file watch look at once (SIGHUP); gated is
	// signalled when a gate's answer may have changed; outputs carries a
	// sink whose watched output changed.
	kicks      chan struct{}
	migChanged chan struct{} // a MIG device made or destroyed for a claim: discover again
	gated      chan struct{}
	outputs    chan Restorer
	// stall and unstall hold the loop still on a fake node (test hook of
	// /healthz, see stallLoop).
	stall, unstall chan struct{}

	// State owned by the loop goroutine.
	inv        *discovery.Inventory
	ruleSet    agentconfig.RuleSet
	plan       *plan.Plan // the last good plan, as the rules made it
	served     *plan.Plan // the plan the sinks serve: plan, gated
	servedFrom *plan.Plan // the plan served was made from
	nodeLabels map[string]string
	stopHealth context.CancelFunc
	// nvmlDown is the NVML error of the latest discovery, nil while NVML
	// answers; nvmlSince is when it began (nvmlfence.go). Loop only.
	nvmlDown  error
	nvmlSince time.Time
	// rulesKey identifies the rules file state last handled (content hash
	// or kind of error); rulesMissing is set while the file is lost.
	rulesKey     string
	rulesMissing bool
	// reported is the plan the last ResourcesChanged Event described.
	reported *plan.Plan

	// current is the latest inventory, read by the health watcher; lib
	// the NVML of the latest discovery, read by the MPS sink.
	current atomic.Pointer[discovery.Inventory]
	lib     atomic.Pointer[nvmlLib]
}

// Components /healthz reports on.
const (
	componentLoop          = "agent loop"
	componentHealthWatcher = "health watcher"
	componentHealthRelay   = "device health relay"
)

// DefaultLivenessTimeout is how long the agent loop may go without a
// heartbeat before /healthz fails.
const DefaultLivenessTimeout = liveness.DefaultTimeout

// nvmlLib boxes an nvml.Interface for an atomic pointer.
type nvmlLib struct{ nvml.Interface }

// Registry returns the registry the agent's metrics are on.
func (a *Agent) Registry() *prometheus.Registry { return a.registry }

// Run runs the agent until ctx ends. It fails only when it cannot start
// (the first discovery failed, the metrics address is taken); later
// failures are logged, counted and retried, and never stop what already
// serves. A file it cannot watch for lack of inotify is checked
// periodically instead. /healthz fails while the loop makes no progress
// for Config.LivenessTimeout or the health watcher has stopped. On return
// every device plugin server has stopped; the NodeFeature stays in place.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	inv, lib, err := a.discover()
	if nerr := nvmlFailure(err); nerr != nil {
		// NVML fails at start (a driver being reloaded, every GPU lost):
		// serve nothing, say why, and re-discover until it answers.
		inv, lib, err = &discovery.Inventory{}, nil, nil
		a.nvmlFailingAtStart(nerr)
	}
	if err != nil {
		return fmt.Errorf("discovering GPUs: %w", err)
	}
	a.setInventory(inv)
	a.lib.Store(&nvmlLib{lib})
	a.log.Info("discovered GPUs", "gpus", len(inv.GPUs), "migDevices", inv.MIGDeviceCount(),
		"driver", inv.DriverVersion, "cuda", inv.CUDADriverVersion)

	var wg sync.WaitGroup
	errs := make(chan error, len(a.runners)+len(a.sinks)+8) // one per goRun, so none blocks after the loop ends
	goRun := func(name string, f func(context.Context) error) {
		wg.Go(func() {
			if err := f(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	rulesSnaps, err := a.startParts(ctx, &wg, goRun)
	if err != nil {
		return err
	}
	a.start(ctx, &wg)
	runErr := a.loop(ctx, &wg, errs, rulesSnaps)
	cancel()
	if a.stopHealth != nil {
		a.stopHealth()
	}
	wg.Wait()
	return runErr
}

// startParts starts what runs beside the loop: the metrics server, the
// runners (sinks' servers, the file watcher), the health relay, the watch
// of the rules file (its states come on the returned channel; nil without
// a rules file) and of the sinks' outputs, the gates' signals, Events and
// the Node watch.
func (a *Agent) startParts(ctx context.Context, wg *sync.WaitGroup, goRun func(string, func(context.Context) error)) (<-chan fswatch.Snapshot, error) {
	if a.cfg.MetricsAddr != "" {
		srv, err := a.listen()
		if err != nil {
			return nil, err
		}
		goRun("metrics server", srv)
	}
	for _, r := range a.runners {
		goRun(r.name, r.run)
	}
	wg.Go(func() {
		a.relayHealth(ctx, a.healthCh)
		if ctx.Err() == nil {
			a.live.Stop(componentHealthRelay, "stopped passing health events to the device plugins")
		}
	})
	var rulesSnaps <-chan fswatch.Snapshot
	if path, ok := a.rulesFile(); ok {
		rulesSnaps, _ = a.watcher.File(path, "rules file", a.cfg.RulesEngine.MaxFileSize, a.kicks, a.fallbackGauge("rules"))
	}
	a.watchOutputs(ctx, goRun)
	for _, g := range a.gates {
		goRun("gate relay", func(ctx context.Context) error {
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-g.GateChanged():
					signal(a.gated)
				}
			}
		})
	}
	if a.cfg.Kube != nil {
		a.events.Start(ctx, a.cfg.Kube)
		a.nodes.Start(ctx) // not waiting: waitNodeLabels
	}
	return rulesSnaps, nil
}

// signal wakes whoever waits on ch (capacity 1) without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// start takes the rules and serves the first plan: register first, then
// the health watcher and what waits for start-up to be over.
func (a *Agent) start(ctx context.Context, wg *sync.WaitGroup) {
	a.live.Beat(componentLoop)
	a.loadRules(ctx)
	a.waitNodeLabels(ctx) // only when the rules select on them: register first
	a.refreshNodeLabels()
	a.startupEvidence()
	a.replan(ctx, "start")
	a.restartHealthWatcher(ctx, wg)
	a.startAfterStartup(ctx, wg) // memory.go
}

// loop is the agent's loop: it reacts to every input until ctx ends or a
// runner fails (its error is returned).
func (a *Agent) loop(ctx context.Context, wg *sync.WaitGroup, errs <-chan error, rulesSnaps <-chan fswatch.Snapshot) error {
	// A jittered period, so that agents started together drift apart.
	ticker := time.NewTicker(wait.Jitter(a.cfg.RediscoverInterval, periodJitter))
	defer ticker.Stop()
	heartbeat := time.NewTicker(a.live.HeartbeatInterval())
	defer heartbeat.Stop()
	for {
		a.live.Beat(componentLoop)
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			return err
		case <-heartbeat.C:
		case <-ticker.C:
			a.rediscover(ctx, wg, "interval")
		case <-a.migChanged:
			a.rediscover(ctx, wg, "a MIG device created or destroyed for a claim")
		case <-a.nodes.Changed():
			a.nodeLabelsChanged(ctx)
		case <-a.cfg.Rediscover:
			// SIGHUP: the rules file is read again (and its watch
			// re-armed) as well as the GPUs.
			signal(a.kicks)
			a.rereadRules(ctx)
			a.rediscover(ctx, wg, "signal")
		case s := <-rulesSnaps:
			if a.applyRulesSnapshot(s) {
				a.replan(ctx, "rules")
			}
		case r := <-a.outputs:
			r.RestoreOutput()
		case <-a.gated:
			a.regate(ctx)
		case <-a.stall:
			a.holdStill(ctx)
		}
	}
}

// holdStill holds the loop until released or ctx ends (/fake/stall).
func (a *Agent) holdStill(ctx context.Context) {
	a.log.Warn("agent loop held still on request (fake node test hook); /healthz will fail")
	select {
	case <-a.unstall:
		a.log.Info("agent loop released")
	case <-ctx.Done():
	}
}

// fallbackGauge returns the function that shows on
// featureplug_file_watch_fallback{file} whether a watched file is checked
// periodically only.
func (a *Agent) fallbackGauge(label string) func(bool) {
	gauge := a.metrics.fileWatchFallback.WithLabelValues(label)
	gauge.Set(0)
	return func(on bool) {
		if on {
			gauge.Set(1)
		} else {
			gauge.Set(0)
		}
	}
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
func (a *Agent) discoverFor(rs agentconfig.RuleSet) (*discovery.Inventory, nvml.Interface, error) {
	start := time.Now()
	inv, lib, err := a.cfg.Source.Discover()
	if err == nil && needsMIGGeometry(rs) {
		err = discovery.ReadMIGGeometry(lib, inv)
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
		if nerr := nvmlFailure(err); nerr != nil {
			a.nvmlFailing(ctx, nerr)
			return
		}
		a.log.Error("re-discovery failed; keeping the last inventory", "trigger", why, "err", err)
		return
	}
	a.nvmlAnswers(ctx)
	a.refreshNodeLabels()
	changed := !reflect.DeepEqual(inv, a.inv)
	a.setInventory(inv)
	if lib != a.nvml() {
		a.lib.Store(&nvmlLib{lib})
		a.restartHealthWatcher(ctx, wg)
	}
	if !changed && why == "interval" {
		a.replanIfLabelsChanged(ctx)
		// An output deleted or edited behind the agent's back (a feature
		// file, a CDI spec) is written again now at the latest.
		a.restoreOutputs()
		return
	}
	a.log.Info("re-discovered GPUs", "trigger", why, "changed", changed, "gpus", len(inv.GPUs), "migDevices", inv.MIGDeviceCount())
	a.replan(ctx, "discovery")
}

// nvml returns the NVML of the latest discovery (nil before the first).
func (a *Agent) nvml() nvml.Interface {
	if l := a.lib.Load(); l != nil {
		return l.Interface
	}
	return nil
}

// setComputeMode is the MPS supervisor's mps.ComputeModeFunc: it sets a
// GPU's compute mode through the NVML of the latest discovery (the real
// library, or the fake node, which records the mode).
func (a *Agent) setComputeMode(uuid string, mode nvml.ComputeMode) (nvml.ComputeMode, error) {
	lib := a.nvml()
	if lib == nil {
		return 0, errors.New("no NVML library: GPUs not discovered yet")
	}
	return discovery.SetComputeMode(lib, uuid, mode)
}

// startupEvidence hands the health tracker the evidence of earlier
// failures NVML keeps across processes (pending row remapping or retired
// pages, volatile double-bit ECC counts, GPUs lost at discovery) before
// the first plan is served, so those GPUs are Unhealthy in the first
// ListAndWatch. The health watcher reads it again when it starts and
// while it lasts.
func (a *Agent) startupEvidence() {
	lib := a.nvml()
	if lib == nil {
		return
	}
	if a.ruleSet != nil {
		// The node's policy decides the evidence too.
		if p, err := a.planFor(a.ruleSet); err == nil {
			a.health.SetPlan(p)
		}
	}
	w := discovery.NewHealthWatcher(lib, a.watcherOptions())
	evs, _ := w.ReadEvidence(a.inv)
	for _, ev := range evs {
		a.health.Record(ev)
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
	w := discovery.NewHealthWatcher(a.nvml(), a.watcherOptions())
	a.live.Running(componentHealthWatcher)
	wg.Go(func() {
		err := w.Run(hctx, a.current.Load, a.healthCh)
		if hctx.Err() != nil {
			return // stopped by the agent
		}
		reason := "stopped"
		if err != nil {
			reason = "stopped: " + err.Error()
		}
		a.log.Error("health watcher stopped; devices keep their last health and /healthz fails", "err", err)
		a.live.Stop(componentHealthWatcher, reason)
	})
}

// watcherOptions are the NVML health watcher's options: every event,
// which the health tracker decides on with the node's policy.
func (a *Agent) watcherOptions() discovery.HealthOptions {
	o := a.cfg.Health
	o.AllEvents = true
	o.Logger = a.log.With("component", "health")
	return o
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
