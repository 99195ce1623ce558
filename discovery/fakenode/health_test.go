package fakenode_test

import (
	"encoding/binary"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/fakenode"
)

// TestHealthEvidence checks what the failure evidence queries answer for
// each health field, and NOT_SUPPORTED for the mechanism a product lacks.
func TestHealthEvidence(t *testing.T) {
	n, err := fakenode.Load("../testdata/evidence.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		pages     nvml.EnableState
		pagesRet  nvml.Return
		pending   bool
		failed    bool
		remapRet  nvml.Return
		dbe       uint64
		dbeAgg    uint64
		singleBit uint64
	}
	want := []answer{
		{pagesRet: nvml.ERROR_NOT_SUPPORTED, pending: true, remapRet: nvml.SUCCESS},
		{pagesRet: nvml.ERROR_NOT_SUPPORTED, failed: true, remapRet: nvml.SUCCESS, dbe: 2},
		{pages: nvml.FEATURE_ENABLED, pagesRet: nvml.SUCCESS, remapRet: nvml.ERROR_NOT_SUPPORTED},
		{pagesRet: nvml.ERROR_NOT_SUPPORTED, remapRet: nvml.SUCCESS},
		{pages: nvml.FEATURE_DISABLED, pagesRet: nvml.SUCCESS, remapRet: nvml.ERROR_NOT_SUPPORTED},
	}
	for i, w := range want {
		d, _ := n.NVML().DeviceGetHandleByIndex(i)
		var got answer
		got.pages, got.pagesRet = d.GetRetiredPagesPendingStatus()
		_, _, got.pending, got.failed, got.remapRet = d.GetRemappedRows()
		got.dbe, _ = d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
		got.dbeAgg, _ = d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC)
		got.singleBit, _ = d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC)
		if got != w {
			t.Errorf("GPU %d: %+v, want %+v", i, got, w)
		}
	}
}

// TestNVLinkFieldValues checks the link states GetFieldValues reports,
// against GetNvLinkState.
func TestNVLinkFieldValues(t *testing.T) {
	for _, tt := range []struct {
		node          string
		gpu, count    int
		active, total int
	}{
		{"dgx-h100", 3, 18, 18, 18},
		{"h100-nvl", 1, 18, 12, 18},
		{"dgx-a100", 0, 12, 12, 12},
		{"l40s-pcie", 0, 0, 0, 0},
	} {
		t.Run(tt.node, func(t *testing.T) {
			n, err := fakenode.Named(tt.node)
			if err != nil {
				t.Fatal(err)
			}
			d, _ := n.NVML().DeviceGetHandleByIndex(tt.gpu)
			values := []nvml.FieldValue{{FieldId: nvml.FI_DEV_NVLINK_LINK_COUNT}}
			for l := range 20 {
				values = append(values, nvml.FieldValue{FieldId: nvml.FI_DEV_NVLINK_GET_STATE, ScopeId: uint32(l)})
			}
			values = append(values, nvml.FieldValue{FieldId: nvml.FI_DEV_POWER_INSTANT})
			if ret := d.GetFieldValues(values); ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
			val := func(v nvml.FieldValue) uint32 { return binary.NativeEndian.Uint32(v.Value[:4]) }
			if tt.total == 0 {
				for _, v := range values {
					if nvml.Return(v.NvmlReturn) != nvml.ERROR_NOT_SUPPORTED {
						t.Errorf("field %d/%d on a GPU without NVLink: %v", v.FieldId, v.ScopeId, nvml.Return(v.NvmlReturn))
					}
				}
				return
			}
			if got := val(values[0]); got != uint32(tt.count) {
				t.Errorf("link count %d, want %d", got, tt.count)
			}
			active := 0
			for l, v := range values[1:21] {
				state, ret := d.GetNvLinkState(l)
				if nvml.Return(v.NvmlReturn) != ret {
					t.Errorf("link %d: field return %v, GetNvLinkState %v", l, nvml.Return(v.NvmlReturn), ret)
				}
				if ret == nvml.SUCCESS && (val(v) == 1) != (state == nvml.FEATURE_ENABLED) {
					t.Errorf("link %d: field %d, state %v", l, val(v), state)
				}
				if ret == nvml.SUCCESS && val(v) == 1 {
					active++
				}
			}
			if active != tt.active {
				t.Errorf("%d active links, want %d", active, tt.active)
			}
			if last := values[len(values)-1]; nvml.Return(last.NvmlReturn) != nvml.ERROR_NOT_SUPPORTED {
				t.Errorf("another field: %v, want NOT_SUPPORTED", nvml.Return(last.NvmlReturn))
			}
		})
	}
}
