package rules

import (
	"github.com/featureplug/featureplug/discovery"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
)

// sampleInventory is a small, typical node used when a rules file is
// loaded, before any real node is known: its features tell which features
// and attributes featureplug publishes (and what their values look like),
// and its devices are what templates are tried on. GPU 0 is a whole GPU,
// GPU 1 has MIG enabled with one MIG device; the two are joined by NVLink so
// that every capability flag is set.
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

// schema is what featureplug publishes: for each feature, its kind and a
// sample value of each element (flags have the value "").
type schema map[string]featureSchema

type featureSchema struct {
	kind    featureKind
	samples map[string]string
}

// newSchema derives the schema from the sample node's features, so that it
// follows discovery without a second list of names to keep in step.
func newSchema(f *nfdv1alpha1.Features) schema {
	s := make(schema)
	for name, set := range f.Flags {
		samples := make(map[string]string, len(set.Elements))
		for k := range set.Elements {
			samples[k] = ""
		}
		s[name] = featureSchema{kind: flagFeature, samples: samples}
	}
	for name, set := range f.Attributes {
		s[name] = featureSchema{kind: attributeFeature, samples: set.Elements}
	}
	for name, set := range f.Instances {
		if len(set.Elements) > 0 {
			s[name] = featureSchema{kind: instanceFeature, samples: set.Elements[0].Attributes}
		}
	}
	return s
}

// sampleAttributes returns the attributes of the sample device of a kind,
// for trying templates.
func sampleAttributes(inv *discovery.Inventory, kind DeviceKind) map[string]string {
	if kind == DeviceMIG {
		g := &inv.GPUs[1]
		return discovery.MIGAttributes(g, &g.MIGDevices[0])
	}
	return discovery.GPUAttributes(inv, &inv.GPUs[0])
}
