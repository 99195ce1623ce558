package e2e

import (
	"context"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/test/harness"
	"github.com/featureplug/featureplug/test/manifests/render"
)

// secureRules are rules files for the RBAC test: a good one, and one the
// agent rejects (an Event), always with the same error (so the second
// rejection repeats the Event: a patch of its count).
const (
	secureGoodRules = "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n- name: gpu\n  devices: gpu\n  resource: example.com/gpu\n"
	secureBadRules  = "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRulez\nrules: []\n"
)

// TestSecureRBACExactlyAsUsed applies the shipped NodeFeature overlay
// (RBAC and admission policy included) to a real kube-apiserver and runs
// two agents as the shipped service account, each with a token bound to a
// pod on its node (and the pod's POD_NAME, POD_UID, POD_NAMESPACE, as the
// manifests pass them), through every code path that calls the API: the
// Node informer (a streaming watch-list; a third agent with client-go's
// WatchListClient gate off lists, as against an API server without
// streaming lists), the owner references (get the agent's Pod), a first
// publish (get NodeFeature: 404, then a server-side apply that creates it), a
// publish over an object an older featureplug wrote with update (get, the
// JSON patch that moves its fields to apply ownership, an apply that
// updates), and Events (a rejected rules file: create; the same rejection
// again: patch of its count). From kube-apiserver's request counters it
// derives the rights those requests needed and checks them against the
// shipped rules: no request was refused (401/403), and no shipped rule
// went unused but the ones secureFallbackRights names, with the reason.
func TestSecureRBACExactlyAsUsed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and featureplug")
	}
	api := harness.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*waitTimeout)
	defer cancel()
	objs, err := render.Kustomize(filepath.Join(build.root, "manifests", "overlays", "nodefeature"))
	if err != nil {
		t.Fatal(err)
	}
	secureApply(ctx, t, api, "overlays/nodefeature", objs)
	sa := secureOnly(t, objs, "ServiceAccount")
	ns := sa.GetNamespace()
	shipped := secureShippedRights(t, objs, ns, sa.GetName())

	const fresh, upgraded, listing = "rbac-fresh", "rbac-upgraded", "rbac-listing"
	idFresh := secureAgentOn(ctx, t, api, ns, sa.GetName(), fresh)
	idUpgraded := secureAgentOn(ctx, t, api, ns, sa.GetName(), upgraded)
	idListing := secureAgentOn(ctx, t, api, ns, sa.GetName(), listing)
	// The NodeFeature of "upgraded" as an older featureplug wrote it: with
	// create, field manager "featureplug", operation Update.
	node, err := api.Client.CoreV1().Nodes().Get(ctx, upgraded, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.NFD.NfdV1alpha1().NodeFeatures(ns).Create(ctx, &nfdv1alpha1.NodeFeature{
		ObjectMeta: metav1.ObjectMeta{
			Name: nodeFeatureName(upgraded), Namespace: ns,
			Labels:          map[string]string{nfdv1alpha1.NodeFeatureObjNodeNameLabel: upgraded, "app.kubernetes.io/managed-by": "featureplug"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: upgraded, UID: node.UID}},
		},
		Spec: nfdv1alpha1.NodeFeatureSpec{Labels: map[string]string{"nvidia.com/gpu.count": "0"}},
	}, metav1.CreateOptions{FieldManager: "featureplug"}); err != nil {
		t.Fatalf("creating an older featureplug's NodeFeature: %v", err)
	}

	// From here on only the agents send resource requests (the test reads
	// metrics only), so the counters' growth is theirs.
	before := secureRequestCounts(ctx, t, api)
	dir := shortTempDir(t)
	rules := secureWriteTemp(t, dir, "rules.yaml", secureGoodRules)
	agents := map[string]*agent{}
	for node, id := range map[string]secureAgentIdentity{fresh: idFresh, upgraded: idUpgraded} {
		agents[node] = secureStartAgent(t, agentSpec{
			Node: node, FakeNode: "dgx-h100", Publish: "nodefeature", Rules: rules,
			Kubeconfig: id.Kubeconfig, Namespace: ns,
		}, id.Env...)
	}
	// Only the Node informer's list fallback: no publishing.
	listingAgent := secureStartAgent(t, agentSpec{
		Node: listing, FakeNode: "dgx-h100", Publish: "none", Rules: rules,
		Kubeconfig: idListing.Kubeconfig, Namespace: ns,
	}, append(idListing.Env, "KUBE_FEATURE_WatchListClient=false")...)
	for node, a := range agents {
		a.waitMetric(t, "featureplug_publish_attempts_total", func(v float64) bool { return v >= 1 }, `result="ok"`)
		t.Logf("agent of %s published", node)
	}
	// Events: a rejected rules file, the good one again, the same rejection.
	a := agents[fresh]
	applied := a.metric(t, "featureplug_rule_reloads_total", `result="applied"`)
	writeFileAtomic(t, rules, []byte(secureBadRules))
	a.waitMetric(t, "featureplug_rule_errors_total", func(v float64) bool { return v >= 1 })
	writeFileAtomic(t, rules, []byte(secureGoodRules))
	a.waitMetric(t, "featureplug_rule_reloads_total", func(v float64) bool { return v > applied }, `result="applied"`)
	writeFileAtomic(t, rules, []byte(secureBadRules))
	a.waitMetric(t, "featureplug_rule_errors_total", func(v float64) bool { return v >= 2 })
	secureWaitRequests(ctx, t, api, before, "the Event and its repetition",
		secureRequestKey{Resource: "events", Verb: "POST", Code: "201"},
		secureRequestKey{Resource: "events", Verb: "PATCH", Code: "200"})
	// A watch is counted when it ends: stop the agents, then wait for it.
	agents[listing] = listingAgent
	for node, a := range agents {
		if err := a.Stop(); err != nil {
			t.Fatalf("stopping the agent of %s: %v", node, err)
		}
	}
	secureWaitRequests(ctx, t, api, before, "the Node watch and list",
		secureRequestKey{Resource: "nodes", Verb: "WATCH", Code: "200"},
		secureRequestKey{Resource: "nodes", Verb: "LIST", Code: "200"})

	after := secureRequestCounts(ctx, t, api)
	used := sets.New[string]()
	var seen []string
	for k, n := range after {
		if n-before[k] <= 0 {
			continue
		}
		seen = append(seen, k.String())
		if k.Code == "401" || k.Code == "403" {
			t.Errorf("refused: %s (%v times)", k, n-before[k])
			continue
		}
		for _, verb := range secureRBACVerbs(k) {
			used.Insert(secureRight(k.Group, k.Resource, k.Subresource, verb))
		}
	}
	sort.Strings(seen)
	t.Logf("the agents' requests: %s", strings.Join(seen, "; "))
	t.Logf("rights they needed: %v", sets.List(used))

	// Every right used is shipped (else the request was refused above),
	// and every shipped right was used, except the admission policy's
	// marker, which no request uses: the policy asks the authorizer about
	// it (TestSecureAdmissionSurvivesRenaming shows it is needed).
	marker := secureRight("featureplug.io", "agents", "", "publish-own-nodefeature")
	policy := secureOnly(t, objs, "ValidatingAdmissionPolicy")
	conds, _, _ := unstructured.NestedSlice(policy.Object, "spec", "matchConditions")
	var exprs []string
	for _, c := range conds {
		exprs = append(exprs, c.(map[string]any)["expression"].(string))
	}
	if joined := strings.Join(exprs, "\n"); !strings.Contains(joined, "group('featureplug.io').resource('agents')") ||
		!strings.Contains(joined, "check('publish-own-nodefeature')") {
		t.Errorf("the admission policy's match conditions %q do not ask for the marker right %s", exprs, marker)
	}
	if missing := used.Difference(shipped); missing.Len() > 0 {
		t.Errorf("rights used but not shipped: %v", sets.List(missing))
	}
	unused := shipped.Difference(used)
	unused.Delete(marker)
	for right, why := range secureFallbackRights {
		if unused.Has(right) {
			t.Logf("%s not used here: %s", right, why)
			unused.Delete(right)
		}
	}
	if unused.Len() > 0 {
		t.Errorf("shipped rights no request used: %v", sets.List(unused))
	}
	if !shipped.Has(marker) {
		t.Errorf("the shipped Role lacks the admission policy's marker right %s", marker)
	}
}

// secureFallbackRights are shipped rights that only a fallback path uses,
// which this test cannot bring about without refusing the agent something
// else; each with the reason.
var secureFallbackRights = map[string]string{
	secureRight("", "nodes", "", "get"): "the publisher reads the Node from the API server only while the Node " +
		"watch's cache does not hold it (before the watch's first list; cmd/internal/agent/nodecache.go)",
}

// secureRight names one RBAC permission.
func secureRight(group, resource, subresource, verb string) string {
	if subresource != "" {
		resource += "/" + subresource
	}
	if group == "" {
		group = "core"
	}
	return verb + " " + resource + "." + group
}

// secureRBACVerbs maps a request counter's verb to the RBAC verbs the
// request was authorized for. A server-side apply that creates the object
// (201) is also authorized as create.
func secureRBACVerbs(k secureRequestKey) []string {
	switch k.Verb {
	case "GET":
		return []string{"get"}
	case "LIST":
		return []string{"list"}
	case "WATCH", "WATCHLIST":
		return []string{"watch"}
	case "POST":
		return []string{"create"}
	case "PUT":
		return []string{"update"}
	case "PATCH":
		return []string{"patch"}
	case "APPLY":
		if k.Code == "201" {
			return []string{"patch", "create"}
		}
		return []string{"patch"}
	case "DELETE":
		return []string{"delete"}
	case "DELETECOLLECTION":
		return []string{"deletecollection"}
	}
	return []string{strings.ToLower(k.Verb)}
}

// secureShippedRights expands the rules of the Roles and ClusterRoles that
// the rendering binds to the service account ns/name into single rights,
// a rule with resourceNames into rights "... named N1,N2". Wildcards and
// nonResourceURLs fail the test: the shipped RBAC has none.
func secureShippedRights(t *testing.T, objs []*unstructured.Unstructured, ns, name string) sets.Set[string] {
	t.Helper()
	bound := sets.New[string]()
	for _, o := range objs {
		if o.GetKind() != "RoleBinding" && o.GetKind() != "ClusterRoleBinding" {
			continue
		}
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		for _, s := range subjects {
			m := s.(map[string]any)
			if m["kind"] == "ServiceAccount" && m["name"] == name && m["namespace"] == ns {
				kind, _, _ := unstructured.NestedString(o.Object, "roleRef", "kind")
				role, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
				bound.Insert(kind + "/" + o.GetNamespace() + "/" + role)
			}
		}
	}
	rights := sets.New[string]()
	for _, o := range objs {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			continue
		}
		if !bound.Has(o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()) {
			t.Errorf("%s %s is bound to no featureplug service account", o.GetKind(), o.GetName())
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
		for _, r := range rules {
			m := r.(map[string]any)
			str := func(k string) []string {
				v, _, _ := unstructured.NestedStringSlice(m, k)
				return v
			}
			if len(str("nonResourceURLs")) > 0 {
				t.Errorf("%s %s: rule %v: nonResourceURLs are not expected", o.GetKind(), o.GetName(), m)
			}
			named := ""
			if names := str("resourceNames"); len(names) > 0 {
				named = " named " + strings.Join(names, ",")
			}
			for _, g := range str("apiGroups") {
				for _, res := range str("resources") {
					for _, v := range str("verbs") {
						if g == "*" || res == "*" || v == "*" {
							t.Errorf("%s %s: wildcard in rule %v", o.GetKind(), o.GetName(), m)
						}
						resource, sub, _ := strings.Cut(res, "/")
						rights.Insert(secureRight(g, resource, sub, v) + named)
					}
				}
			}
		}
	}
	return rights
}

// secureWaitRequests waits until the API server has counted each of want
// (group, resource, verb and code) at least once more than in before.
func secureWaitRequests(ctx context.Context, t *testing.T, api *harness.APIServer, before map[secureRequestKey]float64, what string, want ...secureRequestKey) {
	t.Helper()
	if err := waitFor(ctx, func() (bool, string) {
		now := secureRequestCounts(ctx, t, api)
		var missing []string
		for _, w := range want {
			found := false
			for k, n := range now {
				match := k.Resource == w.Resource && k.Group == w.Group && k.Code == w.Code &&
					(k.Verb == w.Verb || (w.Verb == "WATCH" && k.Verb == "WATCHLIST"))
				found = found || (match && n > before[k])
			}
			if !found {
				missing = append(missing, w.String())
			}
		}
		return len(missing) == 0, "not yet counted: " + strings.Join(missing, ", ")
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
