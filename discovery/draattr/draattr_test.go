package draattr_test

import (
	"errors"
	"regexp"
	"strconv"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/discovery/migplace"
	"github.com/featureplug/featureplug/rules/catalog"
)

var (
	cIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// semver.org 2.0.0 without pre-release and build: no leading zeros.
	plainSemver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)
)

// schemas are the namings the tests cover.
var schemas = []draattr.Compatibility{draattr.Own, draattr.NVIDIA}

func schemaFor(t *testing.T, c draattr.Compatibility) *draattr.Schema {
	t.Helper()
	s, err := draattr.For(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNamesAreUniqueQualifiedNames(t *testing.T) {
	for _, c := range schemas {
		s := schemaFor(t, c)
		for _, kind := range []string{draattr.TypeGPU, draattr.TypeMIG} {
			names := s.Names(kind)
			if len(names) == 0 {
				t.Fatalf("%q %s: no names", c, kind)
			}
			// +1: the sink's shares capacity of a time-sliced device.
			if len(names)+1 > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
				t.Errorf("%q %s devices can carry %d attributes and capacities, resource.k8s.io allows %d", c, kind, len(names)+1, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
			}
			seen := map[string]bool{}
			for _, n := range names {
				domain, id := draattr.SplitName(n.Name)
				if seen[domain+"/"+id] {
					t.Errorf("%q %s: name %q twice", c, kind, n.Name)
				}
				seen[domain+"/"+id] = true
				if !cIdentifier.MatchString(id) || len(id) > resourceapi.DeviceMaxIDLength {
					t.Errorf("%q %s: name %q is not a C identifier of at most %d characters", c, kind, n.Name, resourceapi.DeviceMaxIDLength)
				}
				if errs := validation.IsDNS1123Subdomain(domain); len(errs) > 0 {
					t.Errorf("%q %s: name %q has domain %q: %v", c, kind, n.Name, domain, errs)
				}
			}
		}
	}
}

func TestLowerCamel(t *testing.T) {
	for in, want := range map[string]string{
		"compute.major": "computeMajor", "pci.bus": "pciBus", "uuid": "uuid",
		"parent.compute.major": "parentComputeMajor", "slices.gi": "slicesGi",
	} {
		if got := draattr.LowerCamel(in); got != want {
			t.Errorf("LowerCamel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSemver(t *testing.T) {
	for in, want := range map[string]string{
		"12.8": "12.8.0", "570.86.15": "570.86.15", "535.104.05": "535.104.5", "9": "9.0.0", "0.0.0": "0.0.0",
		"unknown": "", "1.2.3.4": "", "": "", "1..2": "", "-1.0": "", "+1": "",
	} {
		got, ok := draattr.Semver(in)
		if ok != (want != "") || got != want {
			t.Errorf("Semver(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestDeviceName(t *testing.T) {
	for in, want := range map[string]string{
		"GPU-6f4a1c2e-0b9d-4e57-8a3f-1d2c3b4a5f60":         "gpu-6f4a1c2e-0b9d-4e57-8a3f-1d2c3b4a5f60",
		"MIG-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c5d":         "mig-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c5d",
		"MIG-GPU-6f4a1c2e-0b9d-4e57-8a3f-1d2c3b4a5f60/1/0": "mig-gpu-6f4a1c2e-0b9d-4e57-8a3f-1d2c3b4a5f60-1-0",
	} {
		if got := draattr.DeviceName(in); got != want {
			t.Errorf("DeviceName(%q) = %q, want %q", in, got, want)
		}
	}
	long := "MIG-" + string(make([]byte, 80))
	for _, in := range []string{"", "///", long} {
		got := draattr.DeviceName(in)
		if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
			t.Errorf("DeviceName(%q) = %q: %v", in, got, errs)
		}
	}
	if draattr.DeviceName("") == draattr.DeviceName("///") {
		t.Errorf("two UUIDs that make no label got one name %q", draattr.DeviceName(""))
	}
}

// device is one device of a catalog node with what it carries and what
// its rules see in NFD.
type device struct {
	node, uuid string
	kind       string
	attrs      map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	caps       map[resourceapi.QualifiedName]resourceapi.DeviceCapacity
	nfd        map[string]map[string]string // feature -> name -> value; flags "true"
}

func catalogDevices(t *testing.T, s *draattr.Schema) []device {
	t.Helper()
	nodes, err := catalog.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	var out []device
	for _, n := range nodes {
		inv := n.Inventory
		flags := map[string]string{}
		f := discovery.Features(inv)
		for name := range f.Flags[discovery.FeatureCapabilities].Elements {
			flags[name] = "true"
		}
		driver := discovery.DriverAttributes(inv)
		for gi := range inv.GPUs {
			g := &inv.GPUs[gi]
			gpuNFD := discovery.GPUAttributes(inv, g)
			attrs, caps := s.Device(inv, g, nil)
			out = append(out, device{node: n.Name, uuid: g.UUID, kind: draattr.TypeGPU, attrs: attrs, caps: caps,
				nfd: map[string]map[string]string{discovery.FeatureGPU: gpuNFD, discovery.FeatureDriver: driver, discovery.FeatureCapabilities: flags}})
			for mi := range g.MIGDevices {
				m := &g.MIGDevices[mi]
				attrs, caps := s.Device(inv, g, m)
				out = append(out, device{node: n.Name, uuid: m.UUID, kind: draattr.TypeMIG, attrs: attrs, caps: caps,
					nfd: map[string]map[string]string{discovery.FeatureGPU: gpuNFD, discovery.FeatureMIG: discovery.MIGAttributes(g, m),
						discovery.FeatureDriver: driver, discovery.FeatureCapabilities: flags}})
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no catalog devices")
	}
	return out
}

func TestDeviceFitsAndIsTyped(t *testing.T) {
	for _, c := range schemas {
		s := schemaFor(t, c)
		devs := catalogDevices(t, s)
		kinds := map[string]bool{}
		for _, d := range devs {
			kinds[d.kind] = true
			// +2: the sink adds AttrResource and, when it time-slices the
			// device, the capacity shares.
			if n := len(d.attrs) + len(d.caps) + 2; n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
				t.Errorf("%q %s %s: %d attributes and capacities, resource.k8s.io allows %d", c, d.node, d.uuid, n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
			}
			if _, ok := d.attrs[draattr.AttrResource]; ok {
				t.Errorf("%q %s %s: Device set %s", c, d.node, d.uuid, draattr.AttrResource)
			}
			typ, _ := s.Published(d.kind, draattr.AttrType)
			if got := d.attrs[typ].StringValue; got == nil || *got != d.kind {
				t.Errorf("%q %s %s: %s = %v, want %s", c, d.node, d.uuid, typ, got, d.kind)
			}
			memory, _ := s.Published(d.kind, draattr.CapMemory)
			if _, ok := d.caps[memory]; !ok {
				t.Errorf("%q %s %s: no memory capacity %s", c, d.node, d.uuid, memory)
			}
			for _, std := range []resourceapi.QualifiedName{draattr.AttrPCIeRoot, draattr.AttrPCIBusID, draattr.AttrNUMANode} {
				if _, ok := d.attrs[std]; !ok {
					t.Errorf("%q %s %s: no standard attribute %s", c, d.node, d.uuid, std)
				}
			}
			byName := map[resourceapi.QualifiedName]draattr.Name{}
			for _, n := range s.Names(d.kind) {
				byName[n.Name] = n
			}
			for name, a := range d.attrs {
				n, ok := byName[name]
				if !ok || n.Capacity {
					t.Errorf("%q %s %s: attribute %s is not in Names(%s)", c, d.node, d.uuid, name, d.kind)
					continue
				}
				if set := countSet(a); set != 1 {
					t.Errorf("%q %s %s: attribute %s has %d values set", c, d.node, d.uuid, name, set)
				}
				want := map[discovery.Type]string{discovery.TypeString: "string", discovery.TypeInt: "int", discovery.TypeQuantity: "int", discovery.TypeBool: "bool", discovery.TypeVersion: "version"}[n.Type]
				if got := typeOf(a); got != want {
					t.Errorf("%q %s %s: attribute %s is a %s, the catalog says %s", c, d.node, d.uuid, name, got, want)
				}
				if a.VersionValue != nil && !plainSemver.MatchString(*a.VersionValue) {
					t.Errorf("%q %s %s: attribute %s = %q is not a semantic version", c, d.node, d.uuid, name, *a.VersionValue)
				}
				if a.StringValue != nil && len(*a.StringValue) > resourceapi.DeviceAttributeMaxValueLength {
					t.Errorf("%q %s %s: attribute %s is too long", c, d.node, d.uuid, name)
				}
			}
			for name := range d.caps {
				if n, ok := byName[name]; !ok || !n.Capacity {
					t.Errorf("%q %s %s: capacity %s is not a capacity in Names(%s)", c, d.node, d.uuid, name, d.kind)
				}
			}
		}
		if !kinds[draattr.TypeGPU] || !kinds[draattr.TypeMIG] {
			t.Fatalf("catalog devices cover kinds %v, want gpu and mig", kinds)
		}
	}
}

func countSet(a resourceapi.DeviceAttribute) int {
	n := 0
	for _, set := range []bool{a.IntValue != nil, a.BoolValue != nil, a.StringValue != nil, a.VersionValue != nil,
		a.IntValues != nil, a.BoolValues != nil, a.StringValues != nil, a.VersionValues != nil} {
		if set {
			n++
		}
	}
	return n
}

func typeOf(a resourceapi.DeviceAttribute) string {
	switch {
	case a.IntValue != nil:
		return "int"
	case a.BoolValue != nil:
		return "bool"
	case a.StringValue != nil:
		return "string"
	case a.VersionValue != nil:
		return "version"
	}
	return "none"
}

// TestLookupAgreesWithFeatures reads, for every catalog device, every
// attribute its rules see in NFD through Lookup on the DRA device, and
// checks it has the NFD value, in both schemas.
func TestLookupAgreesWithFeatures(t *testing.T) {
	for _, c := range schemas {
		s := schemaFor(t, c)
		noForm := map[string]bool{}
		for _, d := range catalogDevices(t, s) {
			for _, a := range discovery.Attributes() {
				feats, seen := d.nfd[a.Feature]
				f, err := s.Lookup(d.kind, a.Feature, a.Name)
				var nf *draattr.NoFormError
				if errors.As(err, &nf) {
					noForm[d.kind+" "+a.Feature+"."+a.Name] = true
					continue
				}
				if err != nil {
					t.Fatalf("%q: Lookup(%s, %s, %s): %v", c, d.kind, a.Feature, a.Name, err)
				}
				if !seen {
					if !f.Absent {
						t.Errorf("%q %s %s: %s.%s: form %v, want absent (the device's rules see no %s)", c, d.node, d.uuid, a.Feature, a.Name, f, a.Feature)
					}
					continue
				}
				want, published := feats[a.Name]
				got, ok := formValue(f, d)
				if a.Kind == discovery.KindFlags {
					if !published {
						want = "false"
					}
					published = true
				}
				if !published {
					if ok {
						t.Errorf("%q %s %s: %s.%s: NFD does not publish it, DRA form %v reads %q", c, d.node, d.uuid, a.Feature, a.Name, f, got)
					}
					continue
				}
				if a.Type == discovery.TypeVersion {
					want, _ = draattr.Semver(want)
				}
				if got != want || (!ok && want != "") {
					t.Errorf("%q %s %s: %s.%s = %q in NFD, DRA form %v reads %q (%v)", c, d.node, d.uuid, a.Feature, a.Name, want, f, got, ok)
				}
			}
		}
		// What has no DRA form, so that growing it is a decision.
		want := []string{"mig nvidia.gpu.mig.count", "mig nvidia.gpu.nvlinks", "mig nvidia.gpu.clique"}
		if c == draattr.NVIDIA {
			want = append(want, "mig nvidia.mig.slices.gi", "mig nvidia.mig.parent.family", "mig nvidia.gpu.family")
		}
		for _, w := range want {
			if !noForm[w] {
				t.Errorf("%q: %s: want no DRA form", c, w)
			}
		}
		for k := range noForm {
			if k[:3] != "mig" {
				t.Errorf("%q: %s has no DRA form: every attribute of a whole GPU should", c, k)
			}
		}
	}
}

// formValue reads a form on a device as NFD would publish it (versions
// as semver).
func formValue(f draattr.Form, d device) (string, bool) {
	switch {
	case f.Const != "":
		return f.Const, true
	case f.Absent, f.Missing:
		return "", false
	case f.Capacity:
		c, ok := d.caps[f.Attribute]
		if !ok {
			return "", false
		}
		return strconv.FormatInt(c.Value.Value()/f.Unit, 10), true
	}
	a, ok := d.attrs[f.Attribute]
	if !ok {
		return f.Default, f.Default != ""
	}
	switch {
	case f.Part != "":
		v := regexp.MustCompile(`^(\d+)\.(\d+)\.`).FindStringSubmatch(*a.VersionValue)
		if f.Part == "major" {
			return v[1], true
		}
		return v[2], true
	case a.IntValue != nil:
		return strconv.FormatInt(*a.IntValue, 10), true
	case a.BoolValue != nil:
		return strconv.FormatBool(*a.BoolValue), true
	case a.StringValue != nil:
		return *a.StringValue, true
	case a.VersionValue != nil:
		return *a.VersionValue, true
	}
	return "", false
}

func TestLookupOddCases(t *testing.T) {
	for _, c := range []struct {
		compat              draattr.Compatibility
		kind, feature, name string
		want                string // Form.String, or "error"
	}{
		{draattr.Own, draattr.TypeGPU, discovery.FeatureMIG, "profile", "absent"},
		{draattr.Own, draattr.TypeGPU, "cpu.model", "vendor_id", "absent"},
		{draattr.Own, draattr.TypeGPU, discovery.FeatureGPU, "nonesuch", "missing"},
		{draattr.Own, draattr.TypeMIG, discovery.FeatureGPU, "nonesuch", "missing"},
		{draattr.Own, draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrMemory, "capacity memory"},
		{draattr.Own, draattr.TypeMIG, discovery.FeatureGPU, discovery.AttrMemory, "parentMemory"},
		{draattr.Own, draattr.TypeMIG, discovery.FeatureMIG, discovery.AttrMultiprocessors, "capacity multiprocessors"},
		{draattr.Own, draattr.TypeMIG, discovery.FeatureGPU, discovery.AttrMIGEnabled, "const true"},
		{draattr.Own, draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrComputeMajor, "computeCapability.major()"},
		{draattr.Own, draattr.TypeMIG, discovery.FeatureGPU, discovery.AttrComputeMinor, "computeCapability.minor()"},
		{draattr.Own, draattr.TypeMIG, discovery.FeatureMIG, discovery.AttrParentComputeMajor, "computeCapability.major()"},
		{draattr.Own, draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrPCIBus, "resource.kubernetes.io/pciBusID"},
		{draattr.Own, draattr.TypeMIG, discovery.FeatureGPU, discovery.AttrPCIBus, "resource.kubernetes.io/pciBusID"},
		{draattr.Own, draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrNUMA, "resource.kubernetes.io/numaNode"},
		{draattr.Own, draattr.TypeMIG, discovery.FeatureMIG, discovery.AttrParentNUMA, "resource.kubernetes.io/numaNode"},
		{draattr.Own, draattr.TypeGPU, discovery.FeatureDriver, discovery.AttrCUDAMinor, "cudaVersion.minor()"},
		{draattr.Own, draattr.TypeGPU, discovery.FeatureDriver, discovery.AttrDriverVersion, "driverVersion"},
		{draattr.Own, draattr.TypeGPU, discovery.FeatureCapabilities, discovery.FlagMIGEnabled, "capabilityMigEnabled"},
		{draattr.Own, draattr.TypeMIG, discovery.FeatureCapabilities, discovery.FlagMIGEnabled, "const true"},
		{draattr.Own, draattr.TypeMIG, discovery.FeatureCapabilities, discovery.FlagMPS, "const true"},
		{draattr.Own, draattr.TypeMIG, discovery.FeatureCapabilities, discovery.FlagNVLink, "capabilityNvlink"},
		{draattr.Own, draattr.TypeMIG, discovery.FeatureGPU, discovery.AttrBrand, "error"},
		{draattr.Own, "vgpu", discovery.FeatureGPU, discovery.AttrBrand, "error"},
		{draattr.NVIDIA, draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrProduct, "gpu.nvidia.com/productName"},
		{draattr.NVIDIA, draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrMemory, "capacity gpu.nvidia.com/memory"},
		{draattr.NVIDIA, draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrComputeMajor, "gpu.nvidia.com/cudaComputeCapability.major()"},
		{draattr.NVIDIA, draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrFamily, "family"},
		{draattr.NVIDIA, draattr.TypeGPU, discovery.FeatureDriver, discovery.AttrCUDAVersion, "gpu.nvidia.com/cudaDriverVersion"},
		{draattr.NVIDIA, draattr.TypeMIG, discovery.FeatureGPU, discovery.AttrProduct, "gpu.nvidia.com/productName"},
		{draattr.NVIDIA, draattr.TypeMIG, discovery.FeatureGPU, discovery.AttrBrand, "gpu.nvidia.com/brand"},
		{draattr.NVIDIA, draattr.TypeMIG, discovery.FeatureGPU, discovery.AttrUUID, "gpu.nvidia.com/parentUUID"},
		{draattr.NVIDIA, draattr.TypeMIG, discovery.FeatureMIG, discovery.AttrEnginesCopy, "capacity gpu.nvidia.com/copyEngines"},
		{draattr.NVIDIA, draattr.TypeMIG, discovery.FeatureMIG, discovery.AttrSlicesGI, "error"},
		{draattr.NVIDIA, draattr.TypeMIG, discovery.FeatureGPU, discovery.AttrFamily, "error"},
	} {
		s := schemaFor(t, c.compat)
		f, err := s.Lookup(c.kind, c.feature, c.name)
		got := f.String()
		if err != nil {
			got = "error"
		}
		if got != c.want {
			t.Errorf("%q: Lookup(%s, %s, %s) = %s (%v), want %s", c.compat, c.kind, c.feature, c.name, got, err, c.want)
		}
	}
}

// TestNVIDIADeviceNames names devices as NVIDIA's driver does: gpu-<minor>
// and gpu-<minor>-mig-<profile>-<GPU instance profile>-<placement start>,
// with the UUID names where the minor or placement is unknown.
func TestNVIDIADeviceNames(t *testing.T) {
	nv, own := schemaFor(t, draattr.NVIDIA), schemaFor(t, draattr.Own)
	gpu := &discovery.GPU{UUID: "GPU-6f4a1c2e-0b9d-4e57-8a3f-1d2c3b4a5f60", Minor: 3}
	mig := func(profile string, id, start, gi, ci int) *discovery.MIGDevice {
		pid := uint32(id)
		return &discovery.MIGDevice{UUID: "MIG-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c5d", Profile: profile, GPUInstanceProfileID: &pid,
			Placement: &migplace.Placement{Start: start, Size: 1}, GISlices: gi, CISlices: ci, ComputeInstanceID: 2}
	}
	for _, c := range []struct {
		gpu  *discovery.GPU
		mig  *discovery.MIGDevice
		want string
	}{
		{gpu, nil, "gpu-3"},
		{gpu, mig("1g.5gb", 19, 6, 1, 1), "gpu-3-mig-1g5gb-19-6"},
		{gpu, mig("1g.24gb+me", 20, 5, 1, 1), "gpu-3-mig-1g24gb-me-20-5"},
		{gpu, mig("1c.3g.40gb", 9, 4, 3, 1), "gpu-3-mig-1c3g40gb-9-4-ci2"},
		{gpu, &discovery.MIGDevice{UUID: "MIG-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c5d", Profile: "1g.5gb"}, "mig-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c5d"},
		{&discovery.GPU{UUID: gpu.UUID, Minor: -1}, nil, "gpu-6f4a1c2e-0b9d-4e57-8a3f-1d2c3b4a5f60"},
	} {
		if got := nv.DeviceName(c.gpu, c.mig); got != c.want {
			t.Errorf("NVIDIA DeviceName(%+v, %+v) = %q, want %q", c.gpu, c.mig, got, c.want)
		}
	}
	if got := own.DeviceName(gpu, nil); got != draattr.DeviceName(gpu.UUID) {
		t.Errorf("own DeviceName = %q, want the UUID name", got)
	}
	// Every catalog device gets a name of its own.
	nodes, err := catalog.Nodes()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		seen := map[string]string{}
		for gi := range n.Inventory.GPUs {
			g := &n.Inventory.GPUs[gi]
			names := map[string]string{nv.DeviceName(g, nil): g.UUID}
			for mi := range g.MIGDevices {
				names[nv.DeviceName(g, &g.MIGDevices[mi])] = g.MIGDevices[mi].UUID
			}
			for name, uuid := range names {
				if prev, dup := seen[name]; dup {
					t.Errorf("%s: %s and %s are both named %s", n.Name, prev, uuid, name)
				}
				seen[name] = uuid
				if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
					t.Errorf("%s: %s: name %q: %v", n.Name, uuid, name, errs)
				}
			}
		}
	}
}
