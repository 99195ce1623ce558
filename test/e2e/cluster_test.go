package e2e

import (
	"context"
	"fmt"
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/featureplug/featureplug/test/harness"
)

// agentNamespace is the namespace the agents under test run in: their
// NodeFeature objects and Events go there.
const agentNamespace = "featureplug"

// nfdMasterNode is the node nfd-master itself runs on; no agent uses it.
const nfdMasterNode = "nfd-master-node"

// cluster is one kube-apiserver with etcd and one nfd-master, shared by the
// tests of TestCluster; each test uses nodes of its own.
type cluster struct {
	api    *harness.APIServer
	master *harness.NFDMaster
}

// TestCluster starts the control plane once and runs every test that needs
// it as a subtest, each on nodes of its own.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, nfd-master and featureplug")
	}
	c := startCluster(t)
	t.Run("PublishThroughNFDMaster", c.testPublish)
	t.Run("PublishWithoutMIG", c.testPublishWithoutMIG)
	t.Run("KubeletAllocation", c.testKubelet)
	t.Run("PoolsAndRulesEdits", c.testPools)
}

// startCluster starts kube-apiserver with etcd and nfd-master, and creates
// the agents' namespace.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	api := harness.StartAPIServer(t)
	c := &cluster{api: api, master: harness.StartNFDMaster(t, api, nfdMasterNode)}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := api.CreateNamespace(ctx, agentNamespace); err != nil {
		t.Fatal(err)
	}
	return c
}

// node registers a Node with extra labels, the way a kubelet would (plus
// the labels an admin put on it), and returns its name.
func (c *cluster) node(t *testing.T, name string, labels map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	n, err := c.api.CreateNode(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(labels) > 0 {
		n = n.DeepCopy()
		maps.Copy(n.Labels, labels)
		if _, err := c.api.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("labelling node %s with %v: %v", name, labels, err)
		}
	}
	return name
}

// waitLabels waits until the Node carries every wanted label and none of
// the absent ones.
func (c *cluster) waitLabels(t *testing.T, node string, want map[string]string, absent ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err := c.api.WaitNode(ctx, node, func(n *corev1.Node) (bool, string) {
		for k, v := range want {
			if got, ok := n.Labels[k]; !ok || got != v {
				return false, fmt.Sprintf("label %s is %q (present %v), want %q", k, got, ok, v)
			}
		}
		for _, k := range absent {
			if v, ok := n.Labels[k]; ok {
				return false, fmt.Sprintf("label %s=%q should be gone", k, v)
			}
		}
		return true, ""
	})
	if err != nil {
		t.Fatalf("node %s: %v", node, err)
	}
}

// nodeFeatureName is the name of the NodeFeature featureplug writes for a
// node (labeler.NodeFeatureName for names of ordinary length).
func nodeFeatureName(node string) string { return "featureplug-" + node }
