package e2e

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/featureplug/featureplug/test/harness"
)

// draE2EAdminLabel is the namespace label without which the API server
// refuses an admin-access claim.
const draE2EAdminLabel = "resource.kubernetes.io/admin-access"

// draE2EAllClaim is a claim for every device of draE2EAnyClass on a node,
// with admin access or not.
func draE2EAllClaim(name string, admin bool) *resourceapi.ResourceClaim {
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: draE2EAnyClass, AllocationMode: resourceapi.DeviceAllocationModeAll}
	if admin {
		req.AdminAccess = ptr.To(true)
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpus", Exactly: req,
		}}}},
	}
}

// draE2EStatusData is a status.devices entry's data as featureplug writes
// it.
type draE2EStatusData struct {
	UUID        string `json:"uuid"`
	PCIBusID    string `json:"pciBusID"`
	ProductName string `json:"productName"`
	Resource    string `json:"resource"`
}

// TestDRAAdminAccessAndClaimStatus runs featureplug with --serve dra as
// the service account of overlays/nodefeature with components/dra (RBAC
// included), with a token bound to its pod on the node, next to the real
// kube-scheduler and the kubelet's DRA manager, on the six-GPU fake node:
//   - a workload's claim takes every device of the node; another claim then
//     finds none (Pending);
//   - an admin-access claim for every device (as dcgm-exporter makes) is
//     allocated them all anyway and prepared with the same CDI IDs, while
//     the API server refuses such a claim in a namespace without the
//     admin-access label;
//   - both claims' status.devices, written by the agent under the shipped
//     rights, hold each device's UUID, PCI bus ID, product and resource;
//   - unpreparing the admin claim leaves the workload's claim prepared and
//     its allocation and status as they were.
func TestDRAAdminAccessAndClaimStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, kube-scheduler and featureplug")
	}
	api := harness.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*waitTimeout)
	defer cancel()
	sa := secureOnly(t, secureApplyDRA(ctx, t, api), "ServiceAccount")
	draE2EEnsureServiceAccount(t, api)

	n := draE2EStartNode(t, api, "dra-admin", draE2ERules(""))
	id := secureAgentOn(ctx, t, api, sa.GetNamespace(), sa.GetName(), n.name)
	spec := n.draE2EAgentSpec("dra", "")
	spec.Kubeconfig, spec.Namespace = id.Kubeconfig, sa.GetNamespace()
	n.agent = secureStartAgent(t, spec, id.Env...)
	n.draE2EWaitRegistered(t)
	n.draE2EWaitSlice(t, map[string]int{draE2EA100: 3, draE2EOther: 2, draE2EMIG: 2})

	// Every device of the node, by slice name, with its UUID and GPU.
	type device struct{ uuid, pciBusID, product string }
	devices := map[string]device{}
	for _, g := range draE2EGPUs(t) {
		if len(g.MIG) == 0 {
			devices[draE2EDeviceName(g.UUID)] = device{g.UUID, g.PCIBusID, g.Product}
		}
		for _, m := range g.MIG {
			devices[draE2EDeviceName(m.UUID)] = device{m.UUID, g.PCIBusID, g.Product}
		}
	}
	draE2ECreateAnyClass(t, api)
	harness.StartScheduler(t, api)

	// Admin access is for namespaces labelled for it.
	if _, err := api.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dra-unlabelled"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refused := draE2EAllClaim("admin-refused", true)
	if _, err := api.Client.ResourceV1().ResourceClaims("dra-unlabelled").Create(ctx, refused, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), draE2EAdminLabel) {
		t.Errorf("an admin-access claim in a namespace without %s: %v, want it refused", draE2EAdminLabel, err)
	}
	label, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{draE2EAdminLabel: "true"}}})
	if _, err := api.Client.CoreV1().Namespaces().Patch(ctx, draE2ENamespace, types.MergePatchType, label, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// The workload takes the whole node.
	draE2ECreateClaim(t, api, draE2EAllClaim("workload", false))
	workRes := draE2EResults(t, api, "workload")
	if len(workRes) != len(devices) {
		t.Fatalf("the workload's claim got %d devices, want all %d of the node", len(workRes), len(devices))
	}
	workPod := draE2EWaitPod(t, api, "pod-workload", "bound", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
	workIDs, err := n.kubelet.PreparePod(ctx, workPod)
	if err != nil {
		t.Fatal(err)
	}
	draE2ECreateClaim(t, api, draE2EClaim("one-more", draE2EAttr("type")+` == "gpu"`))
	draE2EWaitUnschedulable(t, api, "one-more")

	// The admin claim gets every device all the same.
	draE2ECreateClaim(t, api, draE2EAllClaim("admin", true))
	adminRes := draE2EResults(t, api, "admin")
	if len(adminRes) != len(devices) {
		t.Fatalf("the admin-access claim got %d devices on a full node, want all %d", len(adminRes), len(devices))
	}
	for _, r := range adminRes {
		if !ptr.Deref(r.AdminAccess, false) {
			t.Errorf("admin-access claim: device %s allocated without admin access", r.Device)
		}
	}
	adminPod := draE2EWaitPod(t, api, "pod-admin", "bound", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
	adminIDs, err := n.kubelet.PreparePod(ctx, adminPod)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := slices.Sorted(slices.Values(adminIDs["main"])), slices.Sorted(slices.Values(workIDs["main"])); len(got) != len(devices) || !slices.Equal(got, want) {
		t.Errorf("the admin-access claim was prepared as CDI IDs %v, want the node's %d devices' %v", got, len(devices), want)
	}

	// status.devices of both claims.
	checkStatus := func(claim string) *resourceapi.ResourceClaim {
		t.Helper()
		c, err := api.Client.ResourceV1().ResourceClaims(draE2ENamespace).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Status.Devices) != len(devices) {
			t.Errorf("claim %s: %d status.devices, want %d", claim, len(c.Status.Devices), len(devices))
		}
		for _, d := range c.Status.Devices {
			want, ok := devices[d.Device]
			var data draE2EStatusData
			if d.Data != nil {
				if err := json.Unmarshal(d.Data.Raw, &data); err != nil {
					t.Errorf("claim %s: device %s: data %s: %v", claim, d.Device, d.Data.Raw, err)
				}
			}
			if !ok || d.Driver != draE2EDriver || d.Pool != n.name || data.UUID != want.uuid || data.PCIBusID != want.pciBusID ||
				data.ProductName != want.product || data.Resource == "" {
				t.Errorf("claim %s: status.devices entry %s/%s/%s data %+v, want UUID %s, PCI bus ID %s, product %q and a resource",
					claim, d.Driver, d.Pool, d.Device, data, want.uuid, want.pciBusID, want.product)
			}
		}
		return c
	}
	workBefore := checkStatus("workload")
	checkStatus("admin")
	if v := n.agent.metric(t, "featureplug_dra_claim_status_writes_total", `result="ok"`); v != 2 {
		t.Errorf("featureplug_dra_claim_status_writes_total{result=ok} = %v, want 2", v)
	}
	if v := n.agent.metric(t, "featureplug_dra_claim_status_writes_total", `result="error"`); v != 0 {
		t.Errorf("featureplug_dra_claim_status_writes_total{result=error} = %v, want 0", v)
	}

	// The admin claim leaves; the workload keeps everything.
	if err := n.kubelet.UnpreparePod(ctx, adminPod); err != nil {
		t.Fatal(err)
	}
	if v := n.agent.metric(t, "featureplug_dra_prepared_claims"); v != 1 {
		t.Errorf("featureplug_dra_prepared_claims = %v after the admin claim's unprepare, want 1 (the workload's)", v)
	}
	workAfter := checkStatus("workload")
	if !reflect.DeepEqual(workAfter.Status.Allocation, workBefore.Status.Allocation) {
		t.Errorf("the workload's allocation changed: %+v, was %+v", workAfter.Status.Allocation, workBefore.Status.Allocation)
	}
	again, err := n.kubelet.PreparePod(ctx, workPod)
	if err != nil || !slices.Equal(again["main"], workIDs["main"]) {
		t.Errorf("the workload's claim prepared again: %v (err %v), want its CDI IDs %v from the checkpoint", again["main"], err, workIDs["main"])
	}
}
