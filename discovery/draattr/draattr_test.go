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
	"github.com/featureplug/featureplug/rules/catalog"
)

var (
	cIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// semver.org 2.0.0 without pre-release and build: no leading zeros.
	plainSemver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)
)

func TestNamesAreUniqueCIdentifiers(t *testing.T) {
	for _, kind := range []string{draattr.TypeGPU, draattr.TypeMIG} {
		names := draattr.Names(kind)
		if len(names) == 0 {
			t.Fatalf("%s: no names", kind)
		}
		// +1: the sink's shares capacity of a time-sliced device.
		if len(names)+1 > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
			t.Errorf("%s devices can carry %d attributes and capacities, resource.k8s.io allows %d", kind, len(names), resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
		}
		seen := map[resourceapi.QualifiedName]bool{}
		for _, n := range names {
			if seen[n.Name] {
				t.Errorf("%s: name %q twice", kind, n.Name)
			}
			seen[n.Name] = true
			if !cIdentifier.MatchString(string(n.Name)) || len(n.Name) > resourceapi.DeviceMaxIDLength {
				t.Errorf("%s: name %q is not a C identifier of at most %d characters", kind, n.Name, resourceapi.DeviceMaxIDLength)
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

func catalogDevices(t *testing.T) []device {
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
			attrs, caps := draattr.Device(inv, g, nil)
			out = append(out, device{node: n.Name, uuid: g.UUID, kind: draattr.TypeGPU, attrs: attrs, caps: caps,
				nfd: map[string]map[string]string{discovery.FeatureGPU: gpuNFD, discovery.FeatureDriver: driver, discovery.FeatureCapabilities: flags}})
			for mi := range g.MIGDevices {
				m := &g.MIGDevices[mi]
				attrs, caps := draattr.Device(inv, g, m)
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
	devs := catalogDevices(t)
	kinds := map[string]bool{}
	for _, d := range devs {
		kinds[d.kind] = true
		// +2: the sink adds AttrResource and, when it time-slices the
		// device, the capacity shares.
		if n := len(d.attrs) + len(d.caps) + 2; n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
			t.Errorf("%s %s: %d attributes and capacities, resource.k8s.io allows %d", d.node, d.uuid, n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
		}
		if _, ok := d.attrs[draattr.AttrResource]; ok {
			t.Errorf("%s %s: Device set %s", d.node, d.uuid, draattr.AttrResource)
		}
		if got := d.attrs[draattr.AttrType].StringValue; got == nil || *got != d.kind {
			t.Errorf("%s %s: type = %v, want %s", d.node, d.uuid, got, d.kind)
		}
		if _, ok := d.caps[draattr.CapMemory]; !ok {
			t.Errorf("%s %s: no memory capacity", d.node, d.uuid)
		}
		byName := map[resourceapi.QualifiedName]draattr.Name{}
		for _, n := range draattr.Names(d.kind) {
			byName[n.Name] = n
		}
		for name, a := range d.attrs {
			n, ok := byName[name]
			if !ok || n.Capacity {
				t.Errorf("%s %s: attribute %s is not in Names(%s)", d.node, d.uuid, name, d.kind)
				continue
			}
			if set := countSet(a); set != 1 {
				t.Errorf("%s %s: attribute %s has %d values set", d.node, d.uuid, name, set)
			}
			want := map[discovery.Type]string{discovery.TypeString: "string", discovery.TypeInt: "int", discovery.TypeQuantity: "int", discovery.TypeBool: "bool", discovery.TypeVersion: "version"}[n.Type]
			if n.Type == 0 {
				want = map[resourceapi.QualifiedName]string{draattr.AttrType: "string", draattr.AttrComputeCapability: "version"}[name]
			}
			if got := typeOf(a); got != want {
				t.Errorf("%s %s: attribute %s is a %s, the catalog says %s", d.node, d.uuid, name, got, want)
			}
			if a.VersionValue != nil && !plainSemver.MatchString(*a.VersionValue) {
				t.Errorf("%s %s: attribute %s = %q is not a semantic version", d.node, d.uuid, name, *a.VersionValue)
			}
			if a.StringValue != nil && len(*a.StringValue) > resourceapi.DeviceAttributeMaxValueLength {
				t.Errorf("%s %s: attribute %s is too long", d.node, d.uuid, name)
			}
		}
		for name := range d.caps {
			if n, ok := byName[name]; !ok || !n.Capacity {
				t.Errorf("%s %s: capacity %s is not a capacity in Names(%s)", d.node, d.uuid, name, d.kind)
			}
		}
	}
	if !kinds[draattr.TypeGPU] || !kinds[draattr.TypeMIG] {
		t.Fatalf("catalog devices cover kinds %v, want gpu and mig", kinds)
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
// checks it has the NFD value.
func TestLookupAgreesWithFeatures(t *testing.T) {
	noForm := map[string]bool{}
	for _, d := range catalogDevices(t) {
		for _, a := range discovery.Attributes() {
			feats, seen := d.nfd[a.Feature]
			f, err := draattr.Lookup(d.kind, a.Feature, a.Name)
			var nf *draattr.NoFormError
			if errors.As(err, &nf) {
				noForm[d.kind+" "+a.Feature+"."+a.Name] = true
				continue
			}
			if err != nil {
				t.Fatalf("Lookup(%s, %s, %s): %v", d.kind, a.Feature, a.Name, err)
			}
			if !seen {
				if !f.Absent {
					t.Errorf("%s %s: %s.%s: form %v, want absent (the device's rules see no %s)", d.node, d.uuid, a.Feature, a.Name, f, a.Feature)
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
					t.Errorf("%s %s: %s.%s: NFD does not publish it, DRA form %v reads %q", d.node, d.uuid, a.Feature, a.Name, f, got)
				}
				continue
			}
			if a.Type == discovery.TypeVersion {
				want, _ = draattr.Semver(want)
			}
			if got != want || (!ok && want != "") {
				t.Errorf("%s %s: %s.%s = %q in NFD, DRA form %v reads %q (%v)", d.node, d.uuid, a.Feature, a.Name, want, f, got, ok)
			}
		}
	}
	// What has no DRA form, so that growing it is a decision.
	for _, want := range []string{"mig nvidia.gpu.brand", "mig nvidia.gpu.pci.bus", "mig nvidia.gpu.mig.count"} {
		if !noForm[want] {
			t.Errorf("%s: want no DRA form", want)
		}
	}
	for k := range noForm {
		if k[:3] != "mig" {
			t.Errorf("%s has no DRA form: every attribute of a whole GPU should", k)
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
		return strconv.FormatInt(c.Value.Value()>>20, 10), true
	}
	a, ok := d.attrs[f.Attribute]
	if !ok {
		return "", false
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
		kind, feature, name string
		want                string // Form.String, or "error"
	}{
		{draattr.TypeGPU, discovery.FeatureMIG, "profile", "absent"},
		{draattr.TypeGPU, "cpu.model", "vendor_id", "absent"},
		{draattr.TypeGPU, discovery.FeatureGPU, "nonesuch", "missing"},
		{draattr.TypeMIG, discovery.FeatureGPU, "nonesuch", "missing"},
		{draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrMemory, "capacity memory"},
		{draattr.TypeMIG, discovery.FeatureGPU, discovery.AttrMemory, "parentMemory"},
		{draattr.TypeMIG, discovery.FeatureGPU, discovery.AttrMIGEnabled, "const true"},
		{draattr.TypeMIG, discovery.FeatureGPU, discovery.AttrComputeMinor, "computeCapability.minor()"},
		{draattr.TypeGPU, discovery.FeatureDriver, discovery.AttrCUDAMinor, "cudaVersion.minor()"},
		{draattr.TypeGPU, discovery.FeatureDriver, discovery.AttrDriverVersion, "driverVersion"},
		{draattr.TypeGPU, discovery.FeatureCapabilities, discovery.FlagMIGEnabled, "capabilityMigEnabled"},
		{draattr.TypeMIG, discovery.FeatureCapabilities, discovery.FlagMIGEnabled, "const true"},
		{draattr.TypeMIG, discovery.FeatureCapabilities, discovery.FlagMIG, "const true"},
		{draattr.TypeMIG, discovery.FeatureCapabilities, discovery.FlagNVLink, "capabilityNvlink"},
		{draattr.TypeMIG, discovery.FeatureGPU, discovery.AttrBrand, "error"},
		{"vgpu", discovery.FeatureGPU, discovery.AttrBrand, "error"},
	} {
		f, err := draattr.Lookup(c.kind, c.feature, c.name)
		got := f.String()
		if err != nil {
			got = "error"
		}
		if got != c.want {
			t.Errorf("Lookup(%s, %s, %s) = %s (%v), want %s", c.kind, c.feature, c.name, got, err, c.want)
		}
	}
}
