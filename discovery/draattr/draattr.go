// Package draattr is the Dynamic Resource Allocation form of discovery's
// attribute catalog: the typed attributes and capacities a device carries
// in featureplug's ResourceSlice (driver gpu.featureplug.io), its name in
// the slice, and what an NFD expression of a rule (nvidia.gpu.X,
// nvidia.mig.X, nvidia.driver.X, a nvidia.capabilities flag) reads on a
// DRA device.
//
// The DRA sink publishes Device's attributes and the class compiler
// (rules/draclass) reads the same table through Lookup, so a DeviceClass's
// CEL selector and the published device agree by construction.
//
// Names are the catalog's, made C identifiers (lowerCamel of the dotted
// name: compute.major -> computeMajor), unqualified and therefore in the
// driver's domain (Domain). resource.k8s.io allows 32 attributes and
// capacities per device, so a device carries:
//
//   - a whole GPU: every nvidia.gpu attribute (memory as the capacity
//     "memory", in bytes);
//   - a MIG device: every nvidia.mig attribute (memory as the capacity
//     "memory", in bytes; parent.memory as the int attribute parentMemory,
//     in MiB as the catalog has it); of its parent GPU only what nvidia.mig
//     already repeats (parentUuid, parentIndex, parentProduct,
//     parentFamily, parentMemory, parentNuma, parentComputeMajor) and the
//     compute capability;
//   - both: type ("gpu" or "mig"), computeCapability (a version,
//     "9.0.0"), the node's driver attributes (driverVersion and
//     cudaVersion as versions, nvmlVersion, gpuCount), the node's
//     capability flags as bools (capabilityNvlink, capabilityMps, and on
//     a whole GPU capabilityMig, capabilityMigEnabled: false when the
//     flag is not set; on a MIG device those two are always set, so it
//     does not carry them), and, added by the sink, resource
//     (AttrResource).
//
// Device gives a MIG device 29 attributes and capacities and a GPU 30,
// which leaves the sink room for resource and a shares capacity
// (time-slicing) under the 32 resource.k8s.io allows.
//
// nvidia.driver's major, cuda.major and cuda.minor are the parts of the
// versions (driverVersion.major() in CEL), not attributes of their own.
// Versions are semantic versions: "12.8" is published as "12.8.0",
// leading zeros are dropped ("535.104.05" -> "535.104.5"), and a version
// NVML could not read is not published.
package draattr

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/featureplug/featureplug/discovery"
)

// Domain is the domain of featureplug's attributes and capacities: the
// DRA driver's name. Unqualified names are in it.
const Domain = "gpu.featureplug.io"

// Attributes and capacities that are not in the catalog.
const (
	// AttrType is "gpu" for a whole GPU and "mig" for a MIG device.
	AttrType resourceapi.QualifiedName = "type"
	// AttrResource is the resource name the rules gave the device. Device
	// does not know it: the DRA sink adds it.
	AttrResource resourceapi.QualifiedName = "resource"
	// AttrComputeCapability is the CUDA compute capability as a version,
	// "<major>.<minor>.0" (of the parent GPU for a MIG device).
	AttrComputeCapability resourceapi.QualifiedName = "computeCapability"
	// CapMemory is the device's memory in bytes.
	CapMemory resourceapi.QualifiedName = "memory"
)

// Values of AttrType.
const (
	TypeGPU = "gpu"
	TypeMIG = "mig"
)

// maxNameLength is the longest DeviceName: a DNS label.
const maxNameLength = 63

// DeviceName returns a device's name in the ResourceSlice: its UUID
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
// of one of its MIG devices, as the package documentation lists them. The
// names are unqualified (in Domain). It does not set AttrResource.
//
// A device that allows multiple allocations (time-slicing) consumes a
// capacity without a request policy in full: the sink gives CapMemory a
// request policy when it shares a device.
func Device(inv *discovery.Inventory, gpu *discovery.GPU, mig *discovery.MIGDevice) (map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, map[resourceapi.QualifiedName]resourceapi.DeviceCapacity) {
	kind := TypeGPU
	if mig != nil {
		kind = TypeMIG
	}
	t := tables[kind]
	attrs := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(t.entries)+1)
	caps := make(map[resourceapi.QualifiedName]resourceapi.DeviceCapacity, 1)
	attrs[AttrType] = resourceapi.DeviceAttribute{StringValue: ptr(kind)}
	if cc, ok := Semver(strconv.Itoa(gpu.ComputeMajor) + "." + strconv.Itoa(gpu.ComputeMinor)); ok {
		attrs[AttrComputeCapability] = resourceapi.DeviceAttribute{VersionValue: &cc}
	}
	it := discovery.Item{Inventory: inv, GPU: gpu, MIG: mig}
	for i := range t.entries {
		e := &t.entries[i]
		s, ok := e.attr.Get(it)
		if e.attr.Kind == discovery.KindFlags {
			attrs[e.name] = resourceapi.DeviceAttribute{BoolValue: ptr(ok)}
			continue
		}
		if !ok {
			continue
		}
		v, ok := e.attr.Type.Parse(s)
		if !ok {
			continue
		}
		if e.capacity {
			caps[e.name] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(v.Int*mib, resource.BinarySI)}
			continue
		}
		switch e.attr.Type {
		case discovery.TypeString:
			if len(s) <= resourceapi.DeviceAttributeMaxValueLength {
				attrs[e.name] = resourceapi.DeviceAttribute{StringValue: ptr(s)}
			}
		case discovery.TypeInt, discovery.TypeQuantity:
			attrs[e.name] = resourceapi.DeviceAttribute{IntValue: ptr(v.Int)}
		case discovery.TypeBool:
			attrs[e.name] = resourceapi.DeviceAttribute{BoolValue: ptr(v.Bool)}
		case discovery.TypeVersion:
			if sv, ok := Semver(s); ok {
				attrs[e.name] = resourceapi.DeviceAttribute{VersionValue: &sv}
			}
		}
	}
	return attrs, caps
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

func ptr[T any](v T) *T { return &v }
