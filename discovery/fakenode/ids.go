package fakenode

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// uuidFor derives a stable UUID body (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)
// from the node name and a device path, so that the same file always gives
// the same devices.
func uuidFor(node string, parts ...any) string {
	seed := "featureplug-fakenode\x00" + node
	for _, p := range parts {
		seed += fmt.Sprintf("\x00%v", p)
	}
	sum := sha256.Sum256([]byte(seed))
	s := hex.EncodeToString(sum[:16])
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}

// gpuUUID is the UUID of GPU index on the node, "GPU-...".
func gpuUUID(node string, index int) string {
	return "GPU-" + uuidFor(node, "gpu", index)
}

// migUUID is the UUID of the MIG device for compute instance ci of GPU
// instance gi on GPU index, "MIG-...". generation is 0 for the MIG devices
// of the node's file, so that loading a file again gives the same UUIDs,
// and counts the MIG devices created at run time after that: as on real
// GPUs, a MIG device created again at the same place has a new UUID.
func migUUID(node string, index int, gi, ci uint32, generation uint64) string {
	if generation == 0 {
		return "MIG-" + uuidFor(node, "gpu", index, "gi", gi, "ci", ci)
	}
	return "MIG-" + uuidFor(node, "gpu", index, "gi", gi, "ci", ci, "generation", generation)
}

// pciAddress is a PCI function address in domain 0.
type pciAddress struct {
	bus, device uint32
}

// gpuAddress is the PCI address of GPU index: buses 0x07, 0x17, ... 0xF7.
func gpuAddress(index int) pciAddress {
	return pciAddress{bus: uint32(0x07 + 0x10*index)}
}

// switchAddress is the PCI address of NVSwitch number n on the node: buses
// 0x0C, 0x1C, ... 0xFC, then the same buses with device 1, 2, ...
func switchAddress(n int) pciAddress {
	return pciAddress{bus: uint32(0x0C + 0x10*(n%16)), device: uint32(n / 16)}
}

// legacy formats the address as NVML's BusIdLegacy: "0000:07:00.0".
func (a pciAddress) legacy() string {
	return fmt.Sprintf("0000:%02X:%02X.0", a.bus, a.device)
}

// String formats the address as NVML's BusId: "00000000:07:00.0".
func (a pciAddress) String() string {
	return fmt.Sprintf("00000000:%02X:%02X.0", a.bus, a.device)
}

// pciInfo is what GetPciInfo reports for a device at a with the given PCI
// device ID.
func (a pciAddress) pciInfo(deviceID uint32) nvml.PciInfo {
	info := nvml.PciInfo{Domain: 0, Bus: a.bus, Device: a.device, PciDeviceId: deviceID}
	copyCString(info.BusIdLegacy[:], a.legacy())
	copyCString(info.BusId[:], a.String())
	return info
}

// copyCString copies s into a NUL-terminated C char array.
func copyCString(dst []int8, s string) {
	n := min(len(s), len(dst)-1)
	for i := range n {
		dst[i] = int8(s[i])
	}
	dst[n] = 0
}
