package e2e

import (
	"context"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/featureplug/featureplug/test/harness"
	"github.com/featureplug/featureplug/test/manifests/render"
)

// secureDRAFallbackRights are rights components/dra ships that this test
// cannot bring about, each with the reason.
var secureDRAFallbackRights = map[string]string{
	secureRight("resource.k8s.io", "resourceslices", "", "update"): "the node's ResourceSlice is updated only when its content changes " +
		"(a rules edit, a health change: TestDRASlice)",
	secureRight("resource.k8s.io", "resourceslices", "", "delete"): "only slices of an earlier run that the node no longer needs are deleted " +
		"(TestDRARulesEditMovesResourceFromDevicePlugin)",
}

// TestSecureDRARBACExactlyAsUsed applies overlays/nodefeature with
// components/dra to a real kube-apiserver and runs the agent with --serve
// dra as the shipped service account, with a token bound to its pod on the
// node, through every code path of the DRA driver that calls the API: the
// node's ResourceSlice (list and watch of its own, create), and a prepare
// and unprepare over the agent's DRA socket of a claim allocated one of the
// node's devices (get the claim, server-side apply of its status.devices).
// From kube-apiserver's request counters (the agent's requests only) it
// derives the resource.k8s.io rights those requests needed, plus the
// associated-node:patch of resourceclaims/driver the API server checks for
// a status.devices change, and compares them with the rights components/dra
// adds: no request refused, none of those rights unused but the ones
// secureDRAFallbackRights names.
func TestSecureDRARBACExactlyAsUsed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and featureplug")
	}
	api := harness.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*waitTimeout)
	defer cancel()
	objs := secureApplyDRA(ctx, t, api)
	sa := secureOnly(t, objs, "ServiceAccount")
	ns := sa.GetNamespace()
	base, err := render.Kustomize(filepath.Join(build.root, "manifests", "overlays", "nodefeature"))
	if err != nil {
		t.Fatal(err)
	}
	shipped := secureShippedRights(t, objs, ns, sa.GetName()).Difference(secureShippedRights(t, base, ns, sa.GetName()))

	const node = "rbac-dra"
	id := secureAgentOn(ctx, t, api, ns, sa.GetName(), node)
	podUID := ""
	for _, e := range id.Env {
		if v, ok := strings.CutPrefix(e, "POD_UID="); ok {
			podUID = v
		}
	}
	dir := shortTempDir(t)
	rules := filepath.Join(dir, "rules.yaml")
	writeFileAtomic(t, rules, []byte(draE2ERules("")))
	pluginDir := filepath.Join(dir, "dra")
	gpu := draE2EDeviceName(draE2EGPUs(t)[1].UUID) // an A100, served through DRA

	before := secureRequestCounts(ctx, t, api)
	a := secureStartAgent(t, agentSpec{
		Node: node, FakeNode: filepath.Join(build.root, "test", "e2e", draE2EFakeNode), Rules: rules,
		Kubeconfig: id.Kubeconfig, Namespace: ns,
		Extra: []string{"--serve", "dra", "--kubelet-registry-dir", filepath.Join(dir, "reg"), "--dra-plugin-dir", pluginDir,
			"--cdi-spec-dir", filepath.Join(dir, "cdi"), "--cdi-kind", draE2ECDIKind, "--rediscover-interval", "1h"},
	}, id.Env...)
	a.waitMetric(t, "featureplug_dra_slice_writes_total", func(v float64) bool { return v >= 1 })

	// The claim as the scheduler would allocate it, written as the admin
	// between two readings of the counters.
	paused := secureRequestCounts(ctx, t, api)
	claim, err := api.Client.ResourceV1().ResourceClaims(draE2ENamespace).Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "rbac-claim"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: draE2EAnyClass},
		}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: draE2EDriver, Pool: node, Device: gpu,
		}}},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
		}}}}},
	}
	if claim, err = api.Client.ResourceV1().ResourceClaims(draE2ENamespace).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("allocating the claim: %v", err)
	}
	resumed := secureRequestCounts(ctx, t, api)

	// The kubelet's calls, over the agent's own DRA socket.
	conn, err := grpc.NewClient("unix:"+filepath.Join(pluginDir, "dra-"+podUID+".sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	dra := drapbv1.NewDRAPluginClient(conn)
	ref := &drapbv1.Claim{Namespace: draE2ENamespace, Name: claim.Name, Uid: string(claim.UID)}
	prep, err := dra.NodePrepareResources(ctx, &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{ref}})
	if err != nil {
		t.Fatal(err)
	}
	if r := prep.GetClaims()[string(claim.UID)]; r.GetError() != "" || len(r.GetDevices()) != 1 {
		t.Fatalf("prepare as the shipped service account: %v", r)
	}
	if v := a.metric(t, "featureplug_dra_claim_status_writes_total", `result="ok"`); v != 1 {
		t.Errorf("featureplug_dra_claim_status_writes_total{result=ok} = %v, want 1", v)
	}
	if _, err := dra.NodeUnprepareResources(ctx, &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{ref}}); err != nil {
		t.Fatal(err)
	}
	// A watch is counted when it ends.
	if err := a.Stop(); err != nil {
		t.Fatalf("stopping the agent: %v", err)
	}
	secureWaitRequests(ctx, t, api, resumed, "the claim read and its status write",
		secureRequestKey{Group: "resource.k8s.io", Resource: "resourceclaims", Verb: "GET", Code: "200"},
		secureRequestKey{Group: "resource.k8s.io", Resource: "resourceclaims", Verb: "APPLY", Code: "200"})
	secureWaitRequests(ctx, t, api, before, "the slice watch",
		secureRequestKey{Group: "resource.k8s.io", Resource: "resourceslices", Verb: "WATCH", Code: "200"})
	after := secureRequestCounts(ctx, t, api)

	used := sets.New[string]()
	var seen []string
	for k, n := range after {
		grew := paused[k] - before[k] + n - resumed[k]
		if grew <= 0 {
			continue
		}
		seen = append(seen, k.String())
		if k.Code == "401" || k.Code == "403" {
			t.Errorf("refused: %s (%v times)", k, grew)
			continue
		}
		if k.Group != "resource.k8s.io" {
			continue // TestSecureRBACExactlyAsUsed checks the rest
		}
		for _, verb := range secureRBACVerbs(k) {
			used.Insert(secureRight(k.Group, k.Resource, k.Subresource, verb))
		}
		if k.Resource == "resourceclaims" && k.Subresource == "status" && (k.Verb == "APPLY" || k.Verb == "PATCH") {
			// The API server's second check of a status.devices change
			// (1.36+), no request of its own.
			used.Insert(secureRight(k.Group, "resourceclaims", "driver", "associated-node:patch") + " named " + draE2EDriver)
		}
	}
	sort.Strings(seen)
	t.Logf("the agent's requests: %s", strings.Join(seen, "; "))
	t.Logf("resource.k8s.io rights they needed: %v", sets.List(used))
	if missing := used.Difference(shipped); missing.Len() > 0 {
		t.Errorf("rights used but not added by components/dra: %v", sets.List(missing))
	}
	unused := shipped.Difference(used)
	for right, why := range secureDRAFallbackRights {
		if unused.Has(right) {
			t.Logf("%s not used here: %s", right, why)
			unused.Delete(right)
		}
	}
	if unused.Len() > 0 {
		t.Errorf("rights components/dra adds that no request used: %v", sets.List(unused))
	}
}
