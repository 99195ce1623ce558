package rules

import (
	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
)

// sampleInventory is a small, typical node used when a rules file is
// loaded, before any real node is known: its features tell which features
// and attributes featureplug publishes (and what their values look like),
// and its devices are what templates are tried on. GPU 0 is a whole GPU,
// GPU 1 has MIG enabled with one MIG device; the two are joined by NVLink so
// that every capability flag is set. One more GPU is bound to vfio-pci.
func sampleInventory() *discovery.Inventory {
	gpu := func(index int, uuid string, mig bool) discovery.GPU {
		return discovery.GPU{
			Index: index, Minor: index, UUID: uuid,
			Product: "NVIDIA A100-SXM4-40GB", Brand: "Nvidia",
			Architecture: "Ampere", Family: "ampere",
			ComputeMajor: 8, ComputeMinor: 0, MemoryMiB: 40960,
			PCIBusID: "0000:07:00.0", NUMANode: 0, ComputeMode: "Default",
			MIGCapable: true, MIGEnabled: mig,
		}
	}
	g0 := gpu(0, "GPU-00000000-0000-0000-0000-000000000000", false)
	g1 := gpu(1, "GPU-11111111-1111-1111-1111-111111111111", true)
	g1.MIGDevices = []discovery.MIGDevice{{
		ParentIndex: 1, ParentUUID: g1.UUID, Index: 0,
		GPUInstanceID: 13, ComputeInstanceID: 0,
		UUID: "MIG-22222222-2222-2222-2222-222222222222", Profile: "1g.5gb",
		MemoryMiB: 4864, Multiprocessors: 14, GISlices: 1, CISlices: 1,
		Engines: discovery.Engines{Copy: 1, JPEG: 0, Decoder: 0, Encoder: 0, OFA: 0},
	}}
	return &discovery.Inventory{
		DriverVersion:     "570.86.15",
		CUDADriverVersion: "12.8",
		NVMLVersion:       "12.570.86.15",
		GPUs:              []discovery.GPU{g0, g1},
		VFIO:              []discovery.VFIODevice{sampleVFIO()}, // vfio.go
		Links: discovery.LinkMatrix{
			{{}, {NVLinks: 12, PCIe: discovery.PCIeSystem}},
			{{NVLinks: 12, PCIe: discovery.PCIeSystem}, {}},
		},
	}
}

// featureKind is how a feature's elements are stored.
type featureKind int

const (
	flagFeature featureKind = iota + 1
	attributeFeature
	instanceFeature
)

// schema is what featureplug publishes: for each feature, its kind and, for
// each element, its type and a sample value.
type schema map[string]featureSchema

type featureSchema struct {
	kind  featureKind
	attrs map[string]attrSchema
}

// attrSchema is one published element. Its type comes from discovery's
// catalog, never from a sample value; the sample is a value of that type,
// shown in messages and used to try expressions.
type attrSchema struct {
	typ    discovery.Type
	sample string // "" for flags
}

// newSchema derives the schema from discovery's attribute catalog, so that
// it follows discovery without a second list of names and types to keep in
// step. f, the sample node's features, gives realistic sample values; where
// it has none valid for an attribute's type (absent, empty, unknown), the
// catalog's example is used.
func newSchema(f *nfdv1alpha1.Features) schema {
	s := make(schema)
	for _, a := range discovery.Attributes() {
		fs, ok := s[a.Feature]
		if !ok {
			fs = featureSchema{kind: kindOf(a.Kind), attrs: make(map[string]attrSchema)}
			s[a.Feature] = fs
		}
		if fs.kind == flagFeature {
			fs.attrs[a.Name] = attrSchema{typ: a.Type}
			continue
		}
		sample, ok := sampleValue(f, a.Feature, a.Name)
		if !ok || sample == "" || !a.Type.Valid(sample) {
			sample = a.Example
		}
		fs.attrs[a.Name] = attrSchema{typ: a.Type, sample: sample}
	}
	return s
}

// kindOf maps discovery's feature kinds to the schema's.
func kindOf(k discovery.Kind) featureKind {
	switch k {
	case discovery.KindFlags:
		return flagFeature
	case discovery.KindAttributes:
		return attributeFeature
	default:
		return instanceFeature
	}
}

// sampleValue returns the sample node's value of an attribute: of the node,
// or of the feature's first instance.
func sampleValue(f *nfdv1alpha1.Features, feature, name string) (string, bool) {
	if set, ok := f.Attributes[feature]; ok {
		v, ok := set.Elements[name]
		return v, ok
	}
	if set, ok := f.Instances[feature]; ok && len(set.Elements) > 0 {
		v, ok := set.Elements[0].Attributes[name]
		return v, ok
	}
	return "", false
}

// sampleAttributes returns the attributes of the sample device of a kind,
// for trying templates.
func sampleAttributes(inv *discovery.Inventory, kind plan.DeviceKind) map[string]string {
	switch kind {
	case plan.DeviceMIG:
		g := &inv.GPUs[1]
		return discovery.MIGAttributes(g, &g.MIGDevices[0])
	case plan.DeviceVFIO:
		return discovery.VFIOAttributes(&inv.VFIO[0])
	}
	return discovery.GPUAttributes(inv, &inv.GPUs[0])
}
