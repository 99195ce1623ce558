// Package discovery reads what a node's NVIDIA GPUs are through an injected
// nvml.Interface (the real driver or the fake node), and those bound to
// vfio-pci for virtual machines from sysfs, into an Inventory, turns
// the Inventory into NFD features, and watches NVML for health events. What
// a health event does to a device is decided here too: NVIDIA's XID catalog
// (xidcatalog.go) gives the defaults, a HealthPolicy the overrides, and
// Decide the effect.
//
// Everything downstream (labels, rules, plugin servers) consumes the Inventory
// or the Features derived from it; nothing downstream calls NVML.
package discovery

import (
	"fmt"

	"github.com/featureplug/featureplug/discovery/migplace"
)

// Unknown is recorded for a string fact NVML does not support on a device
// (ERROR_NOT_SUPPORTED): the fact is absent, not an error.
const Unknown = "unknown"

// NoNUMANode is the NUMANode of a GPU whose NUMA affinity is unknown or that
// sits on a machine without NUMA.
const NoNUMANode = -1

// Inventory is everything discovery learned about one node's GPUs at one
// moment. It is a plain value: safe to copy, compare and serialize.
type Inventory struct {
	// DriverVersion is the kernel driver version, e.g. "570.86.15".
	DriverVersion string `json:"driverVersion"`
	// CUDADriverVersion is the CUDA version the driver supports, e.g. "12.8".
	CUDADriverVersion string `json:"cudaDriverVersion"`
	// NVMLVersion is the NVML library version, e.g. "12.570.86.15".
	NVMLVersion string `json:"nvmlVersion"`
	// GPUs are the node's physical GPUs, ordered by NVML index.
	GPUs []GPU `json:"gpus"`
	// Links is the GPU-to-GPU link matrix, indexed by GPU index.
	Links LinkMatrix `json:"links,omitempty"`
	// LostGPUs are the NVML indexes of GPUs NVML reported lost
	// (ERROR_GPU_IS_LOST) before discovery could read their UUID: they are
	// not in GPUs and cannot be advertised.
	LostGPUs []int `json:"lostGPUs,omitempty"`
	// VFIO are the NVIDIA GPUs reserved for VFIO passthrough to virtual
	// machines, read from sysfs (NVML does not see them; vfio.go),
	// ordered by PCI address. On a node whose GPUs are all bound to
	// vfio-pci NVML is not read: the driver and NVML versions are empty.
	VFIO []VFIODevice `json:"vfio,omitempty"`
}

// GPU is one physical GPU.
type GPU struct {
	// Index is the NVML device index.
	Index int `json:"index"`
	// Minor is the device minor number (/dev/nvidia<Minor>).
	Minor int `json:"minor"`
	// UUID is the GPU UUID, e.g. "GPU-6f4a...".
	UUID string `json:"uuid"`
	// Product is the product name as NVML reports it, e.g. "NVIDIA A100-SXM4-40GB".
	Product string `json:"product"`
	// Brand is the brand as go-nvlib names it, e.g. "Nvidia" or "Tesla".
	Brand string `json:"brand"`
	// Architecture is the architecture as go-nvlib names it, e.g. "Ampere".
	Architecture string `json:"architecture"`
	// Family is the lowercase architecture family used in labels, e.g. "ampere".
	Family string `json:"family"`
	// ComputeMajor and ComputeMinor are the CUDA compute capability.
	ComputeMajor int `json:"computeMajor"`
	ComputeMinor int `json:"computeMinor"`
	// MemoryMiB is the total framebuffer memory in MiB.
	MemoryMiB uint64 `json:"memoryMiB"`
	// PCIBusID is the PCI address in domain:bus:device.function form,
	// lowercase, e.g. "0000:07:00.0".
	PCIBusID string `json:"pciBusID"`
	// NUMANode is the NUMA node closest to the GPU, or NoNUMANode.
	NUMANode int `json:"numaNode"`
	// AddressingMode is how the GPU addresses system memory on a
	// coherent platform (Grace Hopper, Grace Blackwell), as go-nvlib names
	// it: "HMM", "ATS" or "None" (coherent, neither active); "" where the
	// platform has none or the driver cannot tell.
	AddressingMode string `json:"addressingMode,omitempty"`
	// PCIeRoot is the PCIe root complex the GPU hangs off, as sysfs names
	// it ("pci0000:00"): GPUs and NICs under one root share a host
	// bridge, which GPUDirect RDMA wants. "" when sysfs does not tell
	// (pcie.go).
	PCIeRoot string `json:"pcieRoot,omitempty"`
	// ComputeMode is "Default", "ExclusiveProcess", "Prohibited" or Unknown.
	ComputeMode string `json:"computeMode"`
	// MIGCapable reports whether the GPU supports MIG.
	MIGCapable bool `json:"migCapable"`
	// MIGEnabled reports whether MIG mode is currently enabled.
	MIGEnabled bool `json:"migEnabled"`
	// MIGModePending is set while a MIG mode change waits to take effect
	// (NVML's pending mode differs from the current one): until the GPU is
	// idle, or on Ampere until it is reset.
	MIGModePending bool `json:"migModePending,omitempty"`
	// MIGGeometry is how the GPU can be partitioned, read only by
	// ReadMIGGeometry; nil otherwise and for GPUs that list no MIG profile.
	MIGGeometry *MIGGeometry `json:"migGeometry,omitempty"`
	// MIGDevices are the GPU's MIG devices (only when MIGEnabled), ordered
	// by GPU instance ID, then compute instance ID.
	MIGDevices []MIGDevice `json:"migDevices,omitempty"`
	// Mode is the GPU's PCI class as gpu-feature-discovery's gpu.mode
	// reads it: ModeCompute (3D controller), ModeGraphics (VGA
	// controller) or Unknown (another class, or NVML cannot tell). It is
	// not the compute mode (ComputeMode) and changes only when the GPU is
	// switched with NVIDIA's displaymodeselector (mode.go).
	Mode string `json:"mode"`
	// Clique is "<cluster UUID>.<clique ID>" of a GPU attached to an
	// NVLink multi-node fabric (IMEX domain, e.g. GB200 NVL72), "" when it
	// is not attached (mode.go).
	Clique string `json:"clique,omitempty"`
	// NVLinks is the number of the GPU's active NVLinks (18 on an H100 SXM
	// of an HGX baseboard, 12 on a bridged H100 NVL, 0 without NVLink).
	NVLinks int `json:"nvlinks,omitempty"`
	// Lost is set when NVML reported the GPU lost (ERROR_GPU_IS_LOST)
	// while discovery read it: the facts read before are kept, the rest are
	// zero or Unknown, and the health watcher reports it unhealthy.
	Lost bool `json:"lost,omitempty"`
}

// MIGDevice is one MIG device: a compute instance inside a GPU instance.
type MIGDevice struct {
	// ParentIndex and ParentUUID identify the physical GPU.
	ParentIndex int    `json:"parentIndex"`
	ParentUUID  string `json:"parentUUID"`
	// Index is the MIG device's position among its parent's MIG devices.
	Index int `json:"index"`
	// GPUInstanceID and ComputeInstanceID are the NVML GI and CI IDs.
	GPUInstanceID     int `json:"gpuInstanceID"`
	ComputeInstanceID int `json:"computeInstanceID"`
	// UUID is the MIG device UUID, e.g. "MIG-1a2b...".
	UUID string `json:"uuid"`
	// Profile is the canonical profile name, e.g. "1g.10gb" or "1g.18gb+me".
	Profile string `json:"profile"`
	// MemoryMiB is the MIG device's memory in MiB.
	MemoryMiB uint64 `json:"memoryMiB"`
	// Multiprocessors is the number of SMs of the compute instance.
	Multiprocessors int `json:"multiprocessors"`
	// GISlices and CISlices are the GPU-instance and compute-instance slice counts.
	GISlices int `json:"giSlices"`
	CISlices int `json:"ciSlices"`
	// Engines counts the media and copy engines of the GPU instance.
	Engines Engines `json:"engines"`
	// GPUInstanceProfileID and Placement are the GPU instance's profile ID
	// (GpuInstanceInfo.ProfileId) and placement, read only by
	// ReadMIGGeometry.
	GPUInstanceProfileID *uint32             `json:"gpuInstanceProfileID,omitempty"`
	Placement            *migplace.Placement `json:"placement,omitempty"`
}

// Engines counts the engines of a GPU instance, as the GPU instance profile
// reports them.
type Engines = migplace.Engines

// GPUByUUID returns the GPU with the given UUID.
func (inv *Inventory) GPUByUUID(uuid string) (*GPU, bool) {
	for i := range inv.GPUs {
		if inv.GPUs[i].UUID == uuid {
			return &inv.GPUs[i], true
		}
	}
	return nil, false
}

// MIGDeviceCount returns the number of MIG devices on the node.
func (inv *Inventory) MIGDeviceCount() int {
	n := 0
	for _, g := range inv.GPUs {
		n += len(g.MIGDevices)
	}
	return n
}

// LinkMatrix holds, for every ordered pair of GPUs (by index), how they are
// connected. Links[i][j] is the link from GPU i to GPU j; the diagonal is
// unused. It is computed once per discovery and read by allocation.
type LinkMatrix [][]Link

// Link describes the connection between two GPUs.
type Link struct {
	// NVLinks is the number of NVLink lanes that connect the two GPUs
	// (nvidia-smi's NV<n>): direct lanes, or through an NVSwitch fabric the
	// smaller of the two GPUs' link counts.
	NVLinks int `json:"nvlinks,omitempty"`
	// PCIe is the closest common PCIe ancestor.
	PCIe PCIeLevel `json:"pcie,omitempty"`
}

// PCIeLevel is NVML's GPU topology level, with nvidia-smi's names.
type PCIeLevel string

// PCIe topology levels, nearest first, as nvidia-smi topo -m names them.
const (
	PCIeUnknown    PCIeLevel = ""
	PCIeInternal   PCIeLevel = "SAME" // same board (multi-GPU boards)
	PCIeSingle     PCIeLevel = "PIX"  // at most one PCIe bridge
	PCIeMultiple   PCIeLevel = "PXB"  // several PCIe bridges, no host bridge
	PCIeHostBridge PCIeLevel = "PHB"  // a PCIe host bridge
	PCIeNode       PCIeLevel = "NODE" // host bridges within one NUMA node
	PCIeSystem     PCIeLevel = "SYS"  // across NUMA nodes (SMP interconnect)
)

// Score rates a link for allocation: higher is better. NVLink lanes dominate;
// among PCIe paths, nearer levels score higher.
func (l Link) Score() int {
	score := l.NVLinks * 100
	switch l.PCIe {
	case PCIeInternal:
		score += 60
	case PCIeSingle:
		score += 50
	case PCIeMultiple:
		score += 40
	case PCIeHostBridge:
		score += 30
	case PCIeNode:
		score += 20
	case PCIeSystem:
		score += 10
	}
	return score
}

// String formats a link as nvidia-smi topo -m does: "NV12" or "PXB".
func (l Link) String() string {
	if l.NVLinks > 0 {
		return fmt.Sprintf("NV%d", l.NVLinks)
	}
	if l.PCIe == PCIeUnknown {
		return "X"
	}
	return string(l.PCIe)
}

// Score returns the link score between GPU indexes a and b, or 0 when the
// matrix does not cover them.
func (m LinkMatrix) Score(a, b int) int {
	if a < 0 || b < 0 || a >= len(m) || b >= len(m[a]) || a == b {
		return 0
	}
	return m[a][b].Score()
}
