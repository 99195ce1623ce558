package agent

import (
	"context"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/featureplug/featureplug/cmd/internal/kube"
)

// apiTimeout bounds how long the agent's loop waits for the API server at
// start (the first list of its Node), so that an unreachable API server
// never stalls planning or serving.
const apiTimeout = 5 * time.Second

// Jitter of the agent's periodic work: each period is lengthened by a
// random fraction of up to this (wait.Jitter), so that agents started
// together (a DaemonSet rollout) do not re-discover, resync or retry in
// lockstep.
const (
	periodJitter  = 0.1
	backoffJitter = 0.5
)

// publishBackoffMax caps the publisher's retry delay before jitter, so that
// after an API-server outage of any length every agent has published again
// within publishBackoffMax*(1+backoffJitter) = 22.5 s of the server's
// return (issue 18's goal: under 30 s), spread over that window rather than
// together (docs/scale.md). While the server is down, 1,000 failing agents
// retry about 60 times a second in all, each a refused connection.
const publishBackoffMax = 15 * time.Second

// nodeWatch keeps the agent's own Node in an informer's cache: one list and
// one watch, filtered by a field selector on the Node's name, with no
// resync (period 0), so a steady state costs the API server one open watch
// and no requests. It signals when the Node's labels or UID change.
type nodeWatch struct {
	name     string
	informer cache.SharedIndexInformer
	signal   chan struct{}
}

// newNodeWatch returns a watch of the Node called name; nil when kube is
// nil. Nothing runs until start.
func newNodeWatch(client kube.Interface, name string) *nodeWatch {
	if client == nil {
		return nil
	}
	// One informer on one object, built from a ListWatch rather than
	// client-go's SharedInformerFactory: the factory links every typed
	// informer of every API group (about 15 MB of binary) for this one.
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	nodes := client.Nodes()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return nodes.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return nodes.Watch(ctx, o)
		},
	}
	w := &nodeWatch{
		name: name,
		// Wrapped like client-go's own typed informers, so a client that
		// cannot stream lists (the fake clientset) is not asked to.
		informer: cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Node{},
			cache.SharedIndexInformerOptions{ResyncPeriod: 0}),
		signal: make(chan struct{}, 1),
	}
	_, _ = w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { w.notify() },
		UpdateFunc: func(before, after any) {
			b, okB := before.(*corev1.Node)
			a, okA := after.(*corev1.Node)
			if !okB || !okA || b.UID != a.UID || !maps.Equal(b.Labels, a.Labels) {
				w.notify()
			}
		},
		DeleteFunc: func(any) { w.notify() },
	})
	return w
}

func (w *nodeWatch) notify() {
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// start runs the watch until ctx ends and waits up to timeout for its first
// list; it returns whether the cache holds the Node's state.
func (w *nodeWatch) start(ctx context.Context, timeout time.Duration) bool {
	if w == nil {
		return false
	}
	w.run(ctx)
	return w.wait(ctx, timeout)
}

// run runs the watch until ctx ends, without waiting.
func (w *nodeWatch) run(ctx context.Context) {
	if w != nil {
		go w.informer.RunWithContext(ctx)
	}
}

// wait waits up to timeout for the watch's first list; it returns whether
// the cache holds the Node's state.
func (w *nodeWatch) wait(ctx context.Context, timeout time.Duration) bool {
	if w == nil {
		return false
	}
	syncCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return cache.WaitForCacheSync(syncCtx.Done(), w.informer.HasSynced)
}

// changed is signalled when the Node's labels or UID may have changed; nil
// (never ready) without an API server.
func (w *nodeWatch) changed() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.signal
}

// node returns the Node from the cache; ok is false before the first list,
// without an API server, or while the Node does not exist.
func (w *nodeWatch) node() (node *corev1.Node, ok bool) {
	if w == nil || !w.informer.HasSynced() {
		return nil, false
	}
	obj, exists, err := w.informer.GetStore().GetByKey(w.name)
	if err != nil || !exists {
		return nil, false
	}
	node, ok = obj.(*corev1.Node)
	return node, ok
}

// uid returns the Node's UID from the cache, "" when unknown.
func (w *nodeWatch) uid() types.UID {
	if n, ok := w.node(); ok {
		return n.UID
	}
	return ""
}

// startKube starts the Event recorder and the Node watch (when the agent
// has an API server), without waiting for the API server: see
// waitNodeLabels.
func (a *Agent) startKube(ctx context.Context) {
	if a.cfg.Kube == nil {
		return
	}
	a.events.start(ctx, a.cfg.Kube)
	a.nodes.run(ctx)
}

// waitNodeLabels waits up to apiTimeout for the Node's labels, before the
// first plan, when the rules select on node labels (or cannot say). When
// they do not, the first plan is registered at once (register first: the
// kubelet needs only the devices), and the watch's first list arrives
// later as a label change that changes no plan.
func (a *Agent) waitNodeLabels(ctx context.Context) {
	if a.cfg.Kube == nil || a.ruleSet == nil {
		return
	}
	if u, ok := a.ruleSet.(interface{ UsesNodeLabels() bool }); ok && !u.UsesNodeLabels() {
		a.log.Debug("the rules have no node selector: planning without waiting for the Node's labels")
		return
	}
	if !a.nodes.wait(ctx, apiTimeout) && ctx.Err() == nil {
		a.log.Warn("the Node is not listed yet; node selectors see only --node-labels until it is",
			"node", a.cfg.NodeName, "waited", apiTimeout)
	}
}

// nodeLabelsChanged takes the Node's labels from the watch's cache and
// replans when the plan they give differs.
func (a *Agent) nodeLabelsChanged(ctx context.Context) {
	before := a.nodeLabels
	a.refreshNodeLabels(ctx)
	if !maps.Equal(before, a.nodeLabels) {
		a.log.Info("node labels changed", "node", a.cfg.NodeName)
		a.replanIfLabelsChanged(ctx)
	}
}

// kubeNodeLabels returns the Node's labels from the watch's cache.
func (a *Agent) kubeNodeLabels() (map[string]string, bool) {
	n, ok := a.nodes.node()
	if !ok {
		return nil, false
	}
	return n.Labels, true
}
