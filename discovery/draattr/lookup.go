package draattr

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/featureplug/featureplug/discovery"
)

// Compatibility names the DRA driver whose names a Schema also publishes
// featureplug's devices under: Own (none) or NVIDIA.
type Compatibility string

// The namings.
const (
	// Own is featureplug's own naming.
	Own Compatibility = ""
	// NVIDIA is NVIDIA's DRA driver's naming (nvidia.go).
	NVIDIA Compatibility = "nvidia"
)

// Schema is the DRA form of the catalog under one naming: what devices of
// each kind carry, how they are named, and what the NFD attributes their
// rules see read on them. Schemas are read-only and shared.
type Schema struct {
	compat Compatibility
	tables map[string]*table
}

// schemas are the read-only schemas, by naming.
var schemas = map[Compatibility]*Schema{Own: buildSchema(Own), NVIDIA: buildSchema(NVIDIA)}

// For returns the schema of a naming: "" (Own) or "nvidia". It fails,
// naming the ones there are, for another.
func For(c Compatibility) (*Schema, error) {
	s, ok := schemas[c]
	if !ok {
		return nil, fmt.Errorf("DRA compatibility %q: want %q (NVIDIA's DRA driver's names) or none", string(c), string(NVIDIA))
	}
	return s, nil
}

// OwnSchema is featureplug's own naming: For(Own).
func OwnSchema() *Schema { return schemas[Own] }

// Compatibility returns the schema's naming.
func (s *Schema) Compatibility() Compatibility { return s.compat }

// entry is one attribute or capacity a device of a kind carries.
type entry struct {
	// key is its name in featureplug's own schema; name is the name it is
	// published under in this schema (qualified when not in Domain).
	key, name resourceapi.QualifiedName
	capacity  bool
	// unit is, for a capacity, the bytes (or count) one unit of the NFD
	// value is: a MiB for memory, 1 for counts.
	unit int64
	// typ is the type of the value get returns.
	typ discovery.Type
	// flag is set for a capability flag: published as a bool, true when
	// get reports the flag set.
	flag bool
	// get reads the value as NFD would publish it; false when the device
	// does not carry it.
	get func(discovery.Item) (string, bool)
	// optional is set when a device may lack it (a version NVML could not
	// read, a standard attribute sysfs did not tell).
	optional bool
	// absent is NFD's value of the attribute it answers for on a device
	// that lacks it ("-1" for numa), "" when NFD then publishes nothing
	// or a value no form can read.
	absent string
	// nfd are the NFD attributes it answers for ("<feature>\x00<name>"):
	// a MIG device's parentUuid answers nvidia.mig.parent.uuid and, for
	// the parent GPU its rules see, nvidia.gpu.uuid.
	nfd []string
}

// part is an NFD int read as the major or minor of a version entry.
type part struct {
	key  resourceapi.QualifiedName // the version's entry
	part string                    // "major" or "minor"
}

// table is what devices of one kind carry, and how the NFD attributes
// their rules see map onto it.
type table struct {
	entries []entry
	byKey   map[resourceapi.QualifiedName]*entry
	// byNFD maps "<feature>\x00<name>" to the entry holding it.
	byNFD map[string]*entry
	// parts, consts: NFD attributes read as a version part, or the same on
	// every device of the kind.
	parts  map[string]part
	consts map[string]string
	// noForm says why a catalog attribute has no form on the kind.
	noForm map[string]string
}

func nfdKey(feature, name string) string { return feature + "\x00" + name }

// migConstFlags are the nvidia.capabilities flags set on every node with
// a MIG device: a GPU there is MIG capable, in MIG mode, and (compute
// capability 8.0 or later) can host MPS. A MIG device does not carry
// them, which keeps room under the 32 attributes and capacities.
var migConstFlags = map[string]bool{discovery.FlagMIG: true, discovery.FlagMIGEnabled: true, discovery.FlagMPS: true}

// countCapacities are the nvidia.mig counts published as capacities, as
// NVIDIA publishes them.
var countCapacities = map[string]bool{
	discovery.AttrMultiprocessors: true, discovery.AttrEnginesCopy: true, discovery.AttrEnginesDecoder: true,
	discovery.AttrEnginesEncoder: true, discovery.AttrEnginesJPEG: true, discovery.AttrEnginesOFA: true,
}

// parentOnMIG are the nvidia.gpu attributes a MIG device's rules see of
// its parent that nvidia.mig repeats, with the nvidia.mig attribute.
var parentOnMIG = map[string]string{
	discovery.AttrUUID:    discovery.AttrParentUUID,
	discovery.AttrIndex:   discovery.AttrParentIndex,
	discovery.AttrProduct: discovery.AttrParentProduct,
	discovery.AttrFamily:  discovery.AttrParentFamily,
	discovery.AttrMemory:  discovery.AttrParentMemory,
	discovery.AttrNUMA:    discovery.AttrParentNUMA,
}

// buildSchema lays out featureplug's devices under a naming: the catalog
// made DRA attributes (ownLayout), renamed, dropped and added to as the
// naming says (nvidia.go).
func buildSchema(c Compatibility) *Schema {
	s := &Schema{compat: c, tables: map[string]*table{}}
	for _, kind := range []string{TypeGPU, TypeMIG} {
		entries, parts, consts := ownLayout(kind)
		noForm := map[string]string{}
		if c == NVIDIA {
			entries = nvidiaLayout(kind, entries, noForm)
		}
		t := &table{entries: entries, byKey: map[resourceapi.QualifiedName]*entry{}, byNFD: map[string]*entry{},
			parts: parts, consts: consts, noForm: noForm}
		for i := range t.entries {
			e := &t.entries[i]
			t.byKey[e.key] = e
			for _, k := range e.nfd {
				t.byNFD[k] = e
			}
		}
		s.tables[kind] = t
	}
	return s
}

// ownLayout is what a device of kind carries in featureplug's own naming,
// with the NFD attributes read as version parts and those that are the
// same on every device of the kind.
func ownLayout(kind string) ([]entry, map[string]part, map[string]string) {
	parts := map[string]part{
		nfdKey(discovery.FeatureGPU, discovery.AttrComputeMajor):   {AttrComputeCapability, "major"},
		nfdKey(discovery.FeatureGPU, discovery.AttrComputeMinor):   {AttrComputeCapability, "minor"},
		nfdKey(discovery.FeatureDriver, discovery.AttrDriverMajor): {"driverVersion", "major"},
		nfdKey(discovery.FeatureDriver, discovery.AttrCUDAMajor):   {"cudaVersion", "major"},
		nfdKey(discovery.FeatureDriver, discovery.AttrCUDAMinor):   {"cudaVersion", "minor"},
	}
	consts := map[string]string{}
	entries := []entry{
		{key: AttrType, typ: discovery.TypeString, get: func(it discovery.Item) (string, bool) { return kindOf(it.MIG), true }},
		{key: AttrComputeCapability, typ: discovery.TypeVersion, get: func(it discovery.Item) (string, bool) {
			return strconv.Itoa(it.GPU.ComputeMajor) + "." + strconv.Itoa(it.GPU.ComputeMinor), true
		}},
	}
	if kind == TypeMIG {
		parts[nfdKey(discovery.FeatureMIG, discovery.AttrParentComputeMajor)] = part{AttrComputeCapability, "major"}
		consts[nfdKey(discovery.FeatureGPU, discovery.AttrMIGCapable)] = "true"
		consts[nfdKey(discovery.FeatureGPU, discovery.AttrMIGEnabled)] = "true"
		for f := range migConstFlags {
			consts[nfdKey(discovery.FeatureCapabilities, f)] = "true"
		}
	}
	for _, a := range discovery.Attributes() {
		k := nfdKey(a.Feature, a.Name)
		if _, ok := parts[k]; ok {
			continue
		}
		if _, ok := consts[k]; ok {
			continue
		}
		e := entry{key: resourceapi.QualifiedName(LowerCamel(a.Name)), typ: a.Type, get: a.Get, nfd: []string{k}}
		switch a.Feature {
		case discovery.FeatureGPU:
			if kind != TypeGPU {
				continue // a MIG device carries of its parent what nvidia.mig repeats
			}
		case discovery.FeatureMIG:
			if kind != TypeMIG {
				continue
			}
			if gpuName, ok := parentFor(a.Name); ok {
				e.nfd = append(e.nfd, nfdKey(discovery.FeatureGPU, gpuName))
			}
			if countCapacities[a.Name] {
				e.capacity, e.unit = true, 1
			}
		case discovery.FeatureDriver:
			if a.Name == discovery.AttrDriverVersion {
				e.key = "driverVersion"
			}
		case discovery.FeatureCapabilities:
			e.key, e.typ, e.flag = resourceapi.QualifiedName(LowerCamel("capability."+a.Name)), discovery.TypeBool, true
		default:
			continue
		}
		switch {
		case a.Name == discovery.AttrMemory && (a.Feature == discovery.FeatureGPU || a.Feature == discovery.FeatureMIG):
			// The device's own memory is a capacity in bytes; a MIG
			// device's parentMemory stays an int in MiB.
			e.key, e.capacity, e.unit = CapMemory, true, mib
		case a.Name == discovery.AttrPCIBus:
			e.key, e.optional, e.get = AttrPCIBusID, true, pciBusID(a)
		case a.Name == discovery.AttrNUMA || a.Name == discovery.AttrParentNUMA:
			e.key, e.optional, e.absent, e.get = AttrNUMANode, true, strconv.Itoa(discovery.NoNUMANode), numaNode(a)
		case e.typ == discovery.TypeVersion:
			e.optional = true
		}
		entries = append(entries, e)
	}
	if kind == TypeMIG {
		// The parent's PCI address, which nvidia.gpu holds.
		bus := catalogAttr(discovery.FeatureGPU, discovery.AttrPCIBus)
		entries = append(entries, entry{key: AttrPCIBusID, typ: discovery.TypeString, optional: true, get: pciBusID(bus),
			nfd: []string{nfdKey(discovery.FeatureGPU, discovery.AttrPCIBus)}})
	}
	entries = append(entries,
		entry{key: AttrPCIeRoot, typ: discovery.TypeString, optional: true, get: func(it discovery.Item) (string, bool) {
			return it.GPU.PCIeRoot, it.GPU.PCIeRoot != ""
		}},
		entry{key: AttrAddressingMode, typ: discovery.TypeString, optional: true, get: func(it discovery.Item) (string, bool) {
			return it.GPU.AddressingMode, it.GPU.AddressingMode != ""
		}},
	)
	for i := range entries {
		entries[i].name = entries[i].key
	}
	return entries, parts, consts
}

// parentFor returns the nvidia.gpu attribute an nvidia.mig attribute
// repeats of the parent GPU.
func parentFor(migName string) (string, bool) {
	for gpuName, m := range parentOnMIG {
		if m == migName {
			return gpuName, true
		}
	}
	return "", false
}

// catalogAttr returns the catalog attribute of a feature; it panics on one
// the catalog lacks (a programming error the tests catch).
func catalogAttr(feature, name string) discovery.Attribute {
	for _, a := range discovery.Attributes() {
		if a.Feature == feature && a.Name == name {
			return a
		}
	}
	panic("draattr: the catalog has no " + feature + "." + name)
}

// inCatalog reports whether the catalog has the attribute.
func inCatalog(feature, name string) bool {
	return slices.ContainsFunc(discovery.Attributes(), func(a discovery.Attribute) bool { return a.Feature == feature && a.Name == name })
}

// pciBusID reads a PCI address as the standard attribute takes it (the
// helper's check: "0000:07:00.0", lowercase); false for one it refuses.
func pciBusID(a discovery.Attribute) func(discovery.Item) (string, bool) {
	return func(it discovery.Item) (string, bool) {
		v, ok := a.Get(it)
		if !ok {
			return "", false
		}
		if _, err := deviceattribute.GetPCIBusIDAttribute(v); err != nil {
			return "", false
		}
		return v, true
	}
}

// numaNode reads a NUMA node as the standard attribute takes it: not at
// all when the GPU has no NUMA affinity (it would match every other
// device without one).
func numaNode(a discovery.Attribute) func(discovery.Item) (string, bool) {
	return func(it discovery.Item) (string, bool) {
		v, ok := a.Get(it)
		if !ok {
			return "", false
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return "", false
		}
		if _, err := deviceattribute.GetNUMANodeAttribute(n, deviceattribute.ScalarAttribute); err != nil {
			return "", false
		}
		return v, true
	}
}

// Names returns the attribute and capacity names devices of a kind
// (TypeGPU or TypeMIG) can carry, AttrResource included, in table order.
func (s *Schema) Names(kind string) []Name {
	t, ok := s.tables[kind]
	if !ok {
		return nil
	}
	out := []Name{{Name: AttrResource, Key: AttrResource, Type: discovery.TypeString}}
	for _, e := range t.entries {
		n := Name{Name: e.name, Key: e.key, Capacity: e.capacity, Type: e.typ}
		for _, k := range e.nfd {
			feature, name, _ := strings.Cut(k, "\x00")
			n.NFD = append(n.NFD, feature+"."+name)
		}
		out = append(out, n)
	}
	return out
}

// Name is one attribute or capacity of a device kind.
type Name struct {
	// Name is the name as published: unqualified (in Domain) or
	// qualified by another domain.
	Name resourceapi.QualifiedName
	// Key is its name in featureplug's own schema.
	Key resourceapi.QualifiedName
	// Capacity is true for a capacity.
	Capacity bool
	// NFD are the NFD attributes it publishes ("nvidia.gpu.product"); none
	// for type, resource, computeCapability, pcieRoot and addressingMode.
	NFD []string
	// Type is the type of its value (bool for a flag).
	Type discovery.Type
}

// Published returns the name the schema publishes featureplug's attribute
// or capacity key under on a device kind, and whether it does.
func (s *Schema) Published(kind string, key resourceapi.QualifiedName) (resourceapi.QualifiedName, bool) {
	if key == AttrResource {
		return key, true
	}
	t, ok := s.tables[kind]
	if !ok {
		return "", false
	}
	e, ok := t.byKey[key]
	if !ok {
		return "", false
	}
	return e.name, true
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
	// holds the value, as published (SplitName gives its CEL domain).
	Attribute resourceapi.QualifiedName
	// Capacity is set when Attribute is a capacity; Unit is what one unit
	// of the NFD value is in it (1 MiB for memory, 1 for counts).
	Capacity bool
	Unit     int64
	// Version is set when Attribute is a version (semantic, "12.8.0").
	Version bool
	// Part is "major" or "minor" when the NFD int is that part of the
	// version Attribute (nvidia.driver.major is driverVersion's major).
	Part string
	// Optional is set when a device may lack Attribute: read it only
	// where the device carries it.
	Optional bool
	// Default, with Optional, is NFD's value on a device without
	// Attribute ("-1" for numa, whose standard attribute a GPU without
	// NUMA affinity lacks); "" when there is none to match.
	Default string
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

// Lookup returns what the NFD attribute name of feature (lowercase, as
// NFD looks features up) reads on a device of kind (TypeGPU or TypeMIG),
// the feature's instance being the device itself, or for nvidia.gpu on a
// MIG device its parent GPU, as the planner matches them. It returns a
// *NoFormError for a catalog attribute the device does not carry (of a
// MIG device's parent GPU, what nvidia.mig does not repeat): the 32
// attributes resource.k8s.io allows a device leave no room for it.
func (s *Schema) Lookup(kind, feature, name string) (Form, error) {
	t, ok := s.tables[kind]
	if !ok {
		return Form{}, fmt.Errorf("device kind %q: want %s or %s", kind, TypeGPU, TypeMIG)
	}
	f := Form{Feature: feature, Name: name}
	switch {
	case feature == discovery.FeatureMIG && kind == TypeGPU,
		feature != discovery.FeatureGPU && feature != discovery.FeatureMIG && feature != discovery.FeatureDriver && feature != discovery.FeatureCapabilities:
		f.Absent = true
		return f, nil
	}
	k := nfdKey(feature, name)
	if c, ok := t.consts[k]; ok {
		f.Type, f.Const, f.Flag = discovery.TypeBool, c, feature == discovery.FeatureCapabilities
		return f, nil
	}
	if p, ok := t.parts[k]; ok {
		e := t.byKey[p.key]
		f.Type = discovery.TypeInt
		f.Attribute, f.Version, f.Part, f.Optional = e.name, true, p.part, e.optional
		return f, nil
	}
	if e, ok := t.byNFD[k]; ok {
		f.Type, f.Attribute, f.Flag = e.typ, e.name, e.flag
		f.Capacity, f.Unit = e.capacity, e.unit
		f.Version = e.typ == discovery.TypeVersion
		f.Optional, f.Default = e.optional, e.absent
		return f, nil
	}
	if inCatalog(feature, name) {
		why, ok := t.noForm[k]
		if !ok {
			why = "a MIG device carries of its parent GPU only what nvidia.mig repeats (uuid, index, product, family, memory, numa), the PCI address and root and the compute capability (resource.k8s.io allows 32 attributes and capacities per device)"
		}
		return Form{}, &NoFormError{Kind: kind, Feature: feature, Name: name, Reason: why}
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
	return string(f.Attribute)
}
