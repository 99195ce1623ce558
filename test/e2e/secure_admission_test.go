package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	nfdclient "sigs.k8s.io/node-feature-discovery/api/generated/clientset/versioned"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/featureplug/featureplug/test/harness"
	"github.com/featureplug/featureplug/test/manifests/render"
)

// TestSecureAdmissionSurvivesRenaming applies renderings that give the
// agent's service account another namespace or name (a kustomize
// namespace override of overlays/nodefeature; the chart with
// namespaceOverride and fullnameOverride) to a real kube-apiserver and
// checks the per-node admission policy with two nodes' pod-bound tokens:
// each agent writes its own NodeFeature, never the other's. Then it takes
// the marker right out of the agent's Role and shows the policy no longer
// applies: the marker is what makes it hold.
func TestSecureAdmissionSurvivesRenaming(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	api := harness.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*waitTimeout)
	defer cancel()
	for _, tc := range []struct {
		name           string
		render         func(t *testing.T) []*unstructured.Unstructured
		wantNS, wantSA string
	}{
		{
			name:   "kustomize namespace override",
			render: func(t *testing.T) []*unstructured.Unstructured { return secureKustomizeInNamespace(t, "gpu-system") },
			wantNS: "gpu-system", wantSA: "featureplug",
		},
		{
			name: "helm namespaceOverride and fullnameOverride",
			render: func(t *testing.T) []*unstructured.Unstructured {
				objs, err := render.Helm(filepath.Join(build.root, "manifests", "helm", "featureplug"), "gpu", "default",
					map[string]any{"namespaceOverride": "gpu-agents", "fullnameOverride": "gpu-agent", "createNamespace": true})
				if err != nil {
					t.Fatal(err)
				}
				return objs
			},
			wantNS: "gpu-agents", wantSA: "gpu-agent",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := tc.render(t)
			sa := secureOnly(t, objs, "ServiceAccount")
			if sa.GetNamespace() != tc.wantNS || sa.GetName() != tc.wantSA {
				t.Fatalf("service account %s/%s, want %s/%s", sa.GetNamespace(), sa.GetName(), tc.wantNS, tc.wantSA)
			}
			secureApply(ctx, t, api, tc.name, objs)
			prefix := strings.ReplaceAll(tc.wantNS, "-", "")
			a, b := prefix+"-node-a", prefix+"-node-b"
			clients := secureCheckOwnNodeFeature(ctx, t, api, objs, a, b)

			// Without the marker right the policy does not recognize the
			// agent: the other node's NodeFeature gets through.
			role := secureOnly(t, objs, "Role").DeepCopy()
			rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
			var kept []any
			for _, r := range rules {
				if groups, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "apiGroups"); len(groups) != 1 || groups[0] != "featureplug.io" {
					kept = append(kept, r)
				}
			}
			if len(kept) != len(rules)-1 {
				t.Fatalf("Role %s: %d rules, want exactly one marker rule among them", role.GetName(), len(rules))
			}
			if err := unstructured.SetNestedSlice(role.Object, kept, "rules"); err != nil {
				t.Fatal(err)
			}
			secureApply(ctx, t, api, "the Role without the marker right", []*unstructured.Unstructured{role})
			ns := role.GetNamespace()
			if err := waitFor(ctx, func() (bool, string) {
				_, err := clients[a].NfdV1alpha1().NodeFeatures(ns).Create(ctx, secureNodeFeature(ns, "other-"+b, b), metav1.CreateOptions{})
				return err == nil, fmt.Sprint(err)
			}); err != nil {
				t.Fatalf("without the marker right the policy still refuses the agent: %v", err)
			}

			// The next rendering's policy is checked alone.
			for _, kind := range []string{"ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"} {
				o := secureOnly(t, objs, kind)
				var err error
				if kind == "ValidatingAdmissionPolicy" {
					err = api.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, o.GetName(), metav1.DeleteOptions{})
				} else {
					err = api.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, o.GetName(), metav1.DeleteOptions{})
				}
				if err != nil {
					t.Fatalf("deleting %s %s: %v", kind, o.GetName(), err)
				}
			}
		})
	}
}

// secureKustomizeInNamespace renders overlays/nodefeature from a user's
// kustomization that moves it into namespace ns.
func secureKustomizeInNamespace(t *testing.T, ns string) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	overlay, err := filepath.Rel(dir, filepath.Join(build.root, "manifests", "overlays", "nodefeature"))
	if err != nil {
		t.Fatal(err)
	}
	k, err := yaml.Marshal(map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"namespace":  ns,
		"resources":  []string{filepath.ToSlash(overlay)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), k, 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := render.Kustomize(dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// secureNodeFeature is a NodeFeature called name in ns labelled for node.
func secureNodeFeature(ns, name, node string) *nfdv1alpha1.NodeFeature {
	return &nfdv1alpha1.NodeFeature{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: ns,
		Labels: map[string]string{nfdv1alpha1.NodeFeatureObjNodeNameLabel: node},
	}}
}

// secureCheckOwnNodeFeature checks a rendering's admission policy, applied
// to the API server, with the tokens of agents on nodes a and b (created
// here): each may create and update its own node's NodeFeature; neither
// may create, update or take over (relabel) the other's. It returns the
// agents' clients.
func secureCheckOwnNodeFeature(ctx context.Context, t *testing.T, api *harness.APIServer, objs []*unstructured.Unstructured, a, b string) map[string]nfdclient.Interface {
	t.Helper()
	sa := secureOnly(t, objs, "ServiceAccount")
	ns := secureOnly(t, objs, "Role").GetNamespace() // where the NodeFeatures are written
	policy := secureOnly(t, objs, "ValidatingAdmissionPolicy").GetName()
	refusedByPolicy := func(err error) bool {
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'")
	}
	clients := map[string]nfdclient.Interface{}
	for _, node := range []string{a, b} {
		id := secureAgentOn(ctx, t, api, sa.GetNamespace(), sa.GetName(), node)
		c, err := nfdclient.NewForConfig(id.Config)
		if err != nil {
			t.Fatal(err)
		}
		clients[node] = c
	}
	// The policy takes effect once the API server has loaded it: wait until
	// the other node's object is refused.
	var refused error
	if err := waitFor(ctx, func() (bool, string) {
		_, refused = clients[a].NfdV1alpha1().NodeFeatures(ns).Create(ctx, secureNodeFeature(ns, nodeFeatureName(b), b), metav1.CreateOptions{})
		if refused == nil {
			_ = api.NFD.NfdV1alpha1().NodeFeatures(ns).Delete(ctx, nodeFeatureName(b), metav1.DeleteOptions{})
			return false, "the agent of " + a + " created the NodeFeature of " + b
		}
		return refusedByPolicy(refused), fmt.Sprint(refused)
	}); err != nil {
		t.Fatalf("the admission policy %s never refused another node's NodeFeature: %v", policy, err)
	}
	t.Logf("refused: %v", refused)
	// The agent's Role grants create and patch (server-side apply), not
	// update: updates here are merge patches.
	patch := func(node, name, body string) error {
		_, err := clients[node].NfdV1alpha1().NodeFeatures(ns).Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	for _, node := range []string{a, b} {
		if _, err := clients[node].NfdV1alpha1().NodeFeatures(ns).Create(ctx, secureNodeFeature(ns, nodeFeatureName(node), node), metav1.CreateOptions{}); err != nil {
			t.Fatalf("the agent of %s creating its own NodeFeature in %s: %v", node, ns, err)
		}
		if err := patch(node, nodeFeatureName(node), `{"spec":{"labels":{"nvidia.com/gpu.count":"8"}}}`); err != nil {
			t.Errorf("the agent of %s updating its own NodeFeature: %v", node, err)
		}
	}
	if err := patch(b, nodeFeatureName(a), `{"spec":{"labels":{"nvidia.com/gpu.count":"0"}}}`); !refusedByPolicy(err) {
		t.Errorf("the agent of %s updating the NodeFeature of %s: got %v, want it refused by %s", b, a, err, policy)
	}
	takeover := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, nfdv1alpha1.NodeFeatureObjNodeNameLabel, b)
	if err := patch(b, nodeFeatureName(a), takeover); !refusedByPolicy(err) {
		t.Errorf("the agent of %s relabelling the NodeFeature of %s as its own: got %v, want it refused by %s", b, a, err, policy)
	}
	return clients
}
