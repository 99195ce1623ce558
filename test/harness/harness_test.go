package harness_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/test/harness"
)

// nodeNameLabel ties a NodeFeature to its node; nfd-master ignores objects
// without it.
const nodeNameLabel = "nfd.node.kubernetes.io/node-name"

// TestNodeFeatureBecomesNodeLabels runs the real kube-apiserver and nfd-master
// and checks that what a NodeFeature asks for ends up on the Node: plain
// labels, and labels a NodeFeatureRule derives from the NodeFeature's features.
func TestNodeFeatureBecomesNodeLabels(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and nfd-master")
	}
	api := harness.StartAPIServer(t)
	const node = "node-a"
	master := harness.StartNFDMaster(t, api, node)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	nf := &nfdv1alpha1.NodeFeature{
		ObjectMeta: metav1.ObjectMeta{
			Name:      node + "-featureplug",
			Namespace: master.Namespace,
			Labels:    map[string]string{nodeNameLabel: node},
		},
		Spec: nfdv1alpha1.NodeFeatureSpec{
			Labels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "2"},
			Features: nfdv1alpha1.Features{
				Instances: map[string]nfdv1alpha1.InstanceFeatureSet{
					"nvidia.gpu": {Elements: []nfdv1alpha1.InstanceFeature{
						{Attributes: map[string]string{"index": "0", "memory": "81920", "product": "NVIDIA-A100-SXM4-80GB"}},
						{Attributes: map[string]string{"index": "1", "memory": "81920", "product": "NVIDIA-A100-SXM4-80GB"}},
					}},
				},
			},
		},
	}
	if _, err := api.NFD.NfdV1alpha1().NodeFeatures(master.Namespace).Create(ctx, nf, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating NodeFeature: %v", err)
	}
	rule := &nfdv1alpha1.NodeFeatureRule{
		ObjectMeta: metav1.ObjectMeta{Name: "large-gpus"},
		Spec: nfdv1alpha1.NodeFeatureRuleSpec{Rules: []nfdv1alpha1.Rule{{
			Name:   "gpus with at least 40 GiB",
			Labels: map[string]string{"example.com/large-gpu": "true"},
			MatchFeatures: nfdv1alpha1.FeatureMatcher{{
				Feature: "nvidia.gpu",
				MatchExpressions: &nfdv1alpha1.MatchExpressionSet{
					"memory": &nfdv1alpha1.MatchExpression{Op: nfdv1alpha1.MatchGt, Value: nfdv1alpha1.MatchValue{"40960"}},
				},
			}},
		}}},
	}
	if _, err := api.NFD.NfdV1alpha1().NodeFeatureRules().Create(ctx, rule, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating NodeFeatureRule: %v", err)
	}

	start := time.Now()
	want := map[string]string{
		"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
		"nvidia.com/gpu.count":   "2",
		"example.com/large-gpu":  "true",
	}
	if err := api.WaitNodeLabels(ctx, node, want); err != nil {
		t.Fatalf("labels from the NodeFeature and the NodeFeatureRule did not reach the node: %v", err)
	}
	t.Logf("NodeFeature and NodeFeatureRule labels on the node after %s", time.Since(start).Round(time.Millisecond))

	// Labels follow the NodeFeature: a removed label leaves the node.
	cur, err := api.NFD.NfdV1alpha1().NodeFeatures(master.Namespace).Get(ctx, nf.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting NodeFeature: %v", err)
	}
	delete(cur.Spec.Labels, "nvidia.com/gpu.count")
	if _, err := api.NFD.NfdV1alpha1().NodeFeatures(master.Namespace).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating NodeFeature: %v", err)
	}
	err = api.WaitNode(ctx, node, func(n *corev1.Node) (bool, string) {
		v, has := n.Labels["nvidia.com/gpu.count"]
		return !has, "nvidia.com/gpu.count=" + v
	})
	if err != nil {
		t.Fatalf("a label removed from the NodeFeature stayed on the node: %v", err)
	}
}
