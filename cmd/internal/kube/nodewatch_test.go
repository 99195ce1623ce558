package kube

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/featureplug/featureplug/cmd/internal/events"
	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/plugin/dra"
)

// TestNodeWatchGetFromCache: the publishers' read of the Node (for the
// owner references) comes from the node watch's cache, with no GET; before
// the watch holds the Node, it is a GET.
func TestNodeWatchGetFromCache(t *testing.T) {
	kube := kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "uid-1"}})
	w := NewNodeWatch(fakeClient{kube}, "n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Not started yet: the API server answers.
	if n, err := w.Get(ctx); err != nil || n.UID != "uid-1" {
		t.Fatalf("without a watch: got %v, %v; want the Node with uid-1", n, err)
	}
	if got := nodeGets(kube); got != 1 {
		t.Fatalf("without a watch: %d Node GETs, want 1", got)
	}

	w.Start(ctx)
	if !w.Wait(ctx, 20*time.Second) {
		t.Fatal("node watch did not sync")
	}
	for range 3 {
		n, err := w.Get(ctx)
		if err != nil || n.UID != "uid-1" {
			t.Fatalf("with the watch: got %v, %v; want the Node with uid-1", n, err)
		}
	}
	if got := nodeGets(kube); got != 1 {
		t.Errorf("with the watch: %d Node GETs in all, want still 1 (reads from the cache)", got)
	}
}

// nodeGets counts GETs of Nodes.
func nodeGets(cs *kubefake.Clientset) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetResource().Resource == "nodes" && a.GetVerb() == "get" {
			n++
		}
	}
	return n
}

// fakeClient is the Interface of a fake clientset's Nodes, all the node
// watch uses (kubeclientset, which imports this package, cannot be used
// here).
type fakeClient struct{ cs *kubefake.Clientset }

func (c fakeClient) Nodes() Nodes                             { return c.cs.CoreV1().Nodes() }
func (c fakeClient) Events(string) events.Events              { return nil }
func (c fakeClient) NodeFeatures(string) labeler.NodeFeatures { return nil }
func (c fakeClient) ConfigMaps(string) ConfigMaps             { return nil }
func (c fakeClient) Pods(string) Pods                         { return nil }
func (c fakeClient) ResourceSlices() dra.ResourceSlices       { return nil }
func (c fakeClient) ResourceClaims(string) dra.ResourceClaims { return nil }
func (c fakeClient) DeviceClasses() DeviceClasses             { return nil }
func (c fakeClient) IsWatchListSemanticsUnSupported() bool    { return true }
