package dra

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"
)

// maxDeviceErrors is how many device problems one claim's error names;
// the rest are only counted.
const maxDeviceErrors = 5

// draService is the DRA gRPC service v1 (v1beta1 through the kubelet
// API's wrapper) of a Node.
type draService struct {
	drapbv1.UnsafeDRAPluginServer
	n *Node
}

var _ drapbv1.DRAPluginServer = (*draService)(nil)

// NodePrepareResources implements drapbv1.DRAPluginServer. Each claim is
// answered on its own: a claim prepared before gets its checkpointed
// answer again (no second prepare, whatever the table holds now); another
// is read from the API server, checked (same UID, allocated) and its
// devices of this driver and this node's pool are looked up in the
// current table for their CDI device IDs. A claim's error names it, the
// device and why. Prepared claims are checkpointed before the answer,
// and their status.devices written (node_claimstatus.go). Admin-access
// devices are prepared the same way, and marked so in the checkpoint.
func (s *draService) NodePrepareResources(ctx context.Context, req *drapbv1.NodePrepareResourcesRequest) (*drapbv1.NodePrepareResourcesResponse, error) {
	if err := checkClaims(req.GetClaims()); err != nil {
		return nil, status.Error(codes.InvalidArgument, "NodePrepareResources: "+err.Error())
	}
	resp, prepared := s.n.prepareClaims(ctx, req.GetClaims())
	s.n.writeClaimStatuses(ctx, prepared, false)
	return resp, nil
}

// prepareClaims prepares claims (or answers them from the checkpoint) and
// returns the kubelet's answer and the claims it gives devices.
func (n *Node) prepareClaims(ctx context.Context, claims []*drapbv1.Claim) (*drapbv1.NodePrepareResourcesResponse, []PreparedClaim) {
	// API reads happen before taking the lock, as the kubelet plugin
	// helper does, for the claims not prepared yet.
	n.mu.Lock()
	n.reloadLocked()
	var todo []*drapbv1.Claim
	for _, c := range claims {
		if _, ok := n.claims[c.GetUid()]; !ok {
			todo = append(todo, c)
		}
	}
	n.mu.Unlock()
	fetched := make(map[string]fetchedClaim, len(todo))
	for _, c := range todo {
		obj, err := n.opts.Claims(c.GetNamespace()).Get(ctx, c.GetName(), metav1.GetOptions{})
		fetched[c.GetUid()] = fetchedClaim{obj, err}
	}

	n.mu.Lock()
	defer n.mu.Unlock()
	defer n.shareLocked()()
	table := n.opts.Table()
	resp := &drapbv1.NodePrepareResourcesResponse{Claims: make(map[string]*drapbv1.NodePrepareResourceResponse, len(claims))}
	var added []string
	var prepared []PreparedClaim
	for _, c := range claims {
		uid := c.GetUid()
		if pc, ok := n.claims[uid]; ok {
			resp.Claims[uid] = pc.response()
			prepared = append(prepared, pc)
			n.metrics.prepares.WithLabelValues(resultCheckpointed).Inc()
			n.log.Info("DRA claim prepared before; answering from the checkpoint", "claim", pc.String(), "devices", pc.deviceNames())
			continue
		}
		f, ok := fetched[uid]
		if !ok { // unprepared by a concurrent call since the first look
			obj, err := n.opts.Claims(c.GetNamespace()).Get(ctx, c.GetName(), metav1.GetOptions{})
			f = fetchedClaim{obj, err}
		}
		pc, err := n.prepare(c, f, table)
		if err != nil {
			resp.Claims[uid] = &drapbv1.NodePrepareResourceResponse{Error: err.Error()}
			n.metrics.prepares.WithLabelValues(resultError).Inc()
			n.log.Warn("DRA claim not prepared", "claim", claimRef(c.GetNamespace(), c.GetName(), uid), "err", err)
			continue
		}
		n.claims[uid] = pc
		added = append(added, uid)
	}
	if len(added) == 0 {
		return resp, prepared
	}
	if err := n.saveLocked(); err != nil {
		for _, uid := range added {
			pc := n.claims[uid]
			delete(n.claims, uid)
			n.rollBackDynamic(pc)
			resp.Claims[uid] = &drapbv1.NodePrepareResourceResponse{
				Error: fmt.Sprintf("claim %s: not prepared: its devices cannot be checkpointed: %v", pc, err),
			}
			n.metrics.prepares.WithLabelValues(resultError).Inc()
		}
		n.log.Error("DRA claims not prepared: checkpoint write failed", "claims", added, "err", err)
		n.metrics.preparedClaims.Set(float64(len(n.claims)))
		return resp, prepared
	}
	n.settlePending(added)
	n.preparedDynamic(added)
	for _, uid := range added {
		pc := n.claims[uid]
		resp.Claims[uid] = pc.response()
		prepared = append(prepared, pc)
		n.metrics.prepares.WithLabelValues(resultPrepared).Inc()
		n.log.Info("DRA claim prepared", "claim", pc.String(), "devices", pc.deviceNames(), "cdiDevices", pc.cdiIDs(),
			"adminAccessDevices", pc.adminAccessDevices())
	}
	return resp, prepared
}

// NodeUnprepareResources implements drapbv1.DRAPluginServer: prepared
// claims are forgotten and the checkpoint rewritten; a claim not prepared
// here is a success (the kubelet expects unprepare to be idempotent).
func (s *draService) NodeUnprepareResources(_ context.Context, req *drapbv1.NodeUnprepareResourcesRequest) (*drapbv1.NodeUnprepareResourcesResponse, error) {
	if err := checkClaims(req.GetClaims()); err != nil {
		return nil, status.Error(codes.InvalidArgument, "NodeUnprepareResources: "+err.Error())
	}
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	defer n.shareLocked()()
	resp := &drapbv1.NodeUnprepareResourcesResponse{Claims: make(map[string]*drapbv1.NodeUnprepareResourceResponse, len(req.GetClaims()))}
	removed := map[string]PreparedClaim{}
	for _, c := range req.GetClaims() {
		uid := c.GetUid()
		resp.Claims[uid] = &drapbv1.NodeUnprepareResourceResponse{}
		if pc, ok := n.claims[uid]; ok {
			if err := n.unprepareDynamic(pc); err != nil { // dynmig_prepare.go
				resp.Claims[uid].Error = fmt.Sprintf("claim %s: not unprepared: %v", pc, err)
				n.metrics.unprepares.WithLabelValues(resultError).Inc()
				n.log.Warn("DRA claim not unprepared", "claim", pc.String(), "err", err)
				continue
			}
			removed[uid] = pc
			delete(n.claims, uid)
			continue
		}
		if _, ok := n.pending[uid]; ok {
			if err := n.unpreparePending(uid); err != nil { // dynmig_journal.go
				resp.Claims[uid].Error = fmt.Sprintf("claim %s: not unprepared: %v", claimRef(c.GetNamespace(), c.GetName(), uid), err)
				n.metrics.unprepares.WithLabelValues(resultError).Inc()
			}
			continue
		}
		n.metrics.unprepares.WithLabelValues(resultUnknown).Inc()
		n.log.Info("DRA claim to unprepare was not prepared here; nothing to do", "claim", claimRef(c.GetNamespace(), c.GetName(), uid))
	}
	if len(removed) == 0 {
		return resp, nil
	}
	if err := n.saveLocked(); err != nil {
		maps.Copy(n.claims, removed)
		for uid, pc := range removed {
			resp.Claims[uid].Error = fmt.Sprintf("claim %s: not unprepared: the checkpoint cannot be written: %v", pc, err)
			n.metrics.unprepares.WithLabelValues(resultError).Inc()
		}
		n.log.Error("DRA claims not unprepared: checkpoint write failed", "claims", slices.Sorted(maps.Keys(removed)), "err", err)
		n.metrics.preparedClaims.Set(float64(len(n.claims)))
		return resp, nil
	}
	for _, pc := range removed {
		n.metrics.unprepares.WithLabelValues(resultUnprepared).Inc()
		n.log.Info("DRA claim unprepared", "claim", pc.String(), "devices", pc.deviceNames())
	}
	return resp, nil
}

// saveLocked writes the checkpoint and updates the gauge.
func (n *Node) saveLocked() error {
	n.metrics.preparedClaims.Set(float64(len(n.claims)))
	if n.ckpt == nil {
		return nil
	}
	if err := n.ckpt.write(n.claims); err != nil {
		n.metrics.ckptWrites.WithLabelValues("error").Inc()
		return err
	}
	n.metrics.ckptWrites.WithLabelValues("ok").Inc()
	return nil
}

// fetchedClaim is the API server's answer for a claim.
type fetchedClaim struct {
	obj *resourceapi.ResourceClaim
	err error
}

// prepare checks the claim the kubelet asked for against the API
// server's copy and gives its devices of this driver and pool with their
// CDI device IDs from table.
func (n *Node) prepare(c *drapbv1.Claim, f fetchedClaim, table *Table) (PreparedClaim, error) {
	pc := PreparedClaim{UID: c.GetUid(), Namespace: c.GetNamespace(), Name: c.GetName()}
	switch {
	case apierrors.IsNotFound(f.err):
		return pc, fmt.Errorf("claim %s: deleted: the API server does not have it", pc)
	case f.err != nil:
		return pc, fmt.Errorf("claim %s: reading it from the API server: %w", pc, f.err)
	case f.obj == nil:
		return pc, fmt.Errorf("claim %s: the API server returned no claim", pc)
	case string(f.obj.UID) != pc.UID:
		return pc, fmt.Errorf("claim %s: UID mismatch: the API server's claim of that name has UID %s (deleted and made again)", pc, f.obj.UID)
	case f.obj.Status.Allocation == nil:
		return pc, fmt.Errorf("claim %s: not allocated", pc)
	}
	var problems []string
	nproblems := 0
	problem := func(format string, args ...any) {
		if len(problems) < maxDeviceErrors {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
		nproblems++
	}
	var others []string
	for _, r := range f.obj.Status.Allocation.Devices.Results {
		if r.Driver != DriverName {
			if !slices.Contains(others, r.Driver) {
				others = append(others, r.Driver)
			}
			continue
		}
		if r.Pool != n.opts.NodeName {
			problem("device %q (request %q): allocated from pool %q, not from this node's pool %q", r.Device, r.Request, r.Pool, n.opts.NodeName)
			continue
		}
		d, ok := table.Lookup(r.Device)
		if !ok {
			problem("device %q (request %q): unknown device: this node does not serve it through DRA now", r.Device, r.Request)
			continue
		}
		if d.Partition != nil && ptr.Deref(r.AdminAccess, false) {
			// A placement becomes a MIG device made for one claim: an
			// admin-access claim (which consumes nothing) would make one of
			// its own, or fail on the one a workload holds.
			problem("device %q (request %q, resource %s): admin access to a GPU partitioned on demand is not served: its placements are MIG devices made for one claim; ask for the MIG devices or GPUs served as such",
				r.Device, r.Request, d.Resource)
			continue
		}
		if d.Partition != nil {
			m, ids, err := n.prepareDynamic(pc, d) // dynmig_prepare.go
			if err != nil {
				problem("device %q (request %q, resource %s): %v", r.Device, r.Request, d.Resource, err)
				continue
			}
			st := deviceStatusData(d)
			if m.UUID != "" {
				st.UUID = m.UUID
			}
			pc.Devices = append(pc.Devices, PreparedDevice{Requests: []string{baseRequest(r.Request)}, Pool: r.Pool, Device: r.Device, CDIDeviceIDs: ids, MIG: m, Status: st})
			continue
		}
		if len(d.CDIDevices) == 0 {
			problem("device %q (request %q, resource %s): no CDI device IDs to give the container", r.Device, r.Request, d.Resource)
			continue
		}
		pd := PreparedDevice{
			Requests:     []string{baseRequest(r.Request)},
			Pool:         r.Pool,
			Device:       r.Device,
			CDIDeviceIDs: slices.Clone(d.CDIDevices),
		}
		if r.ShareID != nil {
			pd.ShareID = string(*r.ShareID)
		}
		pd.AdminAccess = ptr.Deref(r.AdminAccess, false)
		pd.Status = deviceStatusData(d)
		pc.Devices = append(pc.Devices, pd)
	}
	if nproblems > 0 {
		n.rollBackDynamic(pc)
		msg := strings.Join(problems, "; ")
		if nproblems > len(problems) {
			msg += fmt.Sprintf("; and %d more", nproblems-len(problems))
		}
		return pc, fmt.Errorf("claim %s: %s", pc, msg)
	}
	if len(pc.Devices) == 0 {
		allocated := "no device"
		if len(others) > 0 {
			allocated = "devices of " + strings.Join(others, ", ")
		}
		return pc, fmt.Errorf("claim %s: not allocated by %s: its allocation has %s", pc, DriverName, allocated)
	}
	return pc, nil
}

// baseRequest strips a subrequest name ("req/sub" -> "req"): the kubelet
// knows the claim's requests, not the subrequests that were picked.
func baseRequest(name string) string {
	base, _, _ := strings.Cut(name, "/")
	return base
}

// checkClaims checks the shape of a request: a bounded number of claims,
// each with a UID, namespace and name of bounded size, no UID twice.
func checkClaims(claims []*drapbv1.Claim) error {
	if len(claims) > maxClaimsPerRequest {
		return fmt.Errorf("%d claims in one request, more than the %d a request may have", len(claims), maxClaimsPerRequest)
	}
	seen := make(map[string]bool, len(claims))
	for i, c := range claims {
		if c.GetUid() == "" || c.GetNamespace() == "" || c.GetName() == "" {
			return fmt.Errorf("claims[%d]: uid, namespace and name must be set (have %q, %q, %q)", i, clip(c.GetUid()), clip(c.GetNamespace()), clip(c.GetName()))
		}
		if len(c.GetUid()) > maxNameBytes || len(c.GetNamespace()) > maxNameBytes || len(c.GetName()) > maxNameBytes {
			return fmt.Errorf("claims[%d]: uid, namespace and name may have at most %d bytes (have %d, %d, %d)",
				i, maxNameBytes, len(c.GetUid()), len(c.GetNamespace()), len(c.GetName()))
		}
		if seen[c.GetUid()] {
			return fmt.Errorf("claims[%d]: uid %q appears twice", i, c.GetUid())
		}
		seen[c.GetUid()] = true
	}
	return nil
}

// clip shortens a string an error quotes.
func clip(s string) string {
	const maxQuoted = 64
	if len(s) > maxQuoted {
		return s[:maxQuoted] + "..."
	}
	return s
}

// response is the kubelet's answer for a prepared claim.
func (c PreparedClaim) response() *drapbv1.NodePrepareResourceResponse {
	out := &drapbv1.NodePrepareResourceResponse{Devices: make([]*drapbv1.Device, 0, len(c.Devices))}
	for _, d := range c.Devices {
		dev := &drapbv1.Device{
			RequestNames: slices.Clone(d.Requests),
			PoolName:     d.Pool,
			DeviceName:   d.Device,
			CdiDeviceIds: slices.Clone(d.CDIDeviceIDs),
		}
		if d.ShareID != "" {
			id := d.ShareID
			dev.ShareId = &id
		}
		out.Devices = append(out.Devices, dev)
	}
	return out
}

// deviceNames lists the claim's devices, for logs.
func (c PreparedClaim) deviceNames() []string {
	out := make([]string, 0, len(c.Devices))
	for _, d := range c.Devices {
		out = append(out, d.Device)
	}
	return out
}

// cdiIDs lists the claim's CDI device IDs, for logs.
func (c PreparedClaim) cdiIDs() []string {
	var out []string
	for _, d := range c.Devices {
		out = append(out, d.CDIDeviceIDs...)
	}
	return out
}
