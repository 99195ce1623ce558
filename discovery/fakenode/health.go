package fakenode

import (
	"encoding/binary"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GetRetiredPagesPendingStatus reports whether retired pages await a GPU
// reset (health.retiredPagesPending); NOT_SUPPORTED on products that remap
// rows instead.
func (h *gpuHandle) GetRetiredPagesPendingStatus() (nvml.EnableState, nvml.Return) {
	if h.gpu.product.memoryErrors != pageRetirement {
		return nvml.FEATURE_DISABLED, nvml.ERROR_NOT_SUPPORTED
	}
	if h.gpu.health.RetiredPagesPending {
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	return nvml.FEATURE_DISABLED, nvml.SUCCESS
}

// GetRemappedRows returns the remapped row counts (zero) and whether a
// remapping is pending or failed (health.rowRemapPending, rowRemapFailed);
// NOT_SUPPORTED on products that retire pages instead.
func (h *gpuHandle) GetRemappedRows() (int, int, bool, bool, nvml.Return) {
	if h.gpu.product.memoryErrors != rowRemapping {
		return 0, 0, false, false, nvml.ERROR_NOT_SUPPORTED
	}
	unc := 0
	if h.gpu.health.RowRemapPending || h.gpu.health.RowRemapFailed {
		unc = 1
	}
	return 0, unc, h.gpu.health.RowRemapPending, h.gpu.health.RowRemapFailed, nvml.SUCCESS
}

// GetTotalEccErrors returns health.volatileDoubleBitErrors for volatile
// uncorrected errors and 0 for every other counter.
func (h *gpuHandle) GetTotalEccErrors(errorType nvml.MemoryErrorType, counterType nvml.EccCounterType) (uint64, nvml.Return) {
	if errorType == nvml.MEMORY_ERROR_TYPE_UNCORRECTED && counterType == nvml.VOLATILE_ECC && h.gpu.health.VolatileDoubleBitErrors != nil {
		return uint64(*h.gpu.health.VolatileDoubleBitErrors), nvml.SUCCESS
	}
	return 0, nvml.SUCCESS
}

// GetFieldValues answers the NVLink fields discovery reads in one call:
// FI_DEV_NVLINK_LINK_COUNT and FI_DEV_NVLINK_GET_STATE (ScopeId: the link;
// 1 when active). Each value carries its own return code, as in NVML:
// NOT_SUPPORTED for a GPU without NVLink or another field,
// INVALID_ARGUMENT for a link past the GPU's last.
func (h *gpuHandle) GetFieldValues(values []nvml.FieldValue) nvml.Return {
	lanes := h.gpu.lanes
	for i := range values {
		v := &values[i]
		v.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_INT)
		v.Value = [8]byte{}
		ret := nvml.SUCCESS
		var n uint32
		switch {
		case v.FieldId != nvml.FI_DEV_NVLINK_LINK_COUNT && v.FieldId != nvml.FI_DEV_NVLINK_GET_STATE:
			ret = nvml.ERROR_NOT_SUPPORTED
		case len(lanes) == 0:
			ret = nvml.ERROR_NOT_SUPPORTED
		case v.FieldId == nvml.FI_DEV_NVLINK_LINK_COUNT:
			n = uint32(len(lanes))
		case int(v.ScopeId) >= len(lanes):
			ret = nvml.ERROR_INVALID_ARGUMENT
		case lanes[v.ScopeId].enabled:
			n = 1
		}
		v.NvmlReturn = uint32(ret)
		binary.NativeEndian.PutUint32(v.Value[:4], n)
	}
	return nvml.SUCCESS
}
