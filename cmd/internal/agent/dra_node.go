package agent

import (
	"context"
	"log/slog"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/featureplug/featureplug/cmd/internal/kube"
	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/plugin/dra"
	"github.com/featureplug/featureplug/rules/plan"
)

// draNodeRetry is the first wait before the kubelet-facing DRA server is
// started again after it failed (its sockets could not be made); the wait
// doubles, jittered, up to publishBackoffMax.
const draNodeRetry = time.Second

// draNodeSink runs the kubelet-facing half of the DRA driver (dra.Node:
// plugin registration, NodePrepareResources / NodeUnprepareResources, the
// prepared-claims checkpoint) beside the DRA sink, whose Table it prepares
// claims from. It starts serving once DRA is in use: --serve dra, a plan
// with a DRA resource, or prepared claims in the checkpoint (so that the
// kubelet can unprepare them after a restart whatever the rules say now);
// from then on it serves until the agent stops, so claims prepared before
// a rules edit moved their resource away can still be unprepared. A node
// that never serves anything through DRA makes no socket in the kubelet's
// directories (which its DaemonSet may not even mount). A failure to make
// the sockets is logged and retried with backoff; it never stops the
// agent.
type draNodeSink struct {
	node *dra.Node
	def  plan.Serve
	log  *slog.Logger

	once  sync.Once
	start chan struct{} // closed when DRA is first in use
}

var (
	_ Sink   = (*draNodeSink)(nil)
	_ Runner = (*draNodeSink)(nil)
)

// addDRANode adds the kubelet-facing DRA server right after the DRA sink
// (called by addDRASink, dra.go). Without an API server there is none:
// claims cannot be read, and the DRA sink refuses DRA resources then.
// Without its two directories there is none either (said once when
// --serve is dra).
func (a *Agent) addDRANode() error {
	if a.dra == nil || a.cfg.Kube == nil {
		return nil
	}
	log := a.log.With("component", "dra-node")
	if a.cfg.DRARegistryDir == "" || a.cfg.DRAPluginDir == "" {
		if a.cfg.DefaultServe == plan.ServeDRA {
			log.Warn("no --kubelet-registry-dir or --dra-plugin-dir: the kubelet cannot prepare claims of this node's DRA devices",
				"kubeletRegistryDir", a.cfg.DRARegistryDir, "draPluginDir", a.cfg.DRAPluginDir)
		}
		return nil
	}
	node, err := dra.NewNode(dra.NodeOptions{
		NodeName:    a.cfg.NodeName,
		RegistryDir: a.cfg.DRARegistryDir,
		PluginDir:   a.cfg.DRAPluginDir,
		StateDir:    a.cfg.Plugin.StateDir,
		Claims:      claimGetter{a.cfg.Kube},
		Table:       a.dra.currentTable,
		Logger:      log,
		Registerer:  a.registry,
	})
	if err != nil {
		return err
	}
	s := &draNodeSink{node: node, def: a.cfg.DefaultServe, log: log, start: make(chan struct{})}
	// Device health streams (DRAResourceHealth) learn of each new Table.
	a.dra.tableChanged = node.TableChanged
	if s.def == plan.ServeDRA {
		s.activate("--serve dra")
	} else if n := node.PreparedClaims(); n > 0 {
		s.activate("prepared claims in the checkpoint")
	}
	i := len(a.sinks)
	for j, x := range a.sinks {
		if x == Sink(a.dra) {
			i = j + 1
			break
		}
	}
	a.sinks = append(a.sinks[:i], append([]Sink{s}, a.sinks[i:]...)...)
	return nil
}

// Name implements Sink.
func (s *draNodeSink) Name() string { return "DRA kubelet plugin" }

// Apply implements Sink: the first plan with a DRA resource starts the
// server. It never fails.
func (s *draNodeSink) Apply(_ context.Context, _ *discovery.Inventory, p *plan.Plan) error {
	if p != nil && len(dra.DRAResources(p, s.def)) > 0 {
		s.activate("a resource is served through DRA")
	}
	return nil
}

// activate starts the server (once).
func (s *draNodeSink) activate(why string) {
	s.once.Do(func() {
		s.log.Info("starting the kubelet-facing DRA driver", "driver", dra.DriverName, "why", why)
		close(s.start)
	})
}

// Run implements Runner: it waits until DRA is in use, then serves until
// ctx ends, making the sockets again after a failure.
func (s *draNodeSink) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-s.start:
	}
	backoff := wait.Backoff{Duration: draNodeRetry, Factor: 2, Jitter: backoffJitter, Steps: 64, Cap: publishBackoffMax}
	for {
		err := s.node.Run(ctx)
		if ctx.Err() != nil {
			return nil
		}
		delay := backoff.Step()
		s.log.Error("the kubelet-facing DRA driver stopped; starting it again", "err", err, "retryIn", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
}

// claimGetter reads ResourceClaims through the agent's API client
// (dra.ClaimGetter).
type claimGetter struct{ kube kube.Interface }

var _ dra.ClaimGetter = claimGetter{}

// Get implements dra.ClaimGetter.
func (c claimGetter) Get(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	return c.kube.ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}
