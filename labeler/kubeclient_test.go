package labeler

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	nfdfake "sigs.k8s.io/node-feature-discovery/api/generated/clientset/versioned/fake"
)

// nfdOf and nodesOf hand the publisher the fake clientsets' typed clients
// (NodeFeatureConfig takes narrow interfaces, see kubeclient.go).
func nfdOf(cs *nfdfake.Clientset) NFDClient { return NFDClientOf(cs.NfdV1alpha1().NodeFeatures) }

func nodesOf(cs *kubefake.Clientset, name string) func(context.Context) (*corev1.Node, error) {
	return func(ctx context.Context) (*corev1.Node, error) {
		return cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}
}
