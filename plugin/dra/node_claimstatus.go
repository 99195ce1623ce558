package dra

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// statusWriteTimeout bounds one claim's status write, so that a slow API
// server delays the kubelet's answer by at most this much per claim.
const statusWriteTimeout = 5 * time.Second

// StatusRetryInterval is how often the status of a prepared claim whose
// status write failed is written again, until it succeeds or the claim is
// unprepared.
const StatusRetryInterval = 30 * time.Second

// DeviceStatusData is what the driver reports of one prepared device in
// its claim's status.devices (the entry's data), for workloads, KubeVirt
// and exporters: the device as NVML names it and the resource the rules
// gave it.
type DeviceStatusData struct {
	// UUID is the GPU or MIG device UUID.
	UUID string `json:"uuid"`
	// PCIBusID is the physical GPU's PCI address (a MIG device's
	// parent's).
	PCIBusID string `json:"pciBusID,omitempty"`
	// ProductName is the physical GPU's product name.
	ProductName string `json:"productName,omitempty"`
	// MIGProfile is a MIG device's profile ("1g.10gb").
	MIGProfile string `json:"migProfile,omitempty"`
	// Resource is the resource name the rules gave the device.
	Resource string `json:"resource"`
}

// deviceStatusData is the status data of a table device.
func deviceStatusData(d Device) *DeviceStatusData {
	return &DeviceStatusData{
		UUID: d.Device.ID, PCIBusID: d.PCIBusID, ProductName: d.Product,
		MIGProfile: d.Device.Profile, Resource: d.Resource,
	}
}

// claimStatusApply is the server-side apply body of a claim's
// status.devices entries of this driver. The UID makes a claim deleted
// and made again under the same name refuse the write.
type claimStatusApply struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string    `json:"name"`
		Namespace string    `json:"namespace"`
		UID       types.UID `json:"uid"`
	} `json:"metadata"`
	Status struct {
		Devices []deviceStatusApply `json:"devices"`
	} `json:"status"`
}

// deviceStatusApply is one status.devices entry (AllocatedDeviceStatus),
// with only the fields the driver owns.
type deviceStatusApply struct {
	Driver  string            `json:"driver"`
	Pool    string            `json:"pool"`
	Device  string            `json:"device"`
	ShareID string            `json:"shareID,omitempty"`
	Data    *DeviceStatusData `json:"data"`
}

// claimStatusBody is the apply body of pc's status.devices, or nil when
// none of its devices has status data (a claim checkpointed by an agent
// that wrote none).
func claimStatusBody(pc PreparedClaim) ([]byte, error) {
	body := claimStatusApply{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceClaim"}
	body.Metadata.Name, body.Metadata.Namespace, body.Metadata.UID = pc.Name, pc.Namespace, types.UID(pc.UID)
	for _, d := range pc.Devices {
		if d.Status == nil {
			continue
		}
		body.Status.Devices = append(body.Status.Devices, deviceStatusApply{
			Driver: DriverName, Pool: d.Pool, Device: d.Device, ShareID: d.ShareID, Data: d.Status,
		})
	}
	if len(body.Status.Devices) == 0 {
		return nil, nil
	}
	return json.Marshal(body)
}

// writeClaimStatuses writes the status.devices of each claim the kubelet
// is given devices for, with server-side apply as field manager
// DriverName (so each driver owns its own entries): a claim answered from
// the checkpoint is written again, which changes nothing on the API
// server when it is there already. A failed write is logged (a retry's at
// debug level) and counted, and retried every StatusRetryInterval
// (retryStatuses); the claim stays prepared, since the container needs
// its devices more than the status. The API server authorizes the write
// as patch of resourceclaims/status and, for changed entries,
// associated-node:patch of resourceclaims/driver named DriverName.
func (n *Node) writeClaimStatuses(ctx context.Context, claims []PreparedClaim, retry bool) {
	for _, pc := range claims {
		ok := n.writeClaimStatus(ctx, pc, retry)
		n.statusMu.Lock()
		if ok {
			delete(n.statusPending, pc.UID)
		} else {
			n.statusPending[pc.UID] = true
		}
		n.statusMu.Unlock()
	}
}

// writeClaimStatus writes one claim's status.devices and reports whether
// it is done (written, or not worth a retry).
func (n *Node) writeClaimStatus(ctx context.Context, pc PreparedClaim, retry bool) bool {
	failed := n.log.Warn
	if retry {
		failed = n.log.Debug
	}
	body, err := claimStatusBody(pc)
	if err != nil {
		n.metrics.statusWrites.WithLabelValues(resultError).Inc()
		n.log.Error("DRA claim status not written", "claim", pc.String(), "err", err)
		return true // nothing a retry would change
	}
	if body == nil {
		return true
	}
	wctx, cancel := context.WithTimeout(ctx, statusWriteTimeout)
	_, err = n.opts.Claims(pc.Namespace).Patch(wctx, pc.Name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: DriverName, Force: ptr.To(true)}, "status")
	cancel()
	switch {
	case err == nil:
		n.metrics.statusWrites.WithLabelValues(resultOK).Inc()
		return true
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsInvalid(err):
		// Deleted, made again under its name, or deallocated: the
		// kubelet unprepares it; no retry.
		n.metrics.statusWrites.WithLabelValues(resultError).Inc()
		failed("DRA claim status.devices not written: the claim is gone or changed", "claim", pc.String(), "err", err)
		return true
	default:
		n.metrics.statusWrites.WithLabelValues(resultError).Inc()
		failed("DRA claim status.devices not written; the claim stays prepared, and the write is retried", "claim", pc.String(),
			"retryIn", StatusRetryInterval, "err", fmt.Errorf("server-side apply of status: %w", err))
		return false
	}
}

// retryStatuses writes again, every StatusRetryInterval until ctx ends,
// the status of the claims whose write failed and that are still
// prepared.
func (n *Node) retryStatuses(ctx context.Context) {
	tick := n.opts.Clock.NewTicker(StatusRetryInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		}
		n.statusMu.Lock()
		uids := slices.Collect(maps.Keys(n.statusPending))
		n.statusMu.Unlock()
		if len(uids) == 0 {
			continue
		}
		var todo []PreparedClaim
		var gone []string
		n.mu.Lock()
		n.reloadLocked()
		for _, uid := range uids {
			if pc, ok := n.claims[uid]; ok {
				todo = append(todo, pc)
			} else {
				gone = append(gone, uid)
			}
		}
		n.mu.Unlock()
		n.statusMu.Lock()
		for _, uid := range gone {
			delete(n.statusPending, uid) // unprepared since
		}
		n.statusMu.Unlock()
		n.writeClaimStatuses(ctx, todo, true)
	}
}

// adminAccessDevices counts the claim's devices of admin-access requests,
// for logs.
func (c PreparedClaim) adminAccessDevices() int {
	k := 0
	for _, d := range c.Devices {
		if d.AdminAccess {
			k++
		}
	}
	return k
}
