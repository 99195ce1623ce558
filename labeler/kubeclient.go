package labeler

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
)

// The API clients the NodeFeature publisher takes are these narrow
// interfaces, not client-go's or NFD's clientsets: importing a clientset
// links the typed clients and scheme of every built-in API group into the
// agent (see cmd/internal/kube and docs/performance.md).

// NodeFeatures is the part of a NodeFeature client of one namespace the
// publisher uses. NFD's generated NodeFeatureInterface and
// cmd/internal/kube's client satisfy it.
type NodeFeatures interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*nfdv1alpha1.NodeFeature, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*nfdv1alpha1.NodeFeature, error)
}

// NFDClient returns the NodeFeature client of a namespace.
type NFDClient func(namespace string) NodeFeatures

// NFDClientOf adapts a typed client's NodeFeatures method, such as
// nfdClientset.NfdV1alpha1().NodeFeatures, to an NFDClient.
func NFDClientOf[T NodeFeatures](nodeFeatures func(namespace string) T) NFDClient {
	return func(namespace string) NodeFeatures { return nodeFeatures(namespace) }
}

// NodeGetter reads a Node (the publisher needs its UID for the owner
// reference). client-go's typed NodeInterface satisfies it.
type NodeGetter interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
}
