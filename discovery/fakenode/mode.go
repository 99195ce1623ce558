package fakenode

import (
	"encoding/hex"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPU modes of GPUSpec.Mode: the PCI class a GPU reports.
const (
	ModeCompute  = "compute"
	ModeGraphics = "graphics"
)

// PCI class codes the fake reports: a display controller (0x03), as a
// 3D controller (0x02, compute mode) or a VGA controller (0x00, graphics).
const (
	pciBaseClassDisplay = 0x03
	pciSubClassVGA      = 0x00
	pciSubClass3D       = 0x02
)

// maxCliqueID bounds FabricSpec.CliqueID (NVML's clique ID is a uint32).
const maxCliqueID = 1<<32 - 1

// FabricSpec attaches a GPU to an NVLink multi-node fabric (an IMEX
// domain, as GB200 NVL72 racks are): GetGpuFabricInfo then reports
// registration completed with this cluster UUID and clique ID. Discovery
// asks only GPUs whose NVLinks go through an NVSwitch (nvlink: nvswitch:
// true), so give the key to such GPUs. GPUs on an NVSwitch of a Hopper or
// later product without a fabric key report a completed registration with
// a zero cluster UUID, as a single HGX baseboard does (not attached).
type FabricSpec struct {
	// ClusterUUID is the fabric's cluster UUID, 8-4-4-4-12 hex digits.
	ClusterUUID string `json:"clusterUUID"`
	// CliqueID is the GPU's clique in the fabric.
	CliqueID int `json:"cliqueID"`
}

// gpuExtra is what a GPU entry says about its PCI class and fabric.
type gpuExtra struct {
	graphics bool
	fabric   *nvml.GpuFabricInfo // nil: the default for the GPU's links
}

// extra validates a GPU entry's mode and fabric keys.
func (v *validator) extra(path string, g *GPUSpec) gpuExtra {
	var e gpuExtra
	switch g.Mode {
	case "", ModeCompute:
	case ModeGraphics:
		e.graphics = true
	default:
		v.fail(path+".mode", "%q is not a mode (use compute or graphics)", g.Mode)
	}
	if g.Fabric == nil {
		return e
	}
	f := &nvml.GpuFabricInfo{State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: uint32(nvml.SUCCESS)}
	raw, err := hex.DecodeString(strings.ReplaceAll(g.Fabric.ClusterUUID, "-", ""))
	if err != nil || len(raw) != len(f.ClusterUuid) || strings.Count(g.Fabric.ClusterUUID, "-") != 4 {
		v.fail(path+".fabric.clusterUUID", "%q is not a UUID (8-4-4-4-12 hex digits)", g.Fabric.ClusterUUID)
	}
	copy(f.ClusterUuid[:], raw)
	if f.ClusterUuid == [16]uint8{} && err == nil {
		v.fail(path+".fabric.clusterUUID", "the zero UUID means not attached; remove the fabric key instead")
	}
	if g.Fabric.CliqueID < 0 || g.Fabric.CliqueID > maxCliqueID {
		v.fail(path+".fabric.cliqueID", "%d is out of range (0-%d)", g.Fabric.CliqueID, maxCliqueID)
	}
	f.CliqueId = uint32(g.Fabric.CliqueID)
	e.fabric = f
	return e
}

// onSwitchFabric reports whether the GPU's NVLinks reach an NVSwitch on a
// product whose fabric manager registers GPUs (Hopper and later).
func (g *gpu) onSwitchFabric() bool {
	if g.product.arch < nvml.DEVICE_ARCH_HOPPER {
		return false
	}
	for _, l := range g.lanes {
		if l.enabled && l.remoteType == nvml.NVLINK_DEVICE_TYPE_SWITCH {
			return true
		}
	}
	return false
}

// GetPciInfoExt returns the PCI address, device ID and class: a 3D
// controller (compute mode) unless the file says graphics.
func (h *gpuHandle) GetPciInfoExt() (nvml.PciInfoExt, nvml.Return) {
	info := h.gpu.addr.pciInfo(h.gpu.product.pciDeviceID)
	ext := nvml.PciInfoExt{
		Version: nvml.STRUCT_VERSION(nvml.PciInfoExt{}, 1), Domain: info.Domain, Bus: info.Bus,
		Device: info.Device, PciDeviceId: info.PciDeviceId, BaseClass: pciBaseClassDisplay, SubClass: pciSubClass3D,
		BusId: info.BusId,
	}
	if h.gpu.extra.graphics {
		ext.SubClass = pciSubClassVGA
	}
	return ext, nvml.SUCCESS
}

// GetGpuFabricInfo reports the GPU's fabric registration: the file's
// fabric, or completed with a zero cluster UUID for a GPU on an NVSwitch
// baseboard; NOT_SUPPORTED for other GPUs.
func (h *gpuHandle) GetGpuFabricInfo() (nvml.GpuFabricInfo, nvml.Return) {
	switch {
	case h.gpu.extra.fabric != nil:
		return *h.gpu.extra.fabric, nvml.SUCCESS
	case h.gpu.onSwitchFabric():
		return nvml.GpuFabricInfo{State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: uint32(nvml.SUCCESS)}, nvml.SUCCESS
	}
	return nvml.GpuFabricInfo{}, nvml.ERROR_NOT_SUPPORTED
}
