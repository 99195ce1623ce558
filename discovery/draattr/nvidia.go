package draattr

import (
	"fmt"
	"regexp"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/featureplug/featureplug/discovery"
)

// NVIDIA compatibility, as read in NVIDIA's DRA driver for GPUs
// (kubernetes-sigs/dra-driver-nvidia-gpu, cmd/gpu-kubelet-plugin:
// deviceinfo.go GetDevice and mig.go CommonAttributesMig and
// CommonCapacitiesMig at commit 0545e9e5, the main branch after v0.4.1;
// docs/migration.md compares them attribute by attribute).
//
// The driver publishes its devices as driver gpu.nvidia.com, so its
// unqualified attributes are in domain gpu.nvidia.com, and claims read
// them as device.attributes["gpu.nvidia.com"].productName. Featureplug
// stays driver gpu.featureplug.io (its kubelet plugin, sockets and
// ResourceSlices are its own, and both drivers can serve one cluster) and
// publishes those attributes qualified by NVIDIA's domain
// ("gpu.nvidia.com/productName"), which CEL reads under the same key, and
// which matchAttribute compares across both drivers. Each attribute NVIDIA
// also publishes is published once, under NVIDIA's name; featureplug's
// other attributes keep their own names.
const (
	// NVIDIADomain is NVIDIA's DRA driver's name and attribute domain.
	NVIDIADomain = "gpu.nvidia.com"
	// NVIDIAGPUClass and NVIDIAMIGClass are the DeviceClasses NVIDIA's
	// Helm chart installs: every whole GPU (type "gpu", extended resource
	// nvidia.com/gpu), every MIG device (type "mig").
	NVIDIAGPUClass = "gpu.nvidia.com"
	NVIDIAMIGClass = "mig.nvidia.com"
	// NVIDIAExtendedResource is the extended resource NVIDIA's GPU class
	// serves.
	NVIDIAExtendedResource = "nvidia.com/gpu"
)

// nvidiaNames maps featureplug's attributes and capacities (by their own
// name) to NVIDIA's, for both device kinds. NVIDIA names a MIG device's
// parent product productName, as on a whole GPU.
var nvidiaNames = map[resourceapi.QualifiedName]string{
	AttrType:              "type",
	"uuid":                "uuid",
	"product":             "productName",
	"brand":               "brand",
	"architecture":        "architecture",
	AttrComputeCapability: "cudaComputeCapability",
	"driverVersion":       "driverVersion",
	"cudaVersion":         "cudaDriverVersion",
	AttrAddressingMode:    "addressingMode",
	CapMemory:             "memory",
	// MIG devices.
	"profile":         "profile",
	"parentUuid":      "parentUUID",
	"parentProduct":   "productName",
	"multiprocessors": "multiprocessors",
	"enginesCopy":     "copyEngines",
	"enginesDecoder":  "decoders",
	"enginesEncoder":  "encoders",
	"enginesJpeg":     "jpegEngines",
	"enginesOfa":      "ofaEngines",
}

// nvidiaMIGDropped are the attributes a MIG device does not carry with
// NVIDIA compatibility, to make room for its parent's brand and
// architecture under the 32 attributes and capacities: each repeats what
// the device still carries, with the reason Lookup gives a rule that
// reads it.
var nvidiaMIGDropped = map[resourceapi.QualifiedName]string{
	"parentFamily": "with NVIDIA compatibility a MIG device carries its parent's architecture (gpu.nvidia.com/architecture), which the family repeats, instead",
	"slicesGi":     "with NVIDIA compatibility a MIG device carries its profile (gpu.nvidia.com/profile), which holds the slice counts, instead",
	"slicesCi":     "with NVIDIA compatibility a MIG device carries its profile (gpu.nvidia.com/profile), which holds the slice counts, instead",
}

// nvidiaLayout renames featureplug's entries as NVIDIA's driver names
// them, and for a MIG device trades what nvidiaMIGDropped names for its
// parent's brand and architecture, which NVIDIA publishes on MIG devices.
// noForm gets the reasons of the dropped ones.
func nvidiaLayout(kind string, own []entry, noForm map[string]string) []entry {
	var out []entry
	for _, e := range own {
		if why, ok := nvidiaMIGDropped[e.key]; ok && kind == TypeMIG {
			for _, k := range e.nfd {
				noForm[k] = why
			}
			continue
		}
		if n, ok := nvidiaNames[e.key]; ok {
			e.name = resourceapi.QualifiedName(NVIDIADomain + "/" + n)
		}
		out = append(out, e)
	}
	if kind == TypeMIG {
		for _, a := range []string{discovery.AttrBrand, discovery.AttrArchitecture} {
			src := catalogAttr(discovery.FeatureGPU, a)
			out = append(out, entry{
				key: resourceapi.QualifiedName("parent" + strings.ToUpper(a[:1]) + a[1:]), name: resourceapi.QualifiedName(NVIDIADomain + "/" + a),
				typ: discovery.TypeString, get: src.Get, nfd: []string{nfdKey(discovery.FeatureGPU, a)},
			})
		}
	}
	return out
}

// DeviceName returns a device's name in the schema's ResourceSlice.
// Featureplug's own schema names it after its UUID (the package-level
// DeviceName). With NVIDIA compatibility a whole GPU is "gpu-<minor>" and
// a MIG device "gpu-<parent minor>-mig-<profile>-<GPU instance profile
// ID>-<placement start>" (the profile without dots, made a DNS label:
// "gpu-0-mig-1g5gb-19-2"), as NVIDIA's driver names them; a MIG device of
// a compute instance smaller than its GPU instance, which NVIDIA's driver
// does not publish, gets "-ci<compute instance ID>" after it. A device
// whose minor or placement discovery did not read (the placement comes
// from discovery.ReadMIGGeometry, which the rules ask for with
// NeedsMIGGeometry) keeps its UUID name.
func (s *Schema) DeviceName(gpu *discovery.GPU, mig *discovery.MIGDevice) string {
	uuid := gpu.UUID
	if mig != nil {
		uuid = mig.UUID
	}
	if s.compat != NVIDIA || gpu.Minor < 0 {
		return DeviceName(uuid)
	}
	name := fmt.Sprintf("gpu-%d", gpu.Minor)
	if mig != nil {
		if mig.GPUInstanceProfileID == nil || mig.Placement == nil {
			return DeviceName(uuid)
		}
		name += fmt.Sprintf("-mig-%s-%d-%d", profileLabel(mig.Profile), *mig.GPUInstanceProfileID, mig.Placement.Start)
		if mig.CISlices < mig.GISlices {
			name += fmt.Sprintf("-ci%d", mig.ComputeInstanceID)
		}
	}
	if len(validation.IsDNS1123Label(name)) > 0 {
		return DeviceName(uuid)
	}
	return name
}

// notLabel are the characters a profile loses on its way into a DNS label.
var notLabel = regexp.MustCompile(`[^a-z0-9-]`)

// profileLabel makes a MIG profile part of a device name as NVIDIA's
// driver does: dots dropped, the rest lowercase with "-" for what a DNS
// label cannot hold ("1g.10gb+me" -> "1g10gb-me").
func profileLabel(profile string) string {
	p := strings.ToLower(strings.ReplaceAll(profile, ".", ""))
	return strings.Trim(notLabel.ReplaceAllString(p, "-"), "-")
}
