package agent

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/featureplug/featureplug/cmd/internal/kube"
	"github.com/featureplug/featureplug/labeler"
)

// cachedNodes answers the publisher's reads of the agent's Node (for the
// NodeFeature's owner reference) from the node watch's cache, and only
// asks the API server while the cache does not hold the Node (before the
// watch's first list, or without one). At 1,000 agents started together
// that is 1,000 quorum reads of Nodes fewer (issue 18, docs/scale.md).
type cachedNodes struct {
	a   *Agent
	api kube.Nodes
}

var _ labeler.NodeGetter = cachedNodes{}

// Get implements labeler.NodeGetter.
func (c cachedNodes) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error) {
	if n, ok := c.a.nodes.node(); ok && n.Name == name && n.UID != "" {
		return n.DeepCopy(), nil
	}
	return c.api.Get(ctx, name, opts)
}
