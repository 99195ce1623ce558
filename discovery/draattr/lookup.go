package draattr

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/featureplug/featureplug/discovery"
)

// entry is one catalog attribute as a device of a kind carries it.
type entry struct {
	attr     discovery.Attribute
	name     resourceapi.QualifiedName
	capacity bool
}

// table is what devices of one kind carry, and how the NFD attributes
// their rules see map onto it.
type table struct {
	entries []entry
	// byNFD maps "<feature>\x00<name>" to the entry holding it.
	byNFD map[string]*entry
}

// tables holds the read-only tables of TypeGPU and TypeMIG devices.
var tables = buildTables()

// versionParts are the nvidia.driver ints that are parts of a version
// attribute rather than attributes of their own.
var versionParts = map[string]struct {
	of   string // the version's catalog name
	part string // "major" or "minor"
}{
	discovery.AttrDriverMajor: {discovery.AttrDriverVersion, "major"},
	discovery.AttrCUDAMajor:   {discovery.AttrCUDAVersion, "major"},
	discovery.AttrCUDAMinor:   {discovery.AttrCUDAVersion, "minor"},
}

func buildTables() map[string]*table {
	out := map[string]*table{TypeGPU: {byNFD: map[string]*entry{}}, TypeMIG: {byNFD: map[string]*entry{}}}
	for _, a := range discovery.Attributes() {
		var kinds []string
		var name string
		switch a.Feature {
		case discovery.FeatureGPU:
			kinds, name = []string{TypeGPU}, LowerCamel(a.Name)
		case discovery.FeatureMIG:
			kinds, name = []string{TypeMIG}, LowerCamel(a.Name)
		case discovery.FeatureDriver:
			if _, ok := versionParts[a.Name]; ok {
				continue
			}
			kinds, name = []string{TypeGPU, TypeMIG}, LowerCamel(a.Name)
			if a.Name == discovery.AttrDriverVersion {
				name = "driverVersion"
			}
		case discovery.FeatureCapabilities:
			kinds, name = []string{TypeGPU, TypeMIG}, LowerCamel("capability."+a.Name)
			if _, ok := migConstFlags[a.Name]; ok {
				kinds = []string{TypeGPU}
			}
		default:
			continue
		}
		// The device's own memory is a capacity; the parent's memory
		// of a MIG device is an int attribute in MiB.
		capacity := a.Name == discovery.AttrMemory && (a.Feature == discovery.FeatureGPU || a.Feature == discovery.FeatureMIG)
		for _, k := range kinds {
			t := out[k]
			t.entries = append(t.entries, entry{attr: a, name: resourceapi.QualifiedName(name), capacity: capacity})
		}
	}
	for _, t := range out {
		for i := range t.entries {
			e := &t.entries[i]
			t.byNFD[e.attr.Feature+"\x00"+e.attr.Name] = e
		}
	}
	return out
}

// Names returns the attribute and capacity names devices of a kind
// (TypeGPU or TypeMIG) can carry, AttrResource included, in table order.
// Capacities are listed with capacity true.
func Names(kind string) []Name {
	t, ok := tables[kind]
	if !ok {
		return nil
	}
	out := []Name{{Name: AttrType}, {Name: AttrResource}, {Name: AttrComputeCapability}}
	for _, e := range t.entries {
		out = append(out, Name{Name: e.name, Capacity: e.capacity, Feature: e.attr.Feature, NFDName: e.attr.Name, Type: e.attr.Type})
	}
	return out
}

// Name is one attribute or capacity of a device kind.
type Name struct {
	// Name is the unqualified attribute or capacity name.
	Name resourceapi.QualifiedName
	// Capacity is true for a capacity.
	Capacity bool
	// Feature and NFDName are the catalog attribute it publishes; empty
	// for type, resource and computeCapability.
	Feature, NFDName string
	// Type is the catalog type; 0 for names outside the catalog.
	Type discovery.Type
}

// Form is what an NFD attribute (or flag) a rule matches reads on a DRA
// device of one kind. Exactly one of Attribute, Const, Absent and Missing
// says where the value is.
type Form struct {
	// Feature and Name are the NFD feature and attribute (or flag) name.
	Feature, Name string
	// Type is the catalog type of the NFD value (bool for a flag).
	Type discovery.Type
	// Flag is set for a flag of nvidia.capabilities: NFD publishes it
	// only when it is set, the device carries it as a bool.
	Flag bool
	// Attribute is the DRA attribute (or, with Capacity, capacity) that
	// holds the value.
	Attribute resourceapi.QualifiedName
	// Capacity is set when Attribute is a capacity: memory, a quantity
	// in bytes where NFD has an int in MiB.
	Capacity bool
	// Version is set when Attribute is a version (semantic, "12.8.0").
	Version bool
	// Part is "major" or "minor" when the NFD int is that part of the
	// version Attribute (nvidia.driver.major is driverVersion's major).
	Part string
	// Optional is set when a device may lack Attribute (a version NVML
	// could not read): read it only where the device carries it.
	Optional bool
	// Const, when not "", is the NFD value every device of the kind has
	// (a MIG device's parent has mig.enabled "true").
	Const string
	// Absent is set when devices of the kind see no such feature
	// (nvidia.mig for a whole GPU, or a feature featureplug never
	// publishes): a term on it never matches.
	Absent bool
	// Missing is set when featureplug never publishes the attribute in
	// the feature: Exists is false, DoesNotExist true, every other op
	// false.
	Missing bool
}

// NoFormError says that an NFD attribute a rule reads has no DRA form on
// a device kind, and why.
type NoFormError struct {
	Kind, Feature, Name string
	Reason              string
}

func (e *NoFormError) Error() string {
	return fmt.Sprintf("%s.%s has no DRA form on a %s device: %s", e.Feature, e.Name, e.Kind, e.Reason)
}

// parentOnMIG are the nvidia.gpu attributes a MIG device's rules see of
// its parent that the MIG device carries, with the nvidia.mig attribute
// that repeats them.
var parentOnMIG = map[string]string{
	discovery.AttrUUID:         discovery.AttrParentUUID,
	discovery.AttrIndex:        discovery.AttrParentIndex,
	discovery.AttrProduct:      discovery.AttrParentProduct,
	discovery.AttrFamily:       discovery.AttrParentFamily,
	discovery.AttrMemory:       discovery.AttrParentMemory,
	discovery.AttrNUMA:         discovery.AttrParentNUMA,
	discovery.AttrComputeMajor: discovery.AttrParentComputeMajor,
}

// migConstFlags are the nvidia.capabilities flags every node with a MIG
// device has set (a GPU is MIG capable, and in MIG mode): a MIG device
// does not carry them, which keeps room under the 32 attributes and
// capacities per device for the sink's own (resource, shares).
var migConstFlags = map[string]bool{discovery.FlagMIG: true, discovery.FlagMIGEnabled: true}

// Lookup returns what the NFD attribute name of feature (lowercase, as
// NFD looks features up) reads on a device of kind (TypeGPU or TypeMIG),
// the feature's instance being the device itself, or for nvidia.gpu on a
// MIG device its parent GPU, as the planner matches them. It returns a
// *NoFormError for what a device does not carry: of a MIG device's parent
// GPU only uuid, index, product, family, memory, numa, compute.major and
// compute.minor are on the device (and mig.capable, mig.enabled, which
// are always true there); the rest would pass the 32 attributes
// resource.k8s.io allows a device.
func Lookup(kind, feature, name string) (Form, error) {
	t, ok := tables[kind]
	if !ok {
		return Form{}, fmt.Errorf("device kind %q: want %s or %s", kind, TypeGPU, TypeMIG)
	}
	f := Form{Feature: feature, Name: name}
	switch {
	case feature == discovery.FeatureMIG && kind == TypeGPU:
		f.Absent = true
		return f, nil
	case feature == discovery.FeatureGPU && kind == TypeMIG:
		return lookupParent(t, f)
	case feature == discovery.FeatureDriver:
		if vp, ok := versionParts[name]; ok {
			e := t.byNFD[feature+"\x00"+vp.of]
			f.Type = discovery.TypeInt
			f.Attribute, f.Version, f.Part, f.Optional = e.name, true, vp.part, true
			return f, nil
		}
	case feature == discovery.FeatureCapabilities && kind == TypeMIG && migConstFlags[name]:
		f.Type, f.Flag, f.Const = discovery.TypeBool, true, "true"
		return f, nil
	case feature != discovery.FeatureGPU && feature != discovery.FeatureMIG && feature != discovery.FeatureCapabilities:
		f.Absent = true
		return f, nil
	}
	e, ok := t.byNFD[feature+"\x00"+name]
	if !ok {
		f.Missing = true
		return f, nil
	}
	return fromEntry(f, e), nil
}

func fromEntry(f Form, e *entry) Form {
	f.Type = e.attr.Type
	f.Attribute = e.name
	f.Capacity = e.capacity
	f.Flag = e.attr.Kind == discovery.KindFlags
	if e.attr.Type == discovery.TypeVersion {
		f.Version, f.Optional = true, true
	}
	return f
}

func lookupParent(t *table, f Form) (Form, error) {
	switch f.Name {
	case discovery.AttrMIGCapable, discovery.AttrMIGEnabled:
		f.Type, f.Const = discovery.TypeBool, "true"
		return f, nil
	case discovery.AttrComputeMinor:
		f.Type = discovery.TypeInt
		f.Attribute, f.Version, f.Part = AttrComputeCapability, true, "minor"
		return f, nil
	}
	if mig, ok := parentOnMIG[f.Name]; ok {
		return fromEntry(f, t.byNFD[discovery.FeatureMIG+"\x00"+mig]), nil
	}
	for _, a := range discovery.Attributes() {
		if a.Feature == discovery.FeatureGPU && a.Name == f.Name {
			return Form{}, &NoFormError{Kind: TypeMIG, Feature: f.Feature, Name: f.Name,
				Reason: "a MIG device carries of its parent GPU only uuid, index, product, family, memory, numa and compute capability (resource.k8s.io allows 32 attributes per device)"}
		}
	}
	f.Missing = true
	return f, nil
}

// String names the form for explanations: "driverVersion.major()",
// "capacity memory", "const true", "absent", "missing".
func (f Form) String() string {
	switch {
	case f.Absent:
		return "absent"
	case f.Missing:
		return "missing"
	case f.Const != "":
		return "const " + f.Const
	case f.Capacity:
		return "capacity " + string(f.Attribute)
	case f.Part != "":
		return string(f.Attribute) + "." + f.Part + "()"
	}
	return strings.TrimSpace(string(f.Attribute))
}
