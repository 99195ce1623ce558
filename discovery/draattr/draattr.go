// Package draattr is the Dynamic Resource Allocation form of discovery's
// attribute catalog: the typed attributes and capacities a device carries
// in featureplug's ResourceSlice (driver gpu.featureplug.io), its name in
// the slice, and what an NFD expression of a rule (nvidia.gpu.X,
// nvidia.mig.X, nvidia.driver.X, a nvidia.capabilities flag) reads on a
// DRA device.
//
// A Schema holds one naming of it. Featureplug's own (For(Own)) names
// attributes after the catalog, made C identifiers (lowerCamel of the
// dotted name: mig.enabled -> migEnabled) in the driver's domain (Domain).
// NVIDIA compatibility (For(NVIDIA), the rules file's dra.compatibility:
// nvidia) publishes what NVIDIA's DRA driver also publishes under NVIDIA's
// names, qualified by its domain (gpu.nvidia.com/productName), so claims
// written for that driver select featureplug's devices unchanged; see
// nvidia.go. Both carry the standard attributes of KEP-6072
// (resource.kubernetes.io/pcieRoot, pciBusID, numaNode), a MIG device
// those of its parent GPU.
//
// The DRA sink publishes Device's attributes and the class compiler
// (rules/draclass) reads the same schema through Lookup, so a DeviceClass's
// CEL selector and the published device agree by construction.
//
// resource.k8s.io allows 32 attributes and capacities per device. What
// only repeats another attribute is not published: the compute capability
// is one version (computeCapability, whose major() and minor() rules'
// compute.major and compute.minor read), the driver's and CUDA's majors
// and minors are parts of their versions, the PCI address and NUMA node
// are the standard attributes. The memory, the multiprocessors and the
// engine counts are capacities, as NVIDIA publishes them. A device
// carries:
//
//   - a whole GPU: every nvidia.gpu attribute;
//   - a MIG device: every nvidia.mig attribute, and of its parent GPU only
//     what nvidia.mig repeats (parentUuid, parentIndex, parentProduct,
//     parentFamily, parentMemory in MiB), the standard attributes and the
//     compute capability;
//   - both: type ("gpu" or "mig"), the node's driver attributes
//     (driverVersion and cudaVersion as versions, nvmlVersion, gpuCount),
//     the node's capability flags as bools (capabilityNvlink, and on a
//     whole GPU capabilityMig, capabilityMigEnabled and capabilityMps; a
//     MIG device lives on a node where those three are always set),
//     addressingMode where the platform has one, and, added by the sink,
//     resource (AttrResource).
//
// Device gives a GPU at most 30 attributes and capacities and a MIG
// device 30, which leaves the sink room for resource and a shares
// capacity (time-slicing) under the 32 resource.k8s.io allows; Names
// lists them. Versions are semantic versions: "12.8" is published as
// "12.8.0", leading zeros are dropped ("535.104.05" -> "535.104.5"), and a
// version NVML could not read is not published.
package draattr

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/featureplug/featureplug/discovery"
)

// Domain is the domain of featureplug's attributes and capacities: the
// DRA driver's name. Unqualified names are in it.
const Domain = "gpu.featureplug.io"

// Attributes and capacities outside the catalog, by their names in
// featureplug's own schema (Schema.Published gives a schema's name).
const (
	// AttrType is "gpu" for a whole GPU and "mig" for a MIG device.
	AttrType resourceapi.QualifiedName = "type"
	// AttrResource is the resource name the rules gave the device. Device
	// does not know it: the DRA sink adds it.
	AttrResource resourceapi.QualifiedName = "resource"
	// AttrComputeCapability is the CUDA compute capability as a version,
	// "<major>.<minor>.0" (of the parent GPU for a MIG device).
	AttrComputeCapability resourceapi.QualifiedName = "computeCapability"
	// AttrAddressingMode is the GPU's addressing mode on a coherent
	// platform ("ATS", "HMM", "None"); absent elsewhere.
	AttrAddressingMode resourceapi.QualifiedName = "addressingMode"
	// CapMemory is the device's memory in bytes.
	CapMemory resourceapi.QualifiedName = "memory"
)

// The standard attributes every device carries (KEP-6072), as
// k8s.io/dynamic-resource-allocation/deviceattribute names them. A MIG
// device carries its parent GPU's.
const (
	// AttrPCIeRoot is the PCIe root complex ("pci0000:00"), so a claim can
	// matchAttribute a GPU and a NIC of another driver under one root.
	AttrPCIeRoot = deviceattribute.StandardDeviceAttributePCIeRoot
	// AttrPCIBusID is the PCI address ("0000:07:00.0").
	AttrPCIBusID = deviceattribute.StandardDeviceAttributePCIBusID
	// AttrNUMANode is the NUMA node, an int; absent when the GPU has no
	// NUMA affinity (NFD's numa -1).
	AttrNUMANode = deviceattribute.StandardDeviceAttributeNUMANode
)

// Values of AttrType.
const (
	TypeGPU = "gpu"
	TypeMIG = "mig"
)

// maxNameLength is the longest device name: a DNS label.
const maxNameLength = 63

// DeviceName returns a device's name in featureplug's own schema: its UUID
// lowercased ("gpu-8f3c...", "mig-1a2b..."), a DNS label that does not
// depend on the device's index, so it is stable across restarts and
// re-ordering. Characters a DNS label cannot hold (the "/" of old-style MIG
// UUIDs) become "-"; a UUID that still makes no label (too long, empty) is
// named "dev-" and a hash of it.
func DeviceName(uuid string) string {
	b := []byte(strings.ToLower(uuid))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			b[i] = '-'
		}
	}
	name := strings.Trim(string(b), "-")
	if name == "" || len(name) > maxNameLength {
		sum := sha256.Sum256([]byte(uuid))
		return "dev-" + hex.EncodeToString(sum[:16])
	}
	return name
}

// Device returns the attributes and capacities of a whole GPU (mig nil) or
// of one of its MIG devices, named as the schema names them. It does not
// set AttrResource.
//
// A device that allows multiple allocations (time-slicing) consumes a
// capacity without a request policy in full: the sink gives the
// capacities a request policy when it shares a device.
func (s *Schema) Device(inv *discovery.Inventory, gpu *discovery.GPU, mig *discovery.MIGDevice) (map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, map[resourceapi.QualifiedName]resourceapi.DeviceCapacity) {
	t := s.tables[kindOf(mig)]
	attrs := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(t.entries))
	caps := make(map[resourceapi.QualifiedName]resourceapi.DeviceCapacity, 8)
	it := discovery.Item{Inventory: inv, GPU: gpu, MIG: mig}
	for i := range t.entries {
		e := &t.entries[i]
		v, ok := e.get(it)
		if e.flag {
			attrs[e.name] = resourceapi.DeviceAttribute{BoolValue: ptr(ok)}
			continue
		}
		if !ok {
			continue
		}
		tv, ok := e.typ.Parse(v)
		if !ok {
			continue
		}
		if e.capacity {
			caps[e.name] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(tv.Int*e.unit, capacityFormat(e.unit))}
			continue
		}
		switch e.typ {
		case discovery.TypeString:
			if len(v) <= resourceapi.DeviceAttributeMaxValueLength {
				attrs[e.name] = resourceapi.DeviceAttribute{StringValue: ptr(v)}
			}
		case discovery.TypeInt, discovery.TypeQuantity:
			attrs[e.name] = resourceapi.DeviceAttribute{IntValue: ptr(tv.Int)}
		case discovery.TypeBool:
			attrs[e.name] = resourceapi.DeviceAttribute{BoolValue: ptr(tv.Bool)}
		case discovery.TypeVersion:
			if sv, ok := Semver(v); ok {
				attrs[e.name] = resourceapi.DeviceAttribute{VersionValue: &sv}
			}
		}
	}
	return attrs, caps
}

// capacityFormat is how a capacity of the unit reads: bytes in binary
// units ("80Gi"), counts as decimal numbers.
func capacityFormat(unit int64) resource.Format {
	if unit == mib {
		return resource.BinarySI
	}
	return resource.DecimalSI
}

// kindOf is the device kind of a GPU (mig nil) or MIG device.
func kindOf(mig *discovery.MIGDevice) string {
	if mig != nil {
		return TypeMIG
	}
	return TypeGPU
}

// mib is a MiB in bytes.
const mib = 1 << 20

// Semver returns a version of one to three decimal numbers ("12.8",
// "535.104.05") as a semantic version ("12.8.0", "535.104.5"), the form
// resource.k8s.io and CEL's semver() accept. It reports false when v is
// not such a version (e.g. discovery.Unknown).
func Semver(v string) (string, bool) {
	parts := strings.Split(v, ".")
	if len(parts) > 3 {
		return "", false
	}
	out := make([]string, 3)
	for i := range out {
		out[i] = "0"
	}
	for i, p := range parts {
		if p == "" || strings.TrimLeft(p, "0123456789") != "" {
			return "", false
		}
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return "", false
		}
		out[i] = strconv.FormatUint(n, 10)
	}
	return strings.Join(out, "."), true
}

// LowerCamel turns a dotted catalog name into a C identifier:
// "compute.major" -> "computeMajor", "pci.bus" -> "pciBus".
func LowerCamel(dotted string) string {
	parts := strings.Split(dotted, ".")
	var b strings.Builder
	for i, p := range parts {
		if i > 0 && p != "" {
			b.WriteString(strings.ToUpper(p[:1]))
			b.WriteString(p[1:])
			continue
		}
		b.WriteString(p)
	}
	return b.String()
}

// SplitName splits a published attribute or capacity name into the domain
// CEL reads it under and its name there: "gpu.nvidia.com/productName" ->
// ("gpu.nvidia.com", "productName"), "type" -> (Domain, "type").
func SplitName(name resourceapi.QualifiedName) (domain, id string) {
	if d, n, ok := strings.Cut(string(name), "/"); ok {
		return d, n
	}
	return Domain, string(name)
}

func ptr[T any](v T) *T { return &v }
