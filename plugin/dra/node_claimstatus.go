package dra

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// statusWriteTimeout bounds one claim's status write, so that a slow API
// server delays the kubelet's answer by at most this much per claim.
const statusWriteTimeout = 5 * time.Second

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
// server when it is there already, and completes a write that failed. A
// failed write is logged and counted; the claim stays prepared, since the
// container needs its devices more than the status. The API server
// authorizes the write as patch of resourceclaims/status and, for
// changed entries, associated-node:patch of resourceclaims/driver named
// DriverName.
func (n *Node) writeClaimStatuses(ctx context.Context, claims []PreparedClaim) {
	for _, pc := range claims {
		body, err := claimStatusBody(pc)
		if err != nil {
			n.metrics.statusWrites.WithLabelValues(resultError).Inc()
			n.log.Error("DRA claim status not written", "claim", pc.String(), "err", err)
			continue
		}
		if body == nil {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, statusWriteTimeout)
		_, err = n.opts.Claims(pc.Namespace).Patch(wctx, pc.Name, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: DriverName, Force: ptr.To(true)}, "status")
		cancel()
		if err != nil {
			n.metrics.statusWrites.WithLabelValues(resultError).Inc()
			n.log.Warn("DRA claim status.devices not written; the claim stays prepared", "claim", pc.String(),
				"err", fmt.Errorf("server-side apply of status: %w", err))
			continue
		}
		n.metrics.statusWrites.WithLabelValues(resultOK).Inc()
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
