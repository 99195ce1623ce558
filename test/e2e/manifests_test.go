package e2e

import (
	"context"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/featureplug/featureplug/test/harness"
	"github.com/featureplug/featureplug/test/manifests/render"
)

// TestManifestsOnAPIServer applies the features.d and NodeFeature overlays
// to a real kube-apiserver with server-side apply, then checks its admission
// policy with service-account tokens bound to pods on two nodes: each agent
// may write its own node's NodeFeature and not the other's.
func TestManifestsOnAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	api := harness.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitTimeout)
	defer cancel()
	// features-d first: the nodefeature overlay applied over it is what the
	// admission-policy checks below run against.
	var objs []*unstructured.Unstructured
	for _, overlay := range []string{"features-d", "nodefeature"} {
		var err error
		objs, err = render.Kustomize(filepath.Join(build.root, "manifests", "overlays", overlay))
		if err != nil {
			t.Fatalf("rendering the %s overlay: %v", overlay, err)
		}
		secureApply(ctx, t, api, "the "+overlay+" overlay", objs)
	}
	secureCheckOwnNodeFeature(ctx, t, api, objs, "policy-node-a", "policy-node-b")
}
