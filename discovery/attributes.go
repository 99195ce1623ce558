package discovery

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// Feature names published by featureplug, in NFD's <domain>.<feature> form.
// Rules and NodeFeatureRules are written against these; keep them stable.
const (
	// FeatureGPU has one instance per physical GPU.
	FeatureGPU = "nvidia.gpu"
	// FeatureMIG has one instance per MIG device.
	FeatureMIG = "nvidia.mig"
	// FeatureDriver holds node-level driver attributes.
	FeatureDriver = "nvidia.driver"
	// FeatureCapabilities holds node-level capability flags.
	FeatureCapabilities = "nvidia.capabilities"
	// FeatureVFIO has one instance per GPU reserved for VFIO passthrough
	// (Inventory.VFIO); published only on nodes that have one.
	FeatureVFIO = "nvidia.vfio"
)

// Attribute names of the nvidia.gpu instances.
const (
	AttrIndex        = "index"
	AttrMinor        = "minor"
	AttrUUID         = "uuid"
	AttrProduct      = "product"
	AttrBrand        = "brand"
	AttrFamily       = "family"
	AttrArchitecture = "architecture"
	AttrComputeMajor = "compute.major"
	AttrComputeMinor = "compute.minor"
	AttrMemory       = "memory"
	AttrMIGCapable   = "mig.capable"
	AttrMIGEnabled   = "mig.enabled"
	AttrMIGCount     = "mig.count"
	AttrNUMA         = "numa"
	AttrPCIBus       = "pci.bus"
	AttrComputeMode  = "compute.mode"
	AttrNVLinks      = "nvlinks"
	AttrNVLinkPeers  = "nvlink.peers"
	AttrMode         = "mode"
	AttrClique       = "clique"
)

// Attribute names of the nvidia.mig instances (besides uuid, index and memory).
const (
	AttrProfile            = "profile"
	AttrMultiprocessors    = "multiprocessors"
	AttrSlicesGI           = "slices.gi"
	AttrSlicesCI           = "slices.ci"
	AttrGPUInstance        = "gi"
	AttrComputeInstance    = "ci"
	AttrEnginesCopy        = "engines.copy"
	AttrEnginesDecoder     = "engines.decoder"
	AttrEnginesEncoder     = "engines.encoder"
	AttrEnginesJPEG        = "engines.jpeg"
	AttrEnginesOFA         = "engines.ofa"
	AttrParentUUID         = "parent.uuid"
	AttrParentIndex        = "parent.index"
	AttrParentProduct      = "parent.product"
	AttrParentFamily       = "parent.family"
	AttrParentMemory       = "parent.memory"
	AttrParentNUMA         = "parent.numa"
	AttrParentComputeMajor = "parent.compute.major"
)

// Attribute names of the nvidia.vfio instances (besides pci.bus, product,
// family and numa, named as in nvidia.gpu). vendor, device and class are
// named as in NFD's pci source.
const (
	AttrVendor            = "vendor"
	AttrDevice            = "device"
	AttrClass             = "class"
	AttrDeviceName        = "device.name"
	AttrIOMMUGroup        = "iommu.group"
	AttrIOMMUGroupDevices = "iommu.group.devices"
	AttrIOMMUGroupGPUs    = "iommu.group.gpus"
	AttrIOMMUGroupHeld    = "iommu.group.held"
	AttrDriver            = "driver"
)

// Attribute names of nvidia.driver.
const (
	AttrDriverVersion = "version"
	AttrDriverMajor   = "major"
	AttrCUDAVersion   = "cuda.version"
	AttrCUDAMajor     = "cuda.major"
	AttrCUDAMinor     = "cuda.minor"
	AttrNVMLVersion   = "nvml.version"
	AttrGPUCount      = "gpu.count"
)

// Flags of nvidia.capabilities.
const (
	// FlagMIG is set when any GPU is MIG capable.
	FlagMIG = "mig"
	// FlagMIGEnabled is set when any GPU has MIG mode enabled.
	FlagMIGEnabled = "mig.enabled"
	// FlagNVLink is set when any two GPUs are connected by NVLink.
	FlagNVLink = "nvlink"
	// FlagMPS is set when any GPU can host CUDA MPS (compute capability 3.5
	// or later).
	FlagMPS = "mps"
)

// Kind is how NFD holds a feature's elements.
type Kind string

// The kinds of features featureplug publishes.
const (
	// KindInstances: a list of instances, each a map of attributes.
	KindInstances Kind = "instances"
	// KindAttributes: one map of attributes for the node.
	KindAttributes Kind = "attributes"
	// KindFlags: a set of names without values, for the node.
	KindFlags Kind = "flags"
)

// Type is the type of an attribute's values. NFD publishes every value as a
// string; the type says how that string reads and how rules compare it.
type Type uint8

// The attribute types.
const (
	// TypeString is text: match it with In, NotIn or InRegexp.
	TypeString Type = iota + 1
	// TypeInt is a decimal integer: compare it with Gt, Lt, GtLt, ...
	TypeInt
	// TypeBool is "true" or "false": match it with IsTrue or IsFalse. A
	// flag is a bool attribute published only when true.
	TypeBool
	// TypeVersion is a version of one to three numbers ("570.86.15",
	// "12.8"): compare it with type: version. A version NVML could not
	// read is published as Unknown, which is not a valid version.
	TypeVersion
	// TypeQuantity is an amount of memory in MiB, published as a decimal
	// integer (NFD compares it as an int).
	TypeQuantity
)

var typeNames = [...]string{TypeString: "string", TypeInt: "int", TypeBool: "bool", TypeVersion: "version", TypeQuantity: "quantity"}

// String returns the type's name: string, int, bool, version or quantity.
func (t Type) String() string {
	if int(t) < len(typeNames) && typeNames[t] != "" {
		return typeNames[t]
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}

// Valid reports whether s is a published value of type t. For versions it
// accepts what NFD's type: version accepts of featureplug's values.
func (t Type) Valid(s string) bool {
	_, ok := t.Parse(s)
	return ok
}

// Parse reads a published value of type t; false when s is not one.
func (t Type) Parse(s string) (Value, bool) {
	switch t {
	case TypeString:
		return Value{Str: s}, true
	case TypeInt, TypeQuantity:
		i, err := strconv.ParseInt(s, 10, 64)
		return Value{Int: i}, err == nil
	case TypeBool:
		return Value{Bool: s == "true"}, s == "true" || s == "false"
	case TypeVersion:
		parts := strings.Split(s, ".")
		if len(parts) > 3 {
			return Value{}, false
		}
		for _, p := range parts {
			if _, err := strconv.ParseUint(p, 10, 64); err != nil {
				return Value{}, false
			}
		}
		return Value{Str: s}, true
	}
	return Value{}, false
}

// Value is one attribute's typed value: Str for string and version, Int for
// int and quantity (MiB), Bool for bool.
type Value struct {
	Str  string
	Int  int64
	Bool bool
}

// Item is what an attribute is read from: Inventory for nvidia.driver and
// nvidia.capabilities, Inventory and GPU for nvidia.gpu, GPU (the parent)
// and MIG for nvidia.mig, VFIO for nvidia.vfio.
type Item struct {
	Inventory *Inventory
	GPU       *GPU
	MIG       *MIGDevice
	VFIO      *VFIODevice
}

// Attribute is one element of a feature featureplug publishes: an
// attribute of a feature's instances or of the node, or a flag. The catalog
// of them (Attributes) is the one place names, types and meanings are
// written; features, the README's table and the rules schema derive from it.
type Attribute struct {
	// Feature is the feature it belongs to, e.g. FeatureGPU.
	Feature string
	// Kind is the feature's kind.
	Kind Kind
	// Name is the attribute's (or flag's) name in the feature.
	Name string
	// Type is the type of its values.
	Type Type
	// Example is a typical value, valid for Type.
	Example string
	// Doc says what it is, in one line.
	Doc string

	// Exactly one getter is set, by Kind and Feature. Getters return the
	// value as published: NFD's strings are the canonical form, and
	// building features calls them for every instance.
	node   func(*Inventory) (string, bool)
	gpu    func(*Inventory, *GPU) string
	mig    func(*MIGDevice) string
	parent func(*GPU) string // nvidia.mig attributes of the parent GPU
	vfio   func(*VFIODevice) string
}

// Get returns the attribute's value of an item, as NFD publishes it. It
// reports false when the item does not have it (a flag that is not set, a
// version without a major part); the feature then omits it.
func (a *Attribute) Get(it Item) (string, bool) {
	switch {
	case a.node != nil:
		return a.node(it.Inventory)
	case a.gpu != nil:
		return a.gpu(it.Inventory, it.GPU), true
	case a.parent != nil:
		return a.parent(it.GPU), true
	case a.vfio != nil:
		return a.vfio(it.VFIO), true
	default:
		return a.mig(it.MIG), true
	}
}

// Value returns the attribute's typed value of an item. It reports false
// when the item does not have it or has no valid value of the attribute's
// type (a version NVML reported as unknown).
func (a *Attribute) Value(it Item) (Value, bool) {
	s, ok := a.Get(it)
	if !ok {
		return Value{}, false
	}
	return a.Type.Parse(s)
}

// Attributes returns the catalog: every attribute and flag featureplug
// publishes, ordered by feature (nvidia.gpu, nvidia.mig, nvidia.vfio,
// nvidia.driver, nvidia.capabilities) and then as documented. The slice is the caller's.
func Attributes() []Attribute { return slices.Clone(catalog) }

func gpuAttr(name string, t Type, example, doc string, get func(*Inventory, *GPU) string) Attribute {
	return Attribute{Feature: FeatureGPU, Kind: KindInstances, Name: name, Type: t, Example: example, Doc: doc, gpu: get}
}

func migAttr(name string, t Type, example, doc string, get func(*MIGDevice) string) Attribute {
	return Attribute{Feature: FeatureMIG, Kind: KindInstances, Name: name, Type: t, Example: example, Doc: doc, mig: get}
}

// parentAttr is an nvidia.mig attribute read from the MIG device's GPU.
func parentAttr(name string, t Type, example, doc string, get func(*GPU) string) Attribute {
	return Attribute{Feature: FeatureMIG, Kind: KindInstances, Name: name, Type: t, Example: example, Doc: doc, parent: get}
}

func vfioAttr(name string, t Type, example, doc string, get func(*VFIODevice) string) Attribute {
	return Attribute{Feature: FeatureVFIO, Kind: KindInstances, Name: name, Type: t, Example: example, Doc: doc, vfio: get}
}

func driverAttr(name string, t Type, example, doc string, get func(*Inventory) (string, bool)) Attribute {
	return Attribute{Feature: FeatureDriver, Kind: KindAttributes, Name: name, Type: t, Example: example, Doc: doc, node: get}
}

func capability(name, doc string, get func(*Inventory) bool) Attribute {
	return Attribute{Feature: FeatureCapabilities, Kind: KindFlags, Name: name, Type: TypeBool, Example: "true", Doc: doc,
		node: func(inv *Inventory) (string, bool) { b := get(inv); return strconv.FormatBool(b), b }}
}

// catalog is read-only: Features reads it in place, Attributes hands out
// copies.
var catalog = []Attribute{
	gpuAttr(AttrIndex, TypeInt, "0", "NVML device index",
		func(_ *Inventory, g *GPU) string { return strconv.Itoa(g.Index) }),
	gpuAttr(AttrMinor, TypeInt, "0", "device minor number, as in /dev/nvidia0",
		func(_ *Inventory, g *GPU) string { return strconv.Itoa(g.Minor) }),
	gpuAttr(AttrUUID, TypeString, "GPU-6f4a1c2e-0b9d-4e57-8a3f-1d2c3b4a5f60", "GPU UUID",
		func(_ *Inventory, g *GPU) string { return g.UUID }),
	gpuAttr(AttrProduct, TypeString, "NVIDIA A100-SXM4-40GB", "product as NVML names it",
		func(_ *Inventory, g *GPU) string { return g.Product }),
	gpuAttr(AttrBrand, TypeString, "Nvidia", "brand as go-nvlib names it",
		func(_ *Inventory, g *GPU) string { return g.Brand }),
	gpuAttr(AttrFamily, TypeString, "ampere", "architecture family, lowercase, as in labels",
		func(_ *Inventory, g *GPU) string { return g.Family }),
	gpuAttr(AttrArchitecture, TypeString, "Ampere", "architecture as go-nvlib names it",
		func(_ *Inventory, g *GPU) string { return g.Architecture }),
	gpuAttr(AttrComputeMajor, TypeInt, "8", "CUDA compute capability, major",
		func(_ *Inventory, g *GPU) string { return strconv.Itoa(g.ComputeMajor) }),
	gpuAttr(AttrComputeMinor, TypeInt, "0", "CUDA compute capability, minor",
		func(_ *Inventory, g *GPU) string { return strconv.Itoa(g.ComputeMinor) }),
	gpuAttr(AttrMemory, TypeQuantity, "40960", "total memory in MiB",
		func(_ *Inventory, g *GPU) string { return strconv.FormatUint(g.MemoryMiB, 10) }),
	gpuAttr(AttrMIGCapable, TypeBool, "true", "whether the GPU supports MIG",
		func(_ *Inventory, g *GPU) string { return strconv.FormatBool(g.MIGCapable) }),
	gpuAttr(AttrMIGEnabled, TypeBool, "false", "whether MIG mode is enabled",
		func(_ *Inventory, g *GPU) string { return strconv.FormatBool(g.MIGEnabled) }),
	gpuAttr(AttrMIGCount, TypeInt, "0", "number of MIG devices",
		func(_ *Inventory, g *GPU) string { return strconv.Itoa(len(g.MIGDevices)) }),
	gpuAttr(AttrNUMA, TypeInt, "0", "NUMA node (-1 when unknown)",
		func(_ *Inventory, g *GPU) string { return strconv.Itoa(g.NUMANode) }),
	gpuAttr(AttrPCIBus, TypeString, "0000:07:00.0", "PCI address",
		func(_ *Inventory, g *GPU) string { return g.PCIBusID }),
	gpuAttr(AttrComputeMode, TypeString, "Default", "Default, ExclusiveProcess, Prohibited or unknown",
		func(_ *Inventory, g *GPU) string { return g.ComputeMode }),
	gpuAttr(AttrMode, TypeString, "compute", "PCI class: compute (3D controller), graphics (VGA controller) or unknown; not the compute mode",
		func(_ *Inventory, g *GPU) string { return g.Mode }),
	gpuAttr(AttrClique, TypeString, "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1", "NVLink multi-node fabric (IMEX) <cluster UUID>.<clique ID>; empty when not fabric-attached",
		func(_ *Inventory, g *GPU) string { return g.Clique }),
	gpuAttr(AttrNVLinks, TypeInt, "12", "active NVLinks: 18 on an H100 SXM (DGX/HGX), 12 on a bridged H100 NVL, 0 without NVLink",
		func(_ *Inventory, g *GPU) string { return strconv.Itoa(g.NVLinks) }),
	gpuAttr(AttrNVLinkPeers, TypeInt, "7", "other GPUs it reaches by NVLink: 7 on an 8-GPU NVSwitch baseboard, 1 on a bridged pair",
		func(inv *Inventory, g *GPU) string { return strconv.Itoa(inv.Links.nvlinkPeers(g.Index)) }),

	migAttr(AttrIndex, TypeInt, "0", "MIG device index on its GPU",
		func(m *MIGDevice) string { return strconv.Itoa(m.Index) }),
	migAttr(AttrUUID, TypeString, "MIG-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c5d", "MIG device UUID",
		func(m *MIGDevice) string { return m.UUID }),
	migAttr(AttrProfile, TypeString, "1g.10gb", "profile, e.g. 3g.40gb or 1g.18gb+me",
		func(m *MIGDevice) string { return m.Profile }),
	migAttr(AttrMemory, TypeQuantity, "9856", "memory in MiB",
		func(m *MIGDevice) string { return strconv.FormatUint(m.MemoryMiB, 10) }),
	migAttr(AttrMultiprocessors, TypeInt, "14", "streaming multiprocessors (SMs)",
		func(m *MIGDevice) string { return strconv.Itoa(m.Multiprocessors) }),
	migAttr(AttrSlicesGI, TypeInt, "1", "GPU instance slices",
		func(m *MIGDevice) string { return strconv.Itoa(m.GISlices) }),
	migAttr(AttrSlicesCI, TypeInt, "1", "compute instance slices",
		func(m *MIGDevice) string { return strconv.Itoa(m.CISlices) }),
	migAttr(AttrGPUInstance, TypeInt, "13", "GPU instance ID",
		func(m *MIGDevice) string { return strconv.Itoa(m.GPUInstanceID) }),
	migAttr(AttrComputeInstance, TypeInt, "0", "compute instance ID",
		func(m *MIGDevice) string { return strconv.Itoa(m.ComputeInstanceID) }),
	migAttr(AttrEnginesCopy, TypeInt, "1", "copy engines",
		func(m *MIGDevice) string { return strconv.Itoa(m.Engines.Copy) }),
	migAttr(AttrEnginesDecoder, TypeInt, "0", "video decoders",
		func(m *MIGDevice) string { return strconv.Itoa(m.Engines.Decoder) }),
	migAttr(AttrEnginesEncoder, TypeInt, "0", "video encoders",
		func(m *MIGDevice) string { return strconv.Itoa(m.Engines.Encoder) }),
	migAttr(AttrEnginesJPEG, TypeInt, "0", "JPEG decoders",
		func(m *MIGDevice) string { return strconv.Itoa(m.Engines.JPEG) }),
	migAttr(AttrEnginesOFA, TypeInt, "0", "optical flow accelerators",
		func(m *MIGDevice) string { return strconv.Itoa(m.Engines.OFA) }),
	parentAttr(AttrParentUUID, TypeString, "GPU-6f4a1c2e-0b9d-4e57-8a3f-1d2c3b4a5f60", "UUID of the GPU it lives on",
		func(p *GPU) string { return p.UUID }),
	parentAttr(AttrParentIndex, TypeInt, "0", "NVML index of the GPU it lives on",
		func(p *GPU) string { return strconv.Itoa(p.Index) }),
	parentAttr(AttrParentProduct, TypeString, "NVIDIA A100-SXM4-40GB", "product of the GPU it lives on",
		func(p *GPU) string { return p.Product }),
	parentAttr(AttrParentFamily, TypeString, "ampere", "architecture family of the GPU it lives on",
		func(p *GPU) string { return p.Family }),
	parentAttr(AttrParentMemory, TypeQuantity, "40960", "total memory of the GPU it lives on, in MiB",
		func(p *GPU) string { return strconv.FormatUint(p.MemoryMiB, 10) }),
	parentAttr(AttrParentNUMA, TypeInt, "0", "NUMA node of the GPU it lives on (-1 when unknown)",
		func(p *GPU) string { return strconv.Itoa(p.NUMANode) }),
	parentAttr(AttrParentComputeMajor, TypeInt, "8", "CUDA compute capability of the GPU it lives on, major",
		func(p *GPU) string { return strconv.Itoa(p.ComputeMajor) }),

	vfioAttr(AttrPCIBus, TypeString, "0000:c1:00.0", "PCI address",
		func(d *VFIODevice) string { return d.PCIAddress }),
	vfioAttr(AttrVendor, TypeString, "10de", "PCI vendor ID, as NFD's pci source writes it",
		func(d *VFIODevice) string { return d.VendorID }),
	vfioAttr(AttrDevice, TypeString, "26b9", "PCI device ID, as NFD's pci source writes it",
		func(d *VFIODevice) string { return d.DeviceID }),
	vfioAttr(AttrClass, TypeString, "0302", "PCI class: 0302 (3D controller) or 0300 (VGA controller)",
		func(d *VFIODevice) string { return d.Class }),
	vfioAttr(AttrProduct, TypeString, "NVIDIA L40S", "product as NVML names it (from the device ID; vendor:device for IDs featureplug does not know)",
		func(d *VFIODevice) string { return d.Product }),
	vfioAttr(AttrDeviceName, TypeString, "AD102GL_L40S", "device name as KubeVirt resource names use it (nvidia.com/<device.name>); the device ID for IDs featureplug does not know",
		func(d *VFIODevice) string { return d.DeviceName }),
	vfioAttr(AttrFamily, TypeString, "ada-lovelace", "architecture family, lowercase, as in nvidia.gpu",
		func(d *VFIODevice) string { return d.Family }),
	vfioAttr(AttrIOMMUGroup, TypeInt, "45", "IOMMU group (-1 without an IOMMU)",
		func(d *VFIODevice) string { return strconv.Itoa(d.IOMMUGroup) }),
	vfioAttr(AttrIOMMUGroupDevices, TypeInt, "2", "devices in the IOMMU group, the GPU included (a VM gets them all)",
		func(d *VFIODevice) string { return strconv.Itoa(len(d.GroupMembers) + 1) }),
	vfioAttr(AttrIOMMUGroupGPUs, TypeInt, "1", "GPUs in the IOMMU group, this one included (more than 1: they cannot go to different VMs)",
		func(d *VFIODevice) string { return strconv.Itoa(d.GroupGPUs()) }),
	vfioAttr(AttrIOMMUGroupHeld, TypeInt, "0", "devices of the IOMMU group bound to a host driver (not vfio-pci, pci-stub, a bridge's pcieport or none): VFIO cannot open the group while any is",
		func(d *VFIODevice) string { return strconv.Itoa(d.GroupHeld()) }),
	vfioAttr(AttrNUMA, TypeInt, "1", "NUMA node (-1 when unknown)",
		func(d *VFIODevice) string { return strconv.Itoa(d.NUMANode) }),
	vfioAttr(AttrDriver, TypeString, "vfio-pci", "kernel driver: vfio-pci (or nvgrace_gpu_vfio_pci); none while unbound",
		func(d *VFIODevice) string { return cmp.Or(d.Driver, "none") }),

	driverAttr(AttrDriverVersion, TypeVersion, "570.86.15", "kernel driver version",
		func(inv *Inventory) (string, bool) { return inv.DriverVersion, inv.DriverVersion != "" }),
	driverAttr(AttrDriverMajor, TypeInt, "570", "kernel driver version, major",
		func(inv *Inventory) (string, bool) {
			major, _, ok := strings.Cut(inv.DriverVersion, ".")
			return major, ok
		}),
	driverAttr(AttrCUDAVersion, TypeVersion, "12.8", "CUDA version the driver supports",
		func(inv *Inventory) (string, bool) { return inv.CUDADriverVersion, inv.CUDADriverVersion != "" }),
	driverAttr(AttrCUDAMajor, TypeInt, "12", "CUDA version the driver supports, major",
		func(inv *Inventory) (string, bool) {
			major, _, ok := strings.Cut(inv.CUDADriverVersion, ".")
			return major, ok
		}),
	driverAttr(AttrCUDAMinor, TypeInt, "8", "CUDA version the driver supports, minor",
		func(inv *Inventory) (string, bool) {
			_, minor, ok := strings.Cut(inv.CUDADriverVersion, ".")
			return minor, ok
		}),
	driverAttr(AttrNVMLVersion, TypeString, "12.570.86.15", "NVML library version (four parts: not comparable with type: version)",
		func(inv *Inventory) (string, bool) { return inv.NVMLVersion, inv.NVMLVersion != "" }),
	driverAttr(AttrGPUCount, TypeInt, "8", "number of GPUs NVML sees (not those bound to vfio-pci)",
		func(inv *Inventory) (string, bool) { return strconv.Itoa(len(inv.GPUs)), true }),

	capability(FlagMIG, "any GPU is MIG capable",
		func(inv *Inventory) bool { return inv.anyGPU(func(g *GPU) bool { return g.MIGCapable }) }),
	capability(FlagMIGEnabled, "any GPU is in MIG mode",
		func(inv *Inventory) bool { return inv.anyGPU(func(g *GPU) bool { return g.MIGEnabled }) }),
	capability(FlagNVLink, "any two GPUs are connected by NVLink",
		func(inv *Inventory) bool { return inv.Links.hasNVLink() }),
	capability(FlagMPS, "any GPU can host CUDA MPS (compute capability 3.5 or later)",
		func(inv *Inventory) bool {
			return inv.anyGPU(func(g *GPU) bool { return g.ComputeMajor > 3 || (g.ComputeMajor == 3 && g.ComputeMinor >= 5) })
		}),
}
