package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/featureplug/featureplug/test/harness"
)

// Resources of testdata/pools-rules.yaml on the two pools' fake nodes.
var (
	trainingResources = map[string]int64{
		"example.com/h100-training":         8,
		"example.com/a100-80gb-inference":   0,
		"example.com/inference-mig-3g.40gb": 0,
		"nvidia.com/gpu":                    0,
	}
	inferenceResources = map[string]int64{
		"example.com/a100-80gb-inference":      1,
		"example.com/inference-mig-3g.40gb":    1,
		"example.com/inference-mig-2g.20gb":    1,
		"example.com/inference-mig-1g.10gb":    1,
		"example.com/inference-mig-1g.10gb.me": 1,
		"example.com/h100-training":            0,
		"nvidia.com/gpu":                       0,
	}
)

// testPools runs two agents with different GPU models, on Nodes in two
// pools, with one cluster-wide rules file: each kubelet gets its own
// resource names. Then the file is edited: a rename reaches the kubelet,
// and an invalid edit keeps everything served and is reported as an Event.
func (c *cluster) testPools(t *testing.T) {
	rulesFile := copyFile(t, filepath.Join("testdata", "pools-rules.yaml"), t.TempDir(), "rules.yaml")
	type pool struct {
		node, fake string
		want       map[string]int64
		peer       *harness.KubeletPeer
		agent      *agent
	}
	pools := []*pool{
		{node: c.node(t, "train-dgx-h100", map[string]string{"pool": "training"}), fake: "dgx-h100", want: trainingResources},
		{node: c.node(t, "infer-a100-80gb", map[string]string{"pool": "inference"}), fake: "a100-80gb-mixed", want: inferenceResources},
	}
	for _, p := range pools {
		dir := shortTempDir(t)
		p.peer = harness.StartKubeletPeer(t, dir)
		p.agent = startAgent(t, agentSpec{
			Node:       p.node,
			FakeNode:   p.fake,
			Rules:      rulesFile,
			KubeletDir: dir,
			Kubeconfig: c.api.KubeconfigPath,
			Namespace:  agentNamespace,
		})
	}
	for _, p := range pools {
		waitCapacities(t, p.peer, p.want)
	}
	train, infer := pools[0], pools[1]
	original, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("RenameResource", func(t *testing.T) {
		renamed := bytes.ReplaceAll(original, []byte("example.com/a100-80gb-inference"), []byte("example.com/a100-80gb-serving"))
		writeFileAtomic(t, rulesFile, renamed)
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := infer.peer.WaitRegistered(ctx, "example.com/a100-80gb-serving"); err != nil {
			t.Fatalf("the renamed resource: %v", err)
		}
		// The kubelet keeps a resource whose plugin went away in its
		// capacity for a grace period, with nothing allocatable.
		if err := waitFor(ctx, func() (bool, string) {
			_, al := infer.peer.Capacity("example.com/a100-80gb-inference")
			n := len(infer.peer.Devices("example.com/a100-80gb-inference"))
			return al == 0 && n == 0, fmt.Sprintf("old name: %d allocatable, %d healthy devices", al, n)
		}); err != nil {
			t.Fatalf("the old resource name is still served: %v", err)
		}
		want := map[string]int64{"example.com/a100-80gb-serving": 1}
		for res, n := range inferenceResources {
			if strings.HasPrefix(res, "example.com/inference-mig-") {
				want[res] = n
			}
		}
		waitCapacities(t, infer.peer, want)
		waitCapacities(t, train.peer, map[string]int64{"example.com/h100-training": 8, "example.com/a100-80gb-serving": 0})
		if got := infer.agent.metric(t, "featureplug_rule_errors_total"); got != 0 {
			t.Errorf("featureplug_rule_errors_total = %v after a valid edit", got)
		}
	})

	t.Run("InvalidEditKeepsServing", func(t *testing.T) {
		valid, err := os.ReadFile(rulesFile)
		if err != nil {
			t.Fatal(err)
		}
		invalid := bytes.Replace(valid, []byte("resource: example.com/h100-training"), []byte("resource: example.com/H100 Training!"), 1)
		if bytes.Equal(invalid, valid) {
			t.Fatal("the edit did not change the rules file")
		}
		writeFileAtomic(t, rulesFile, invalid)
		for _, p := range pools {
			p.agent.waitMetric(t, "featureplug_rule_errors_total", func(v float64) bool { return v >= 1 })
		}
		for _, p := range pools {
			if err := c.waitEvent(p.node, "InvalidRules"); err != nil {
				t.Errorf("node %s: %v", p.node, err)
			}
		}
		// Nothing was taken away from either node.
		for _, p := range pools {
			for res, n := range p.want {
				if res == "example.com/a100-80gb-inference" {
					res = "example.com/a100-80gb-serving"
				}
				if c, al := p.peer.Capacity(res); c != n || al != n {
					t.Errorf("node %s: %s has capacity %d, allocatable %d after an invalid edit, want %d, %d", p.node, res, c, al, n, n)
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if _, err := train.peer.Allocate(ctx, "after-bad-edit", "main", "example.com/h100-training", 1); err != nil {
			t.Errorf("allocating after an invalid rules edit: %v", err)
		}
	})
}

// waitEvent waits for a Warning Event from featureplug with the reason,
// involving the Node. Events about a Node live in the default namespace:
// the API server accepts them nowhere else (but kube-system).
func (c *cluster) waitEvent(node, reason string) error {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	sel := fields.Set{
		"involvedObject.kind": "Node",
		"involvedObject.name": node,
		"reason":              reason,
		"type":                corev1.EventTypeWarning,
	}.AsSelector().String()
	return waitFor(ctx, func() (bool, string) {
		evs, err := c.api.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Source.Component == "featureplug" && strings.Contains(e.Message, "rules") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events match %s", len(evs.Items), sel)
	})
}
