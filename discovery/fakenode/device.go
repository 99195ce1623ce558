package fakenode

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// mib is one MiB in bytes.
const mib = 1024 * 1024

// supportedEvents are the event types every fake GPU reports as supported.
const supportedEvents = nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError |
	nvml.EventTypeDoubleBitEccError | nvml.EventTypePState | nvml.EventTypeClock |
	nvml.EventTypeDramRetirementFailure | nvml.EventTypeGpuUnavailableError | nvml.EventTypeGpuRecoveryAction

// gpuHandle is the nvml.Device of a physical GPU.
type gpuHandle struct {
	unsupportedDevice
	gpu *gpu
}

var _ nvml.Device = (*gpuHandle)(nil)

func newGPUHandle(g *gpu) *gpuHandle {
	return &gpuHandle{gpu: g}
}

// GetIndex returns the NVML index.
func (h *gpuHandle) GetIndex() (int, nvml.Return) { return h.gpu.index, nvml.SUCCESS }

// GetMinorNumber returns the minor number, equal to the index.
func (h *gpuHandle) GetMinorNumber() (int, nvml.Return) { return h.gpu.index, nvml.SUCCESS }

// GetUUID returns the GPU UUID.
func (h *gpuHandle) GetUUID() (string, nvml.Return) { return h.gpu.uuid, nvml.SUCCESS }

// GetName returns the product name as NVML reports it.
func (h *gpuHandle) GetName() (string, nvml.Return) { return h.gpu.product.name, nvml.SUCCESS }

// GetBrand returns the product brand.
func (h *gpuHandle) GetBrand() (nvml.BrandType, nvml.Return) {
	return h.gpu.product.brand, nvml.SUCCESS
}

// GetArchitecture returns the product architecture.
func (h *gpuHandle) GetArchitecture() (nvml.DeviceArchitecture, nvml.Return) {
	return h.gpu.product.arch, nvml.SUCCESS
}

// GetCudaComputeCapability returns the compute capability.
func (h *gpuHandle) GetCudaComputeCapability() (int, int, nvml.Return) {
	return h.gpu.product.ccMajor, h.gpu.product.ccMinor, nvml.SUCCESS
}

// GetMemoryInfo returns the framebuffer size, all of it free.
func (h *gpuHandle) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	total := h.gpu.product.memoryMiB * mib
	return nvml.Memory{Total: total, Free: total}, nvml.SUCCESS
}

// GetMemoryInfo_v2 returns the framebuffer size, all of it free.
func (h *gpuHandle) GetMemoryInfo_v2() (nvml.Memory_v2, nvml.Return) {
	total := h.gpu.product.memoryMiB * mib
	return nvml.Memory_v2{Version: nvml.STRUCT_VERSION(nvml.Memory_v2{}, 2), Total: total, Free: total}, nvml.SUCCESS
}

// GetPciInfo returns the PCI address and device ID.
func (h *gpuHandle) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	return h.gpu.addr.pciInfo(h.gpu.product.pciDeviceID), nvml.SUCCESS
}

// GetNumaNodeId returns the NUMA node; NOT_SUPPORTED when the file says -1.
func (h *gpuHandle) GetNumaNodeId() (int, nvml.Return) {
	if h.gpu.numa < 0 {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return h.gpu.numa, nvml.SUCCESS
}

// IsMigDeviceHandle reports false: this is a physical GPU.
func (h *gpuHandle) IsMigDeviceHandle() (bool, nvml.Return) { return false, nvml.SUCCESS }

// GetSupportedEventTypes returns the event types the fake can deliver.
func (h *gpuHandle) GetSupportedEventTypes() (uint64, nvml.Return) {
	return supportedEvents, nvml.SUCCESS
}

// RegisterEvents adds the GPU's events of the given types to set, which must
// come from the same node's EventSetCreate.
func (h *gpuHandle) RegisterEvents(types uint64, set nvml.EventSet) nvml.Return {
	es, ok := set.(*eventSet)
	if !ok || es == nil || es.node != h.gpu.node {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if types&^uint64(supportedEvents) != 0 {
		return nvml.ERROR_NOT_SUPPORTED
	}
	if es.isFreed() {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	n := h.gpu.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if h.gpu.faults.lost {
		return nvml.ERROR_GPU_IS_LOST
	}
	h.gpu.registerLocked(es, types)
	return nvml.SUCCESS
}

// GetTopologyCommonAncestor returns the PCIe level shared with another GPU
// of the node.
func (h *gpuHandle) GetTopologyCommonAncestor(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
	o, ok := h.gpu.node.gpuOf(other)
	if !ok || o == h.gpu {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	return h.gpu.topology[o.index], nvml.SUCCESS
}

// GetNvLinkState reports whether NVLink lane link is connected. Lanes past
// the GPU's last are INVALID_ARGUMENT; a GPU without NVLink answers
// NOT_SUPPORTED.
func (h *gpuHandle) GetNvLinkState(link int) (nvml.EnableState, nvml.Return) {
	l, ret := h.lane(link)
	if ret != nvml.SUCCESS {
		return nvml.FEATURE_DISABLED, ret
	}
	if l.enabled {
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	return nvml.FEATURE_DISABLED, nvml.SUCCESS
}

// GetNvLinkRemotePciInfo returns the PCI info of what lane link connects to:
// a peer GPU or an NVSwitch.
func (h *gpuHandle) GetNvLinkRemotePciInfo(link int) (nvml.PciInfo, nvml.Return) {
	l, ret := h.lane(link)
	if ret != nvml.SUCCESS {
		return nvml.PciInfo{}, ret
	}
	if !l.enabled {
		return nvml.PciInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	return l.remote, nvml.SUCCESS
}

// GetNvLinkRemoteDeviceType says whether lane link reaches a GPU or an NVSwitch.
func (h *gpuHandle) GetNvLinkRemoteDeviceType(link int) (nvml.IntNvLinkDeviceType, nvml.Return) {
	l, ret := h.lane(link)
	if ret != nvml.SUCCESS {
		return nvml.NVLINK_DEVICE_TYPE_UNKNOWN, ret
	}
	if !l.enabled {
		return nvml.NVLINK_DEVICE_TYPE_UNKNOWN, nvml.ERROR_NOT_SUPPORTED
	}
	return l.remoteType, nvml.SUCCESS
}

// lane returns NVLink lane link as it is now: a lane SetNVLinkDown took
// down is not enabled.
func (h *gpuHandle) lane(link int) (lane, nvml.Return) {
	lanes := h.gpu.lanes
	switch {
	case len(lanes) == 0:
		return lane{}, nvml.ERROR_NOT_SUPPORTED
	case link < 0 || link >= len(lanes):
		return lane{}, nvml.ERROR_INVALID_ARGUMENT
	}
	l := lanes[link]
	if faults, _ := h.gpu.faultsOf(); faults.linksDown&(1<<uint(link)) != 0 {
		l.enabled = false
	}
	return l, nvml.SUCCESS
}
