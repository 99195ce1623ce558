package dra

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// nodeStatusBody decodes a status apply body.
func nodeStatusBody(t *testing.T, p nodePatch) claimStatusApply {
	t.Helper()
	var body claimStatusApply
	if err := json.Unmarshal(p.data, &body); err != nil {
		t.Fatalf("status patch body %s: %v", p.data, err)
	}
	return body
}

// TestNodePrepareWritesClaimStatus: each prepared claim's status.devices
// is written by server-side apply of the status subresource, as field
// manager gpu.featureplug.io with force, for the claim's UID: one entry
// per device of this driver (not the NIC's), with the share ID, the GPU
// or MIG UUID, the physical GPU's PCI bus ID and product, the MIG profile
// and the resource the rules gave. A claim answered from the checkpoint is
// written again with the same body.
func TestNodePrepareWritesClaimStatus(t *testing.T) {
	claims := &nodeClaims{}
	a := nodeClaim("ns1", "claim-a", "uid-a",
		nodeOurs("gpu", "gpu-0000"),
		nodeResult{request: "mig", driver: DriverName, pool: nodeTestNode, device: "mig-1111", share: "share-1"},
		nodeResult{request: "nic", driver: "nic.example.com", pool: nodeTestNode, device: "eth0"})
	claims.add(a)
	e := newNodeEnv(t, "", claims, nodeTable).start()
	c := e.v1()

	if r := e.prepare(c, nodeClaimRef(a))["uid-a"]; r.GetError() != "" || len(r.GetDevices()) != 2 {
		t.Fatalf("prepare = %v", r)
	}
	patches := claims.patchCalls()
	if len(patches) != 1 {
		t.Fatalf("%d patches, want 1 status write: %+v", len(patches), patches)
	}
	p := patches[0]
	if p.namespace != "ns1" || p.name != "claim-a" || p.pt != types.ApplyPatchType || !slices.Equal(p.subresources, []string{"status"}) ||
		p.opts.FieldManager != DriverName || !ptr.Deref(p.opts.Force, false) {
		t.Errorf("status write %s/%s %s %v field manager %q force %v, want ns1/claim-a apply [status] %s force",
			p.namespace, p.name, p.pt, p.subresources, p.opts.FieldManager, p.opts.Force, DriverName)
	}
	body := nodeStatusBody(t, p)
	if body.APIVersion != "resource.k8s.io/v1" || body.Kind != "ResourceClaim" || body.Metadata.UID != "uid-a" ||
		body.Metadata.Name != "claim-a" || body.Metadata.Namespace != "ns1" {
		t.Errorf("status body names %s %s %+v", body.APIVersion, body.Kind, body.Metadata)
	}
	want := []deviceStatusApply{
		{Driver: DriverName, Pool: nodeTestNode, Device: "gpu-0000",
			Data: &DeviceStatusData{UUID: "GPU-0000", PCIBusID: "0000:07:00.0", ProductName: "NVIDIA A100-SXM4-80GB", Resource: "example.com/a100"}},
		{Driver: DriverName, Pool: nodeTestNode, Device: "mig-1111", ShareID: "share-1",
			Data: &DeviceStatusData{UUID: "MIG-1111", PCIBusID: "0000:0f:00.0", ProductName: "NVIDIA A100-SXM4-40GB", MIGProfile: "1g.10gb", Resource: "example.com/mig-1g"}},
	}
	if !reflect.DeepEqual(body.Status.Devices, want) {
		t.Errorf("status.devices = %+v, want %+v", body.Status.Devices, want)
	}
	if got := e.metric("featureplug_dra_claim_status_writes_total", "result", "ok"); got != 1 {
		t.Errorf("claim_status_writes_total{ok} = %v, want 1", got)
	}

	// The kubelet asks again (after its restart): the same status again.
	e.prepare(c, nodeClaimRef(a))
	if patches := claims.patchCalls(); len(patches) != 2 || string(patches[1].data) != string(p.data) {
		t.Errorf("the checkpointed answer wrote %d patches (second %s), want the same body again", len(patches), patches[len(patches)-1].data)
	}
}

// TestNodeClaimStatusWriteFails: a status the API server refuses leaves
// the claim prepared, with its CDI IDs and in the checkpoint; the
// failure is counted and logged with the API server's reason, and the
// write is retried every StatusRetryInterval until it succeeds.
func TestNodeClaimStatusWriteFails(t *testing.T) {
	claims := &nodeClaims{patchErr: errors.New(`resourceclaims.resource.k8s.io "claim-a" is forbidden: changing status.devices requires resource="resourceclaims/driver"`)}
	a := nodeClaim("ns1", "claim-a", "uid-a", nodeOurs("gpu", "gpu-0000"))
	claims.add(a)
	e := newNodeEnv(t, "", claims, nodeTable)
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	e.n.opts.Clock = clk
	e.start()

	r := e.prepare(e.v1(), nodeClaimRef(a))["uid-a"]
	if r.GetError() != "" || !reflect.DeepEqual(nodeDevices(r), []string{"gpu node-a/gpu-0000 k8s.featureplug.io/gpu=GPU-0000"}) {
		t.Fatalf("prepare with a refused status write = %v (error %q), want the device", nodeDevices(r), r.GetError())
	}
	if ck := e.checkpoint(); len(ck.Claims) != 1 {
		t.Errorf("checkpoint = %+v, want the claim", ck)
	}
	if got := e.metric("featureplug_dra_claim_status_writes_total", "result", "error"); got != 1 {
		t.Errorf("claim_status_writes_total{error} = %v, want 1", got)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "status.devices not written") || !strings.Contains(logs, "resourceclaims/driver") {
		t.Errorf("the refused status write is not logged with its reason:\n%s", logs)
	}

	// Still refused at the first retry; written at the second.
	e.waitFor("the retry ticker", clk.HasWaiters)
	clk.Step(StatusRetryInterval)
	e.waitFor("a retried write", func() bool { return len(claims.patchCalls()) == 2 })
	claims.mu.Lock()
	claims.patchErr = nil
	claims.mu.Unlock()
	clk.Step(StatusRetryInterval)
	e.waitFor("the retried write succeeds", func() bool {
		return e.metric("featureplug_dra_claim_status_writes_total", "result", "ok") == 1
	})
	clk.Step(StatusRetryInterval)
	time.Sleep(50 * time.Millisecond)
	if n := len(claims.patchCalls()); n != 3 {
		t.Errorf("%d status writes, want 3: none after the one that succeeded", n)
	}
}

// TestNodePrepareAdminAccess: an admin-access claim (as dcgm-exporter
// makes, allocationMode All) is prepared with every device it was
// allocated, including one a workload's claim holds, as CDI IDs; the
// checkpoint marks its devices admin access; the workload's claim is
// untouched by its prepare and its unprepare.
func TestNodePrepareAdminAccess(t *testing.T) {
	claims := &nodeClaims{}
	work := nodeClaim("ns1", "train", "uid-work", nodeOurs("gpu", "gpu-0000"))
	admin := nodeClaim("monitoring", "dcgm", "uid-admin", nodeOurs("all", "gpu-0000"), nodeOurs("all", "mig-1111"))
	for i := range admin.Status.Allocation.Devices.Results {
		admin.Status.Allocation.Devices.Results[i].AdminAccess = ptr.To(true)
	}
	claims.add(work)
	claims.add(admin)
	e := newNodeEnv(t, "", claims, nodeTable).start()
	c := e.v1()

	if r := e.prepare(c, nodeClaimRef(work))["uid-work"]; r.GetError() != "" {
		t.Fatalf("prepare of the workload's claim: %s", r.GetError())
	}
	r := e.prepare(c, nodeClaimRef(admin))["uid-admin"]
	want := []string{"all node-a/gpu-0000 k8s.featureplug.io/gpu=GPU-0000", "all node-a/mig-1111 k8s.featureplug.io/gpu=MIG-1111"}
	if r.GetError() != "" || !reflect.DeepEqual(nodeDevices(r), want) {
		t.Fatalf("prepare of the admin-access claim = %v (error %q), want %v", nodeDevices(r), r.GetError(), want)
	}
	byUID := map[string]PreparedClaim{}
	for _, pc := range e.checkpoint().Claims {
		byUID[pc.UID] = pc
	}
	for _, d := range byUID["uid-admin"].Devices {
		if !d.AdminAccess {
			t.Errorf("checkpointed admin-access device %s is not marked admin access", d.Device)
		}
	}
	if d := byUID["uid-work"].Devices; len(d) != 1 || d[0].AdminAccess {
		t.Errorf("checkpointed workload claim = %+v, want its one device, not admin access", d)
	}

	if un := e.unprepare(c, nodeClaimRef(admin)); un["uid-admin"].GetError() != "" {
		t.Fatalf("unprepare of the admin-access claim: %s", un["uid-admin"].GetError())
	}
	ck := e.checkpoint()
	if len(ck.Claims) != 1 || ck.Claims[0].UID != "uid-work" || ck.Claims[0].Devices[0].Device != "gpu-0000" {
		t.Fatalf("checkpoint after the admin claim's unprepare = %+v, want the workload's claim as it was", ck.Claims)
	}
	if r := e.prepare(c, nodeClaimRef(work))["uid-work"]; r.GetError() != "" || len(r.GetDevices()) != 1 {
		t.Errorf("the workload's claim after the admin claim left = %v", r)
	}
}
