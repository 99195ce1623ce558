package kube

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
)

// NodeWatch keeps the agent's own Node in an informer's cache: one list and
// one watch, filtered by a field selector on the Node's name, with no
// resync (period 0), so a steady state costs the API server one open watch
// and no requests. It signals when the Node's labels or UID change.
type NodeWatch struct {
	name     string
	nodes    Nodes
	informer cache.SharedIndexInformer
	signal   chan struct{}
}

// NewNodeWatch returns a watch of the Node called name; nil when kube is
// nil. Nothing runs until start.
func NewNodeWatch(client Interface, name string) *NodeWatch {
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
	w := &NodeWatch{
		name:  name,
		nodes: nodes,
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

func (w *NodeWatch) notify() {
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// Start runs the watch until ctx ends, without waiting.
func (w *NodeWatch) Start(ctx context.Context) {
	if w != nil {
		go w.informer.RunWithContext(ctx)
	}
}

// Wait waits up to timeout for the watch's first list; it returns whether
// the cache holds the Node's state.
func (w *NodeWatch) Wait(ctx context.Context, timeout time.Duration) bool {
	if w == nil {
		return false
	}
	syncCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return cache.WaitForCacheSync(syncCtx.Done(), w.informer.HasSynced)
}

// Changed is signalled when the Node's labels or UID may have changed; nil
// (never ready) without an API server.
func (w *NodeWatch) Changed() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.signal
}

// Cached returns the Node from the cache; ok is false before the first
// list, without an API server, or while the Node does not exist.
func (w *NodeWatch) Cached() (node *corev1.Node, ok bool) {
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

// UID returns the Node's UID from the cache, "" when unknown.
func (w *NodeWatch) UID() types.UID {
	if n, ok := w.Cached(); ok {
		return n.UID
	}
	return ""
}

// Get reads the Node from the cache, and asks the API server only while
// the cache does not hold it (before the watch's first list): what the
// NodeFeature and ResourceSlice owner references need. At 1,000 agents
// started together that is 1,000 quorum reads of Nodes fewer
// (docs/scale.md).
func (w *NodeWatch) Get(ctx context.Context) (*corev1.Node, error) {
	if n, ok := w.Cached(); ok && n.UID != "" {
		return n.DeepCopy(), nil
	}
	return w.nodes.Get(ctx, w.name, metav1.GetOptions{})
}
