package agent

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/featureplug/featureplug/cmd/internal/kube/kubeclientset"
)

// TestCachedNodesNoGet: the publisher's read of the Node (for the owner
// reference) comes from the node watch's cache, with no GET; before the
// watch holds the Node, it is a GET.
func TestCachedNodesNoGet(t *testing.T) {
	kube := kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "uid-1"}})
	client := kubeclientset.New(kube, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	a := &Agent{} // no watch yet: the API server answers
	c := cachedNodes{a: a, api: client.Nodes()}
	if n, err := c.Get(ctx, "n", metav1.GetOptions{}); err != nil || n.UID != "uid-1" {
		t.Fatalf("without a watch: got %v, %v; want the Node with uid-1", n, err)
	}
	if got := kubeNodeGets(kube); got != 1 {
		t.Fatalf("without a watch: %d Node GETs, want 1", got)
	}

	a.nodes = newNodeWatch(client, "n")
	if !a.nodes.start(ctx, testWait) {
		t.Fatal("node watch did not sync")
	}
	for range 3 {
		n, err := c.Get(ctx, "n", metav1.GetOptions{})
		if err != nil || n.UID != "uid-1" {
			t.Fatalf("with the watch: got %v, %v; want the Node with uid-1", n, err)
		}
	}
	if got := kubeNodeGets(kube); got != 1 {
		t.Errorf("with the watch: %d Node GETs in all, want still 1 (reads from the cache)", got)
	}
}
