package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	nfdclient "sigs.k8s.io/node-feature-discovery/api/generated/clientset/versioned"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/test/harness"
	"github.com/featureplug/featureplug/test/manifests/render"
)

// TestManifestsOnAPIServer applies the features.d and NodeFeature overlays
// to a real kube-apiserver with server-side apply, then checks its admission policy
// with service-account tokens bound to pods on two nodes: each agent may
// write its own node's NodeFeature and not the other's.
func TestManifestsOnAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	api := harness.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitTimeout)
	defer cancel()
	dyn, err := dynamic.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	// features-d first: the nodefeature overlay applied over it is what the
	// admission-policy checks below run against.
	for _, overlay := range []string{"features-d", "nodefeature"} {
		objs, err := render.Kustomize(filepath.Join(build.root, "manifests", "overlays", overlay))
		if err != nil {
			t.Fatalf("rendering the %s overlay: %v", overlay, err)
		}
		for _, o := range objs {
			gvk := o.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Fatalf("%s overlay: %s %s: %v", overlay, gvk, o.GetName(), err)
			}
			data, err := json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
			}
			if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "featureplug-e2e"}); err != nil {
				t.Fatalf("%s overlay: server-side apply of %s %s/%s: %v", overlay, gvk.Kind, o.GetNamespace(), o.GetName(), err)
			}
		}
		t.Logf("applied %d objects of the %s overlay with server-side apply", len(objs), overlay)
	}

	const ns, sa = "featureplug", "featureplug"
	nodes := []string{"policy-node-a", "policy-node-b"}
	clients := map[string]nfdclient.Interface{}
	for _, node := range nodes {
		if _, err := api.CreateNode(ctx, node); err != nil {
			t.Fatal(err)
		}
		pod, err := api.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "featureplug-" + node, Namespace: ns},
			Spec: corev1.PodSpec{
				NodeName:           node,
				ServiceAccountName: sa,
				Containers:         []corev1.Container{{Name: "agent", Image: "featureplug:e2e"}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating the agent pod on %s: %v", node, err)
		}
		tr, err := api.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{
				BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("requesting a token bound to pod %s: %v", pod.Name, err)
		}
		cfg := rest.AnonymousClientConfig(api.Config)
		cfg.BearerToken = tr.Status.Token
		if clients[node], err = nfdclient.NewForConfig(cfg); err != nil {
			t.Fatal(err)
		}
	}

	nodeFeature := func(node string) *nfdv1alpha1.NodeFeature {
		return &nfdv1alpha1.NodeFeature{ObjectMeta: metav1.ObjectMeta{
			Name: nodeFeatureName(node), Namespace: ns,
			Labels: map[string]string{"nfd.node.kubernetes.io/node-name": node},
		}}
	}
	a, b := nodes[0], nodes[1]
	// The policy takes effect once the API server has loaded it: wait
	// until the other node's object is refused.
	var refused error
	if err := waitFor(ctx, func() (bool, string) {
		_, refused = clients[a].NfdV1alpha1().NodeFeatures(ns).Create(ctx, nodeFeature(b), metav1.CreateOptions{})
		if refused == nil {
			_ = api.NFD.NfdV1alpha1().NodeFeatures(ns).Delete(ctx, nodeFeatureName(b), metav1.DeleteOptions{})
			return false, "the agent of " + a + " created the NodeFeature of " + b
		}
		return refusedByPolicy(refused), fmt.Sprint(refused)
	}); err != nil {
		t.Fatalf("the admission policy never refused another node's NodeFeature: %v", err)
	}
	t.Logf("refused: %v", refused)
	for _, node := range nodes {
		nfs := clients[node].NfdV1alpha1().NodeFeatures(ns)
		created, err := nfs.Create(ctx, nodeFeature(node), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the agent of %s creating its own NodeFeature: %v", node, err)
		}
		created.Spec.Labels = map[string]string{"nvidia.com/gpu.count": "8"}
		if _, err := nfs.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Errorf("the agent of %s updating its own NodeFeature: %v", node, err)
		}
	}
	other, err := clients[b].NfdV1alpha1().NodeFeatures(ns).Get(ctx, nodeFeatureName(a), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other.Spec.Labels = map[string]string{"nvidia.com/gpu.count": "0"}
	if _, err := clients[b].NfdV1alpha1().NodeFeatures(ns).Update(ctx, other, metav1.UpdateOptions{}); !refusedByPolicy(err) {
		t.Errorf("the agent of %s updating the NodeFeature of %s: got %v, want it refused by the admission policy", b, a, err)
	}
}

// refusedByPolicy reports whether err is the shipped admission policy's
// refusal (and not, say, RBAC's).
func refusedByPolicy(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'featureplug-own-nodefeature'")
}
