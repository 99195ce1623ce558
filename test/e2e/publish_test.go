package e2e

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
	"sigs.k8s.io/yaml"
)

// gfdLabelsDGXA100 are gpu-feature-discovery's labels for the bundled
// dgx-a100 fake node with the mixed rules.
var gfdLabelsDGXA100 = map[string]string{
	"nvidia.com/gpu.present":                 "true",
	"nvidia.com/gpu.product":                 "NVIDIA-A100-SXM4-40GB",
	"nvidia.com/gpu.count":                   "8",
	"nvidia.com/gpu.memory":                  "40960",
	"nvidia.com/gpu.family":                  "ampere",
	"nvidia.com/gpu.compute.major":           "8",
	"nvidia.com/gpu.compute.minor":           "0",
	"nvidia.com/mig.capable":                 "true",
	"nvidia.com/mig.strategy":                "mixed",
	"nvidia.com/mps.capable":                 "false",
	"nvidia.com/cuda.driver-version.full":    "570.86.15",
	"nvidia.com/cuda.driver-version.major":   "570",
	"nvidia.com/cuda.runtime-version.full":   "12.8",
	"nvidia.com/mig-1g.5gb.count":            "6",
	"nvidia.com/mig-2g.10gb.count":           "8",
	"nvidia.com/mig-3g.20gb.count":           "2",
	"nvidia.com/mig-1g.5gb.memory":           "4864",
	"nvidia.com/mig-3g.20gb.multiprocessors": "42",
}

// testPublish runs the agent with --publish nodefeature and checks, through
// the real nfd-master, that its labels reach the Node, follow a hardware
// change, cost no writes when nothing changed, survive an agent restart
// without a gap, and feed NodeFeatureRules.
func (c *cluster) testPublish(t *testing.T) {
	node := c.node(t, "pub-dgx-a100", nil)
	dir := t.TempDir()
	fake := copyFile(t, bundledFakeNode("dgx-a100"), dir, "node.yaml")
	a := startAgent(t, agentSpec{
		Node:       node,
		FakeNode:   fake,
		Publish:    "nodefeature",
		Rules:      "mixed",
		Kubeconfig: c.api.KubeconfigPath,
		Namespace:  agentNamespace,
		Extra:      []string{"--resync-interval", "200ms", "--rediscover-interval", "1h"},
	})

	start := time.Now()
	c.waitLabels(t, node, gfdLabelsDGXA100)
	t.Logf("GFD labels on node %s %s after the agent answered", node, time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 5*waitTimeout)
	defer cancel()
	nfs := c.api.NFD.NfdV1alpha1().NodeFeatures(agentNamespace)
	nf, err := nfs.Get(ctx, nodeFeatureName(node), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the agent's NodeFeature: %v", err)
	}
	if got := nf.Labels["nfd.node.kubernetes.io/node-name"]; got != node {
		t.Errorf("NodeFeature %s has node-name label %q, want %q", nf.Name, got, node)
	}
	if n := len(nf.Spec.Features.Instances["nvidia.gpu"].Elements); n != 8 {
		t.Errorf("NodeFeature %s has %d nvidia.gpu instances, want 8", nf.Name, n)
	}

	t.Run("HardwareChange", func(t *testing.T) {
		changed, err := os.ReadFile(filepath.Join("testdata", "dgx-a100-more-mig.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		writeFileAtomic(t, fake, changed)
		a.hup(t)
		want := map[string]string{"nvidia.com/mig-1g.5gb.count": "20", "nvidia.com/gpu.count": "8"}
		c.waitLabels(t, node, want)
	})

	t.Run("ResyncsWithoutChangeWriteNothing", func(t *testing.T) {
		// A successful publish after the labels of the change showed has
		// published the latest content: from here on only resyncs of
		// unchanged content follow, and they must write nothing.
		settled := a.metric(t, "featureplug_publish_attempts_total", `result="ok"`) + 1
		a.waitMetric(t, "featureplug_publish_attempts_total", func(v float64) bool { return v >= settled }, `result="ok"`)
		writes := a.metric(t, "featureplug_publish_writes_total")
		before, err := nfs.Get(ctx, nodeFeatureName(node), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The positive marker: ten more successful publishes (resyncs, with
		// --resync-interval 200ms).
		attempts := a.metric(t, "featureplug_publish_attempts_total", `result="ok"`)
		a.waitMetric(t, "featureplug_publish_attempts_total", func(v float64) bool { return v >= attempts+10 }, `result="ok"`)
		after, err := nfs.Get(ctx, nodeFeatureName(node), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.ResourceVersion != before.ResourceVersion {
			t.Errorf("NodeFeature resourceVersion went from %s to %s over resyncs without change", before.ResourceVersion, after.ResourceVersion)
		}
		if got := a.metric(t, "featureplug_publish_writes_total"); got != writes {
			t.Errorf("featureplug_publish_writes_total went from %v to %v over resyncs without change", writes, got)
		}
	})

	t.Run("RestartKeepsLabels", func(t *testing.T) {
		n, err := c.api.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := c.api.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", node).String(),
			ResourceVersion: n.ResourceVersion,
		})
		if err != nil {
			t.Fatalf("watching node %s: %v", node, err)
		}
		var (
			mu         sync.Mutex
			updates    int
			bad        []string
			markerSeen = make(chan struct{})
		)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ev := range w.ResultChan() {
				n, ok := ev.Object.(*corev1.Node)
				if !ok {
					continue
				}
				mu.Lock()
				if n.Labels[publishMarkerLabel] != "" && markerSeen != nil {
					close(markerSeen)
					markerSeen = nil
				}
				updates++
				if ev.Type != watch.Modified {
					bad = append(bad, string(ev.Type))
				}
				for _, k := range []string{"nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/mig-1g.5gb.count"} {
					if _, has := n.Labels[k]; !has {
						bad = append(bad, "rv "+n.ResourceVersion+" without "+k)
					}
				}
				mu.Unlock()
			}
		}()
		nfBefore, err := nfs.Get(ctx, nodeFeatureName(node), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a.restart(t)
		// The new process has published (its first content equals the
		// stored one); then a marker NodeFeature for the same node makes
		// nfd-master update the node once more. Once the watch has seen the
		// marker label, nfd-master has acted on everything before it.
		a.waitMetric(t, "featureplug_publish_attempts_total", func(v float64) bool { return v >= 3 }, `result="ok"`)
		publishMarkerNodeFeature(ctx, t, c, node, &mu, &markerSeen)
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		if len(bad) > 0 {
			t.Errorf("during the agent restart the node was updated without its labels (%d updates): %v", updates, bad)
		}
		t.Logf("%d node updates seen during the restart, none without the labels", updates)
		c.waitLabels(t, node, map[string]string{"nvidia.com/mig-1g.5gb.count": "20"})
		nfAfter, err := nfs.Get(ctx, nodeFeatureName(node), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if nfAfter.UID != nfBefore.UID || nfAfter.ResourceVersion != nfBefore.ResourceVersion {
			t.Errorf("the restart replaced or rewrote the unchanged NodeFeature: uid %s -> %s, resourceVersion %s -> %s",
				nfBefore.UID, nfAfter.UID, nfBefore.ResourceVersion, nfAfter.ResourceVersion)
		}
	})

	t.Run("NodeFeatureRuleAddsLabels", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(build.root, "manifests", "examples", "nodefeaturerule-gpu.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var rule nfdv1alpha1.NodeFeatureRule
		if err := yaml.UnmarshalStrict(b, &rule); err != nil {
			t.Fatalf("decoding the example NodeFeatureRule: %v", err)
		}
		if _, err := c.api.NFD.NfdV1alpha1().NodeFeatureRules().Create(ctx, &rule, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating NodeFeatureRule %s: %v", rule.Name, err)
		}
		t.Cleanup(func() {
			_ = c.api.NFD.NfdV1alpha1().NodeFeatureRules().Delete(context.Background(), rule.Name, metav1.DeleteOptions{})
		})
		c.waitLabels(t, node, map[string]string{
			"example.com/a100-node":   "true",
			"example.com/nvlink":      "true",
			"example.com/mig-enabled": "true",
		})
	})
}

// testPublishWithoutMIG publishes a node none of whose GPUs is in MIG mode.
func (c *cluster) testPublishWithoutMIG(t *testing.T) {
	node := c.node(t, "pub-dgx-h100", nil)
	startAgent(t, agentSpec{
		Node:       node,
		FakeNode:   "dgx-h100",
		Publish:    "nodefeature",
		Rules:      "single",
		Kubeconfig: c.api.KubeconfigPath,
		Namespace:  agentNamespace,
	})
	c.waitLabels(t, node, map[string]string{
		"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
		"nvidia.com/gpu.count":   "8",
		"nvidia.com/mig.capable": "true",
	})
}

// publishMarkerLabel is the label of the marker NodeFeature of
// RestartKeepsLabels.
const publishMarkerLabel = "feature.node.kubernetes.io/e2e-publish-marker"

// publishMarkerNodeFeature creates a second NodeFeature for node carrying
// publishMarkerLabel, waits until *seen is closed (the node watch saw the
// label), and deletes the marker again, waiting for the label to go.
func publishMarkerNodeFeature(ctx context.Context, t *testing.T, c *cluster, node string, mu *sync.Mutex, seen *chan struct{}) {
	t.Helper()
	mu.Lock()
	ch := *seen
	mu.Unlock()
	nfs := c.api.NFD.NfdV1alpha1().NodeFeatures(agentNamespace)
	marker := &nfdv1alpha1.NodeFeature{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "e2e-publish-marker-" + node,
			Labels: map[string]string{"nfd.node.kubernetes.io/node-name": node},
		},
		Spec: nfdv1alpha1.NodeFeatureSpec{Labels: map[string]string{publishMarkerLabel: "true"}},
	}
	if _, err := nfs.Create(ctx, marker, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the marker NodeFeature: %v", err)
	}
	defer func() {
		if err := nfs.Delete(context.Background(), marker.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting the marker NodeFeature: %v", err)
		}
	}()
	if ch == nil {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatalf("nfd-master never put the marker label %s on node %s", publishMarkerLabel, node)
	}
}
