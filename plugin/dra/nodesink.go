package dra

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// DefaultNodeRetry paces the restarts of the kubelet-facing DRA server
// after it failed (its sockets could not be made): 1 s, doubling to 15 s,
// each lengthened by up to half.
var DefaultNodeRetry = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.5, Steps: 1 << 30, Cap: 15 * time.Second}

// NodeSink runs the kubelet-facing half of the DRA driver (Node: plugin
// registration, NodePrepareResources / NodeUnprepareResources, the
// prepared-claims checkpoint, device health streams) beside the DRA Sink,
// whose Table it prepares claims from. It starts serving once DRA is in
// use (Activate at construction, a plan with a DRA resource, or prepared
// claims in the checkpoint, so that the kubelet can unprepare them after a
// restart whatever the rules say now); from then on it serves until the
// agent stops, so claims prepared before a rules edit moved their resource
// away can still be unprepared. A node that never serves anything through
// DRA makes no socket in the kubelet's directories (which its DaemonSet
// may not even mount). A failure to make the sockets is logged and
// retried with Retry; it never stops the agent.
type NodeSink struct {
	node  *Node
	log   *slog.Logger
	retry wait.Backoff

	once  sync.Once
	start chan struct{} // closed when DRA is first in use
}

// NewNodeSink returns the sink of node, whose device health streams follow
// the Tables of sink. With prepared claims in the checkpoint it starts at
// once.
func NewNodeSink(node *Node, sink *Sink, retry wait.Backoff, log *slog.Logger) *NodeSink {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if retry.Duration <= 0 {
		retry = DefaultNodeRetry
	}
	s := &NodeSink{node: node, log: log, retry: retry, start: make(chan struct{})}
	sink.OnTableChange(node.TableChanged)
	created := node.CreatedMIG
	sink.createdMIG.Store(&created)
	if node.PreparedClaims() > 0 {
		s.Activate("prepared claims in the checkpoint")
	}
	return s
}

// Name implements the agent's Sink.
func (s *NodeSink) Name() string { return "DRA kubelet plugin" }

// Check implements the agent's Sink: it never refuses a plan.
func (s *NodeSink) Check(*discovery.Inventory, *plan.Plan) error { return nil }

// Apply implements the agent's Sink: the first plan with a DRA resource
// starts the server.
func (s *NodeSink) Apply(_ context.Context, _ *discovery.Inventory, p *plan.Plan) error {
	if len(DRAResources(p)) > 0 {
		s.Activate("a resource is served through DRA")
	}
	return nil
}

// Reserved implements the agent's Reserver: the MIG devices created for
// the prepared claims, which no other resource may serve while the claims
// hold them (after a rules edit that stopped partitioning their GPU).
func (s *NodeSink) Reserved() map[string]string { return s.node.reservedMIG() }

// Activate starts the server (once); why says what made DRA in use.
func (s *NodeSink) Activate(why string) {
	s.once.Do(func() {
		s.log.Info("starting the kubelet-facing DRA driver", "driver", DriverName, "why", why)
		close(s.start)
	})
}

// Run implements the agent's Runner: it waits until DRA is in use, then
// serves until ctx ends, making the sockets again after a failure.
func (s *NodeSink) Run(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-s.start:
	}
	backoff := s.retry
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
