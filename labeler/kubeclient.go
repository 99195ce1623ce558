package labeler

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
)

// The API clients the NodeFeature publisher takes are these narrow
// interfaces, not client-go's or NFD's clientsets: importing a clientset
// links the typed clients and scheme of every built-in API group into the
// agent (see cmd/internal/kube and docs/performance.md).

// NodeFeatures is the part of a NodeFeature client of one namespace ("":
// every namespace) featureplug uses: the publisher reads and patches its
// NodeFeature, `featureplug rules diff` lists them. NFD's generated
// NodeFeatureInterface and the agent's API client satisfy it.
type NodeFeatures interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*nfdv1alpha1.NodeFeature, error)
	List(ctx context.Context, opts metav1.ListOptions) (*nfdv1alpha1.NodeFeatureList, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*nfdv1alpha1.NodeFeature, error)
}

// NFDClient returns the NodeFeature client of a namespace.
type NFDClient func(namespace string) NodeFeatures

// NFDClientOf adapts a typed client's NodeFeatures method, such as
// nfdClientset.NfdV1alpha1().NodeFeatures, to an NFDClient.
func NFDClientOf[T NodeFeatures](nodeFeatures func(namespace string) T) NFDClient {
	return func(namespace string) NodeFeatures { return nodeFeatures(namespace) }
}
