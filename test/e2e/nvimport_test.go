package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/featureplug/featureplug/test/harness"
)

// nvimportConfigLabel is the node label NVIDIA's config manager picks a
// named config by.
const nvimportConfigLabel = "nvidia.com/device-plugin.config"

// TestNVImportPerNodeConfigs converts an NVIDIA device-plugin ConfigMap with
// two named configs with `featureplug rules import` and runs two agents on
// the one rules file it gives, against kube-apiserver, nfd-master and the
// kubelet's device manager: the node labelled
// nvidia.com/device-plugin.config=a gets nvidia.com/gpu shared 4 ways, the
// node labelled =b 2 ways, in the kubelet's capacity and in the GFD labels
// nfd-master puts on the Node. Relabelling the second node to =a moves it to
// config a, as NVIDIA's config manager would.
func TestNVImportPerNodeConfigs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, nfd-master and featureplug")
	}
	c := startCluster(t)
	api := c.api

	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	cmd := exec.Command(build.agent, "rules", "import", "--default-config", "b",
		filepath.Join("testdata", "nvimport-configmap.yaml"), "-o", rulesFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("featureplug rules import: %v\n%s", err, out)
	}

	type node struct {
		name     string
		replicas string
		capacity int64 // 4 L40S GPUs x the replicas
		peer     *harness.KubeletPeer
	}
	nodes := []*node{
		{name: c.node(t, "nvimport-a", map[string]string{nvimportConfigLabel: "a"}), replicas: "4", capacity: 16},
		{name: c.node(t, "nvimport-b", map[string]string{nvimportConfigLabel: "b"}), replicas: "2", capacity: 8},
	}
	for _, n := range nodes {
		dir := shortTempDir(t)
		n.peer = harness.StartKubeletPeer(t, dir)
		startAgent(t, agentSpec{
			Node:       n.name,
			FakeNode:   "l40s-pcie",
			Publish:    "nodefeature",
			Rules:      rulesFile,
			KubeletDir: dir,
			Kubeconfig: api.KubeconfigPath,
			Namespace:  agentNamespace,
		})
	}
	for _, n := range nodes {
		waitCapacities(t, n.peer, map[string]int64{"nvidia.com/gpu": n.capacity})
		c.waitLabels(t, n.name, map[string]string{
			"nvidia.com/gpu.count":            "4",
			"nvidia.com/gpu.replicas":         n.replicas,
			"nvidia.com/gpu.sharing-strategy": "time-slicing",
		})
	}

	// Node b moves to config a when its label says so.
	b := nodes[1]
	nvimportLabel(t, c, b.name, "a")
	waitCapacities(t, b.peer, map[string]int64{"nvidia.com/gpu": 16})
	c.waitLabels(t, b.name, map[string]string{"nvidia.com/gpu.replicas": "4"})
}

// nvimportLabel sets a node's nvidia.com/device-plugin.config label.
func nvimportLabel(t *testing.T, c *cluster, node, config string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	n, err := c.api.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels[nvimportConfigLabel] = config
	if _, err := c.api.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("labelling node %s %s=%s: %v", node, nvimportConfigLabel, config, err)
	}
}
