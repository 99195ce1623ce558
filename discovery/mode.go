package discovery

import (
	"fmt"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Values of GPU.Mode (gpu-feature-discovery's gpu.mode, which it reads
// from the PCI class in sysfs: 0x030200 is compute, 0x030000 graphics).
const (
	ModeCompute  = "compute"
	ModeGraphics = "graphics"
)

// PCI class codes of a GPU: base class 0x03 (display controller), sub
// class 0x02 (3D controller: compute mode) or 0x00 (VGA: graphics mode).
const (
	pciBaseClassDisplay = 0x03
	pciSubClassVGA      = 0x00
	pciSubClass3D       = 0x02
)

// NVML symbols discovery checks for before it calls them: calling a
// function the driver's libnvidia-ml.so.1 does not have kills the process
// (go-nvml binds symbols lazily), so newer calls are made only when the
// library has them.
const (
	symPciInfoExt = "nvmlDeviceGetPciInfoExt"
	symFabricInfo = "nvmlDeviceGetGpuFabricInfo"
)

// symbols records which newer NVML functions the library has. It is read
// once per discovery (one Extensions call), not per GPU, to keep within the
// NVML call budget (nvmlcount_test.go).
type symbols struct {
	pciInfoExt bool
	fabricInfo bool
}

func (r *reader) lookupSymbols() {
	ext := r.lib.Extensions()
	if ext == nil {
		return
	}
	r.syms.pciInfoExt = ext.LookupSymbol(symPciInfoExt) == nil
	r.syms.fabricInfo = ext.LookupSymbol(symFabricInfo) == nil
}

// pciInfo reads a GPU's PCI bus ID and mode in one call: GetPciInfoExt
// carries the PCI class beside the bus ID (the mode costs no extra call);
// without it (drivers before R520) GetPciInfo gives the bus ID and the mode
// is Unknown.
func (r *reader) pciInfo(h nvml.Device, dev string) (busID, mode string, err error) {
	if r.syms.pciInfoExt {
		info, ret := h.GetPciInfoExt()
		if ret == nvml.SUCCESS {
			return normalizeBusID(busIDString(info.BusId[:])), modeOf(info.BaseClass, info.SubClass), nil
		}
		if ok, err := optional(ret, "PCI info", dev); err != nil || ok {
			return "", Unknown, err
		}
	}
	pci, ret := h.GetPciInfo()
	if err := check(ret, "PCI info", dev); err != nil {
		return "", Unknown, err
	}
	return normalizeBusID(busIDString(pci.BusId[:])), Unknown, nil
}

// modeOf names the mode of a PCI class.
func modeOf(base, sub uint32) string {
	switch {
	case base == pciBaseClassDisplay && sub == pciSubClass3D:
		return ModeCompute
	case base == pciBaseClassDisplay && sub == pciSubClassVGA:
		return ModeGraphics
	}
	return Unknown
}

// fabric is what GetGpuFabricInfo says of a GPU.
type fabric struct {
	// onFabric is set when the GPU is part of an NVSwitch fabric (the
	// fabric manager knows it, whatever its state).
	onFabric bool
	// clique is "<cluster UUID>.<clique ID>" when the GPU is attached to a
	// multi-node fabric: registration completed with success and a
	// non-zero cluster UUID, go-nvlib's IsFabricAttached test, which
	// gpu-feature-discovery uses for gpu.clique.
	clique string
}

// fabricInfo reads a GPU's fabric information. Only GPUs whose NVLinks
// reach an NVSwitch are asked (links.go): no other GPU can be
// fabric-attached. A driver without the call, or a GPU without fabric
// support, gives the zero fabric.
func (r *reader) fabricInfo(h nvml.Device, dev string) (fabric, error) {
	if !r.syms.fabricInfo {
		return fabric{}, nil
	}
	info, ret := h.GetGpuFabricInfo()
	if ok, err := optional(ret, "GPU fabric info", dev); err != nil || !ok {
		return fabric{}, err
	}
	f := fabric{onFabric: info.State != nvml.GPU_FABRIC_STATE_NOT_SUPPORTED}
	if info.State == nvml.GPU_FABRIC_STATE_COMPLETED && nvml.Return(info.Status) == nvml.SUCCESS &&
		info.ClusterUuid != [16]uint8{} {
		f.clique = formatUUID(info.ClusterUuid) + "." + strconv.FormatUint(uint64(info.CliqueId), 10)
	}
	return f, nil
}

// formatUUID formats 16 bytes as a UUID, 8-4-4-4-12 lowercase hex.
func formatUUID(b [16]uint8) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
