package discovery

import (
	"strconv"
	"strings"

	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
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

// Features converts an Inventory into NFD features. The result is
// deterministic: instances are ordered by GPU index, then MIG device index.
func Features(inv *Inventory) *nfdv1alpha1.Features {
	f := nfdv1alpha1.NewFeatures()

	f.Attributes[FeatureDriver] = nfdv1alpha1.NewAttributeFeatures(DriverAttributes(inv))

	var flags []string
	if inv.anyGPU(func(g *GPU) bool { return g.MIGCapable }) {
		flags = append(flags, FlagMIG)
	}
	if inv.anyGPU(func(g *GPU) bool { return g.MIGEnabled }) {
		flags = append(flags, FlagMIGEnabled)
	}
	if inv.Links.hasNVLink() {
		flags = append(flags, FlagNVLink)
	}
	if inv.anyGPU(func(g *GPU) bool { return g.ComputeMajor > 3 || (g.ComputeMajor == 3 && g.ComputeMinor >= 5) }) {
		flags = append(flags, FlagMPS)
	}
	f.Flags[FeatureCapabilities] = nfdv1alpha1.NewFlagFeatures(flags...)

	gpus := make([]nfdv1alpha1.InstanceFeature, 0, len(inv.GPUs))
	// Never nil: the API server refuses an instance feature with null elements.
	migs := []nfdv1alpha1.InstanceFeature{}
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		gpus = append(gpus, *nfdv1alpha1.NewInstanceFeature(GPUAttributes(inv, g)))
		for j := range g.MIGDevices {
			migs = append(migs, *nfdv1alpha1.NewInstanceFeature(MIGAttributes(g, &g.MIGDevices[j])))
		}
	}
	f.Instances[FeatureGPU] = nfdv1alpha1.NewInstanceFeatures(gpus...)
	f.Instances[FeatureMIG] = nfdv1alpha1.NewInstanceFeatures(migs...)
	return f
}

// DriverAttributes returns the attributes of the nvidia.driver feature.
func DriverAttributes(inv *Inventory) map[string]string {
	attrs := map[string]string{
		AttrDriverVersion: inv.DriverVersion,
		AttrCUDAVersion:   inv.CUDADriverVersion,
		AttrNVMLVersion:   inv.NVMLVersion,
		AttrGPUCount:      strconv.Itoa(len(inv.GPUs)),
	}
	if major, _, ok := strings.Cut(inv.DriverVersion, "."); ok {
		attrs[AttrDriverMajor] = major
	}
	if major, minor, ok := strings.Cut(inv.CUDADriverVersion, "."); ok {
		attrs[AttrCUDAMajor] = major
		attrs[AttrCUDAMinor] = minor
	}
	return attrs
}

// GPUAttributes returns the attributes of one nvidia.gpu instance.
func GPUAttributes(inv *Inventory, g *GPU) map[string]string {
	return map[string]string{
		AttrIndex:        strconv.Itoa(g.Index),
		AttrMinor:        strconv.Itoa(g.Minor),
		AttrUUID:         g.UUID,
		AttrProduct:      g.Product,
		AttrBrand:        g.Brand,
		AttrFamily:       g.Family,
		AttrArchitecture: g.Architecture,
		AttrComputeMajor: strconv.Itoa(g.ComputeMajor),
		AttrComputeMinor: strconv.Itoa(g.ComputeMinor),
		AttrMemory:       strconv.FormatUint(g.MemoryMiB, 10),
		AttrMIGCapable:   strconv.FormatBool(g.MIGCapable),
		AttrMIGEnabled:   strconv.FormatBool(g.MIGEnabled),
		AttrMIGCount:     strconv.Itoa(len(g.MIGDevices)),
		AttrNUMA:         strconv.Itoa(g.NUMANode),
		AttrPCIBus:       g.PCIBusID,
		AttrComputeMode:  g.ComputeMode,
		AttrNVLinks:      strconv.Itoa(g.NVLinks),
		AttrNVLinkPeers:  strconv.Itoa(inv.Links.nvlinkPeers(g.Index)),
	}
}

// MIGAttributes returns the attributes of one nvidia.mig instance, including
// the attributes of its parent GPU that rules commonly match on.
func MIGAttributes(parent *GPU, m *MIGDevice) map[string]string {
	return map[string]string{
		AttrIndex:              strconv.Itoa(m.Index),
		AttrUUID:               m.UUID,
		AttrProfile:            m.Profile,
		AttrMemory:             strconv.FormatUint(m.MemoryMiB, 10),
		AttrMultiprocessors:    strconv.Itoa(m.Multiprocessors),
		AttrSlicesGI:           strconv.Itoa(m.GISlices),
		AttrSlicesCI:           strconv.Itoa(m.CISlices),
		AttrGPUInstance:        strconv.Itoa(m.GPUInstanceID),
		AttrComputeInstance:    strconv.Itoa(m.ComputeInstanceID),
		AttrEnginesCopy:        strconv.Itoa(m.Engines.Copy),
		AttrEnginesDecoder:     strconv.Itoa(m.Engines.Decoder),
		AttrEnginesEncoder:     strconv.Itoa(m.Engines.Encoder),
		AttrEnginesJPEG:        strconv.Itoa(m.Engines.JPEG),
		AttrEnginesOFA:         strconv.Itoa(m.Engines.OFA),
		AttrParentUUID:         parent.UUID,
		AttrParentIndex:        strconv.Itoa(parent.Index),
		AttrParentProduct:      parent.Product,
		AttrParentFamily:       parent.Family,
		AttrParentMemory:       strconv.FormatUint(parent.MemoryMiB, 10),
		AttrParentNUMA:         strconv.Itoa(parent.NUMANode),
		AttrParentComputeMajor: strconv.Itoa(parent.ComputeMajor),
	}
}

func (inv *Inventory) anyGPU(pred func(*GPU) bool) bool {
	for i := range inv.GPUs {
		if pred(&inv.GPUs[i]) {
			return true
		}
	}
	return false
}

func (m LinkMatrix) hasNVLink() bool {
	for i := range m {
		if m.nvlinkPeers(i) > 0 {
			return true
		}
	}
	return false
}

// nvlinkPeers returns how many other GPUs GPU i reaches by NVLink.
func (m LinkMatrix) nvlinkPeers(i int) int {
	if i < 0 || i >= len(m) {
		return 0
	}
	n := 0
	for j, l := range m[i] {
		if j != i && l.NVLinks > 0 {
			n++
		}
	}
	return n
}
