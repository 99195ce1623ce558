package fakenode

import (
	"encoding/binary"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GetRetiredPagesPendingStatus reports whether retired pages await a GPU
// reset (health.retiredPagesPending); NOT_SUPPORTED on products that remap
// rows instead, GPU_IS_LOST while the GPU is lost.
func (h *gpuHandle) GetRetiredPagesPendingStatus() (nvml.EnableState, nvml.Return) {
	faults, health := h.gpu.faultsOf()
	switch {
	case faults.lost:
		return nvml.FEATURE_DISABLED, nvml.ERROR_GPU_IS_LOST
	case h.gpu.product.memoryErrors != pageRetirement:
		return nvml.FEATURE_DISABLED, nvml.ERROR_NOT_SUPPORTED
	case health.RetiredPagesPending:
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	return nvml.FEATURE_DISABLED, nvml.SUCCESS
}

// GetRemappedRows returns the remapped row counts (zero) and whether a
// remapping is pending or failed (health.rowRemapPending, rowRemapFailed);
// NOT_SUPPORTED on products that retire pages instead, GPU_IS_LOST while
// the GPU is lost.
func (h *gpuHandle) GetRemappedRows() (int, int, bool, bool, nvml.Return) {
	faults, health := h.gpu.faultsOf()
	switch {
	case faults.lost:
		return 0, 0, false, false, nvml.ERROR_GPU_IS_LOST
	case h.gpu.product.memoryErrors != rowRemapping:
		return 0, 0, false, false, nvml.ERROR_NOT_SUPPORTED
	}
	unc := 0
	if health.RowRemapPending || health.RowRemapFailed {
		unc = 1
	}
	return 0, unc, health.RowRemapPending, health.RowRemapFailed, nvml.SUCCESS
}

// GetTotalEccErrors returns health.volatileDoubleBitErrors for volatile
// uncorrected errors and 0 for every other counter; GPU_IS_LOST while the
// GPU is lost.
func (h *gpuHandle) GetTotalEccErrors(errorType nvml.MemoryErrorType, counterType nvml.EccCounterType) (uint64, nvml.Return) {
	faults, health := h.gpu.faultsOf()
	if faults.lost {
		return 0, nvml.ERROR_GPU_IS_LOST
	}
	if errorType == nvml.MEMORY_ERROR_TYPE_UNCORRECTED && counterType == nvml.VOLATILE_ECC && health.VolatileDoubleBitErrors != nil {
		return uint64(*health.VolatileDoubleBitErrors), nvml.SUCCESS
	}
	return 0, nvml.SUCCESS
}

// GetFieldValues answers, in one call, the fields discovery and the health
// watcher read: FI_DEV_NVLINK_LINK_COUNT, FI_DEV_NVLINK_GET_STATE (ScopeId:
// the link; 1 when active), FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS
// (ScopeId: the link) and FI_DEV_GET_GPU_RECOVERY_ACTION. Each value carries
// its own return code, as in NVML: NOT_SUPPORTED for another field or an
// NVLink field of a GPU without NVLink, INVALID_ARGUMENT for a link past the
// GPU's last. While the GPU is lost the call answers GPU_IS_LOST.
func (h *gpuHandle) GetFieldValues(values []nvml.FieldValue) nvml.Return {
	faults, health := h.gpu.faultsOf()
	if faults.lost {
		return nvml.ERROR_GPU_IS_LOST
	}
	lanes := h.gpu.lanes
	for i := range values {
		v := &values[i]
		v.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
		v.Value = [8]byte{}
		ret := nvml.SUCCESS
		var n uint32
		switch v.FieldId {
		case nvml.FI_DEV_GET_GPU_RECOVERY_ACTION:
			action, _ := recoveryActionByName(health.RecoveryAction)
			n = uint32(action)
		case nvml.FI_DEV_NVLINK_LINK_COUNT:
			n = uint32(len(lanes))
			if len(lanes) == 0 {
				ret = nvml.ERROR_NOT_SUPPORTED
			}
		case nvml.FI_DEV_NVLINK_GET_STATE, nvml.FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS:
			link := int(v.ScopeId)
			switch {
			case len(lanes) == 0:
				ret = nvml.ERROR_NOT_SUPPORTED
			case link >= len(lanes):
				ret = nvml.ERROR_INVALID_ARGUMENT
			case v.FieldId == nvml.FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS:
				n = uint32(faults.linkFailures[link])
			case lanes[link].enabled && faults.linksDown&(1<<uint(link)) == 0:
				n = 1
			}
		default:
			ret = nvml.ERROR_NOT_SUPPORTED
		}
		v.NvmlReturn = uint32(ret)
		binary.NativeEndian.PutUint32(v.Value[:4], n)
	}
	return nvml.SUCCESS
}
