package dra

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/plugin/cdi"
	"github.com/featureplug/featureplug/rules/plan"
)

// Device UUIDs of the test node.
const (
	sliceGPU0 = "GPU-0a1b2c3d-0000-0000-0000-000000000000"
	sliceGPU1 = "GPU-0a1b2c3d-1111-0000-0000-000000000000"
	sliceGPU2 = "GPU-0a1b2c3d-2222-0000-0000-000000000000"
	sliceMIG  = "MIG-5e6f7a8b-0000-0000-0000-000000000000"
)

// sliceInventory is a node with a whole A100 80GB (GPU 0), an A100 with
// one MIG 1g.10gb device (GPU 1) and a second whole A100 (GPU 2).
func sliceInventory() *discovery.Inventory {
	gpu := func(i int, uuid string) discovery.GPU {
		return discovery.GPU{
			Index: i, Minor: i, UUID: uuid, Product: "NVIDIA A100-SXM4-80GB", Brand: "Nvidia",
			Architecture: "ampere", Family: "ampere", ComputeMajor: 8, ComputeMinor: 0, MemoryMiB: 81920,
			PCIBusID: "00000000:0" + string(rune('7'+i)) + ":00.0", NUMANode: 0, ComputeMode: "Default", MIGCapable: true,
		}
	}
	g1 := gpu(1, sliceGPU1)
	g1.MIGEnabled = true
	g1.MIGDevices = []discovery.MIGDevice{{
		ParentIndex: 1, ParentUUID: sliceGPU1, Index: 0, GPUInstanceID: 9, ComputeInstanceID: 0,
		UUID: sliceMIG, Profile: "1g.10gb", MemoryMiB: 9856, Multiprocessors: 14, GISlices: 1, CISlices: 1,
	}}
	return &discovery.Inventory{
		DriverVersion: "570.86.15", CUDADriverVersion: "12.8", NVMLVersion: "12.570.86.15",
		GPUs: []discovery.GPU{gpu(0, sliceGPU0), g1, gpu(2, sliceGPU2)},
	}
}

func sliceDev(uuid string, kind plan.DeviceKind, gpu, gpuIndex string, index int, rule string) plan.Device {
	d := plan.Device{ID: uuid, Kind: kind, GPUUUID: gpu, GPUIndex: index, Index: gpuIndex, Rule: rule, MemoryMiB: 81920}
	if kind == plan.DeviceMIG {
		d.Profile, d.MemoryMiB = "1g.10gb", 9856
	}
	return d
}

// slicePlan serves GPU 0 through DRA (explicitly), the MIG device through
// the agent's default, and GPU 2 through the device plugin.
func slicePlan() *plan.Plan {
	return &plan.Plan{Resources: []plan.Resource{
		{Name: "example.com/a100-80gb", Serve: plan.ServeDRA, Devices: []plan.Device{sliceDev(sliceGPU0, plan.DeviceGPU, sliceGPU0, "0", 0, "a100")}},
		{Name: "nvidia.com/gpu", Serve: plan.ServeDevicePlugin, Devices: []plan.Device{sliceDev(sliceGPU2, plan.DeviceGPU, sliceGPU2, "2", 2, "rest")}},
		{Name: "nvidia.com/mig-1g.10gb", Devices: []plan.Device{sliceDev(sliceMIG, plan.DeviceMIG, sliceGPU1, "1:0", 1, "mig")}},
	}}
}

// sliceOpts are BuildOptions with the CDI names of o.
func sliceOpts(o cdi.Options) BuildOptions {
	return BuildOptions{CDIKind: o.Kind, CDIName: o.DeviceName}
}

// sliceCDI names CDI devices as the agent does by default.
var sliceCDI = cdi.Options{Kind: "nvidia.com/gpu"}

// wantDevice is the device BuildSlice must publish: draattr's attributes
// and capacities of the device plus the resource name, and what the test
// adds (policies, taints).
func wantDevice(t *testing.T, inv *discovery.Inventory, gpu, mig int, resourceName string) resourceapi.Device {
	t.Helper()
	g := &inv.GPUs[gpu]
	var m *discovery.MIGDevice
	uuid := g.UUID
	if mig >= 0 {
		m = &g.MIGDevices[mig]
		uuid = m.UUID
	}
	attrs, caps := draattr.OwnSchema().Device(inv, g, m)
	attrs[draattr.AttrResource] = resourceapi.DeviceAttribute{StringValue: ptr.To(resourceName)}
	return resourceapi.Device{Name: strings.ToLower(uuid), Attributes: attrs, Capacity: caps}
}

func mustBuild(t *testing.T, inv *discovery.Inventory, p *plan.Plan, o BuildOptions) Build {
	t.Helper()
	b, err := BuildSlice(inv, p, o)
	if err != nil {
		t.Fatalf("BuildSlice: %v", err)
	}
	return b
}

func TestBuildSliceWholeGPUAndMIG(t *testing.T) {
	inv := sliceInventory()
	b := mustBuild(t, inv, slicePlan().WithServeDefault(plan.ServeDRA), sliceOpts(sliceCDI))

	// Hand-written: the names, the facts a class selects on, and that
	// nothing else is published (GPU 2 is the device plugin's).
	if len(b.Devices) != 2 {
		t.Fatalf("devices %v, want GPU 0 and the MIG device", deviceNames(b.Devices))
	}
	gpu, mig := b.Devices[0], b.Devices[1]
	if gpu.Name != "gpu-0a1b2c3d-0000-0000-0000-000000000000" || mig.Name != "mig-5e6f7a8b-0000-0000-0000-000000000000" {
		t.Fatalf("names %q %q, want the lowercased UUIDs sorted", gpu.Name, mig.Name)
	}
	for _, c := range []struct {
		dev  resourceapi.Device
		attr resourceapi.QualifiedName
		want resourceapi.DeviceAttribute
	}{
		{gpu, "resource", resourceapi.DeviceAttribute{StringValue: ptr.To("example.com/a100-80gb")}},
		{gpu, "type", resourceapi.DeviceAttribute{StringValue: ptr.To("gpu")}},
		{gpu, "product", resourceapi.DeviceAttribute{StringValue: ptr.To("NVIDIA A100-SXM4-80GB")}},
		{gpu, "uuid", resourceapi.DeviceAttribute{StringValue: ptr.To(sliceGPU0)}},
		{gpu, "computeCapability", resourceapi.DeviceAttribute{VersionValue: ptr.To("8.0.0")}},
		{gpu, "driverVersion", resourceapi.DeviceAttribute{VersionValue: ptr.To("570.86.15")}},
		{gpu, "cudaVersion", resourceapi.DeviceAttribute{VersionValue: ptr.To("12.8.0")}},
		{mig, "resource", resourceapi.DeviceAttribute{StringValue: ptr.To("nvidia.com/mig-1g.10gb")}},
		{mig, "type", resourceapi.DeviceAttribute{StringValue: ptr.To("mig")}},
		{mig, "profile", resourceapi.DeviceAttribute{StringValue: ptr.To("1g.10gb")}},
		{mig, "parentUuid", resourceapi.DeviceAttribute{StringValue: ptr.To(sliceGPU1)}},
	} {
		if got, ok := c.dev.Attributes[c.attr]; !ok || !equality.Semantic.DeepEqual(got, c.want) {
			t.Errorf("%s: attribute %s = %+v, want %+v", c.dev.Name, c.attr, got, c.want)
		}
	}
	if got := gpu.Capacity["memory"].Value; got.Cmp(resource.MustParse("80Gi")) != 0 {
		t.Errorf("GPU memory capacity %s, want 80Gi", got.String())
	}
	if got := mig.Capacity["memory"].Value; got.Cmp(resource.MustParse("9856Mi")) != 0 {
		t.Errorf("MIG memory capacity %s, want 9856Mi", got.String())
	}
	for _, d := range b.Devices {
		if d.AllowMultipleAllocations != nil || len(d.Taints) != 0 || d.Capacity["memory"].RequestPolicy != nil {
			t.Errorf("%s: unshared healthy device has sharing or taints: %+v", d.Name, d)
		}
		if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
			t.Errorf("%s: %d attributes and capacities, more than the API's %d", d.Name, n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
		}
	}
	// The whole device: draattr's attributes plus the resource.
	for i, want := range []resourceapi.Device{wantDevice(t, inv, 0, -1, "example.com/a100-80gb"), wantDevice(t, inv, 1, 0, "nvidia.com/mig-1g.10gb")} {
		if !equality.Semantic.DeepEqual(b.Devices[i], want) {
			t.Errorf("device %d:\n got %+v\nwant %+v", i, b.Devices[i], want)
		}
	}
}

func TestBuildSliceDefaultDevicePluginTakesOnlyExplicitDRA(t *testing.T) {
	b := mustBuild(t, sliceInventory(), slicePlan().WithServeDefault(plan.ServeDevicePlugin), sliceOpts(sliceCDI))
	if got := deviceNames(b.Devices); len(got) != 1 || got[0] != "gpu-0a1b2c3d-0000-0000-0000-000000000000" {
		t.Errorf("devices %v, want only GPU 0 (serve: dra)", got)
	}
	if b.Table.Len() != 1 {
		t.Errorf("table has %d devices, want 1", b.Table.Len())
	}
}

func TestBuildSliceTable(t *testing.T) {
	for _, tt := range []struct {
		opts     cdi.Options
		gpu, mig string
	}{
		{cdi.Options{Kind: "nvidia.com/gpu"}, "nvidia.com/gpu=" + sliceGPU0, "nvidia.com/gpu=" + sliceMIG},
		{cdi.Options{Kind: "example.com/dev", ByIndex: true}, "example.com/dev=0", "example.com/dev=1:0"},
	} {
		b := mustBuild(t, sliceInventory(), slicePlan().WithServeDefault(plan.ServeDRA), sliceOpts(tt.opts))
		for name, want := range map[string]struct{ cdi, resource, rule string }{
			"gpu-0a1b2c3d-0000-0000-0000-000000000000": {tt.gpu, "example.com/a100-80gb", "a100"},
			"mig-5e6f7a8b-0000-0000-0000-000000000000": {tt.mig, "nvidia.com/mig-1g.10gb", "mig"},
		} {
			d, ok := b.Table.Lookup(name)
			if !ok {
				t.Errorf("%v: %s not in the table", tt.opts, name)
				continue
			}
			if len(d.CDIDevices) != 1 || d.CDIDevices[0] != want.cdi || d.Resource != want.resource || d.Device.Rule != want.rule || d.Name != name {
				t.Errorf("%v: %s = %+v, want CDI %s resource %s rule %s", tt.opts, name, d, want.cdi, want.resource, want.rule)
			}
		}
		if _, ok := b.Table.Lookup("gpu-0a1b2c3d-2222-0000-0000-000000000000"); ok {
			t.Errorf("%v: the device plugin's GPU 2 is in the DRA table", tt.opts)
		}
	}
}

func TestBuildSliceTimeSliced(t *testing.T) {
	inv := sliceInventory()
	for _, tt := range []struct {
		name    string
		sharing plan.Sharing
		max     *resource.Quantity
	}{
		{"any shares per claim", plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 4}, nil},
		{"one share per claim", plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 4, FailRequestsGreaterThanOne: true}, ptr.To(resource.MustParse("1"))},
		// MPS fails requests greater than one whatever the rule says.
		{"MPS", plan.Sharing{Strategy: plan.SharingMPS, Replicas: 4}, ptr.To(resource.MustParse("1"))},
		{"MPS with limits", plan.Sharing{Strategy: plan.SharingMPS, Replicas: 4,
			MPS: &plan.MPSLimits{ActiveThreadPercentage: 20, PinnedMemoryLimitMiB: 10240}}, ptr.To(resource.MustParse("1"))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := &plan.Plan{Resources: []plan.Resource{{Name: "example.com/shared", Sharing: tt.sharing, Serve: plan.ServeDRA,
				Devices: []plan.Device{sliceDev(sliceGPU0, plan.DeviceGPU, sliceGPU0, "0", 0, "shared")}}}}
			b := mustBuild(t, inv, p, sliceOpts(sliceCDI))
			want := wantDevice(t, inv, 0, -1, "example.com/shared")
			// Hand-written: the sharing a time-sliced device has.
			want.AllowMultipleAllocations = ptr.To(true)
			want.Capacity["memory"] = resourceapi.DeviceCapacity{
				Value:         resource.MustParse("80Gi"),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: ptr.To(resource.MustParse("0"))},
			}
			want.Capacity["shares"] = resourceapi.DeviceCapacity{
				Value: resource.MustParse("4"),
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default:    ptr.To(resource.MustParse("1")),
					ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(resource.MustParse("1")), Max: tt.max, Step: ptr.To(resource.MustParse("1"))},
				},
			}
			if len(b.Devices) != 1 || !equality.Semantic.DeepEqual(b.Devices[0], want) {
				t.Errorf("devices:\n got %+v\nwant %+v", b.Devices, want)
			}
			if d, _ := b.Table.Lookup(want.Name); d.Sharing != tt.sharing {
				t.Errorf("table sharing %+v, want %+v", d.Sharing, tt.sharing)
			}
		})
	}
}

func TestBuildSliceUnhealthy(t *testing.T) {
	inv := sliceInventory()
	const gpuName, migName = "gpu-0a1b2c3d-0000-0000-0000-000000000000", "mig-5e6f7a8b-0000-0000-0000-000000000000"
	for _, tt := range []struct {
		name string
		bad  Unhealthy
		want map[string]string // device name -> taint value
	}{
		{"healthy", nil, map[string]string{}},
		{"whole GPU", Unhealthy{sliceGPU0: "ecc-double-bit"}, map[string]string{gpuName: "ecc-double-bit"}},
		{"parent of a MIG device", Unhealthy{sliceGPU1: "xid-79"}, map[string]string{migName: "xid-79"}},
		{"one MIG device", Unhealthy{sliceMIG: "xid-94"}, map[string]string{migName: "xid-94"}},
		{"another MIG device of the parent", Unhealthy{"MIG-ffffffff-0000-0000-0000-000000000000": "xid-94"}, map[string]string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := mustBuild(t, inv, slicePlan().WithServeDefault(plan.ServeDRA), withOpts(sliceOpts(sliceCDI), func(o *BuildOptions) { o.Unhealthy = tt.bad }))
			if len(b.Devices) != 2 {
				t.Fatalf("devices %v, want 2: an unhealthy device stays in the slice", deviceNames(b.Devices))
			}
			for _, d := range b.Devices {
				value, tainted := tt.want[d.Name]
				var want []resourceapi.DeviceTaint
				if tainted {
					want = []resourceapi.DeviceTaint{{Key: "gpu.featureplug.io/unhealthy", Value: value, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
				}
				if !equality.Semantic.DeepEqual(d.Taints, want) {
					t.Errorf("%s: taints %+v, want %+v", d.Name, d.Taints, want)
				}
				// The Table holds the same reason, for the health stream.
				if td, ok := b.Table.Lookup(d.Name); !ok || td.Unhealthy != value {
					t.Errorf("%s: table entry %+v (found %v), want Unhealthy %q", d.Name, td, ok, value)
				}
			}
		})
	}
}

func TestUnhealthyReason(t *testing.T) {
	for _, tt := range []struct {
		kind discovery.HealthEventKind
		xid  uint64
		want string
	}{
		{discovery.EventXID, 79, "xid-79"},
		{discovery.EventECCDoubleBit, 0, "ecc-double-bit"},
		{discovery.EventGPULost, 0, "gpu-lost"},
		{"", 0, "unhealthy"},
	} {
		if got := UnhealthyReason(tt.kind, tt.xid); got != tt.want {
			t.Errorf("UnhealthyReason(%q, %d) = %q, want %q", tt.kind, tt.xid, got, tt.want)
		}
	}
}

func TestBuildSliceErrors(t *testing.T) {
	inv := sliceInventory()
	gone := &plan.Plan{Resources: []plan.Resource{{Name: "example.com/a", Serve: plan.ServeDRA,
		Devices: []plan.Device{sliceDev("GPU-99999999-0000-0000-0000-000000000000", plan.DeviceGPU, "GPU-99999999-0000-0000-0000-000000000000", "9", 9, "a")}}}}
	for _, tt := range []struct {
		name string
		p    *plan.Plan
		o    BuildOptions
		want string
	}{
		{"device not in the inventory", gone, sliceOpts(sliceCDI), "resource example.com/a (rule a): device GPU-99999999-0000-0000-0000-000000000000 is not in the inventory"},
		{"bad CDI kind", slicePlan().WithServeDefault(plan.ServeDRA), sliceOpts(cdi.Options{Kind: "nvidia.com"}), `CDI kind "nvidia.com"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := BuildSlice(inv, tt.p, tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// TestBuildSliceMPSWithheld: an MPS resource served through DRA is in the
// slice and the Table unless it is held back (its control daemon is not
// up); the other resources stay; MPS served by the device plugin is no
// concern of DRA's.
func TestBuildSliceMPSWithheld(t *testing.T) {
	inv := sliceInventory()
	p := &plan.Plan{Resources: []plan.Resource{
		{Name: "example.com/mps", Serve: plan.ServeDRA, Sharing: plan.Sharing{Strategy: plan.SharingMPS, Replicas: 2},
			Devices: []plan.Device{sliceDev(sliceGPU0, plan.DeviceGPU, sliceGPU0, "0", 0, "inference")}},
		{Name: "nvidia.com/mig-1g.10gb", Serve: plan.ServeDRA,
			Devices: []plan.Device{sliceDev(sliceMIG, plan.DeviceMIG, sliceGPU1, "1:0", 1, "mig")}},
	}}
	const gpuName, migName = "gpu-0a1b2c3d-0000-0000-0000-000000000000", "mig-5e6f7a8b-0000-0000-0000-000000000000"
	b := mustBuild(t, inv, p, sliceOpts(sliceCDI))
	if got := deviceNames(b.Devices); !slices.Equal(got, []string{gpuName, migName}) {
		t.Errorf("MPS daemon up: devices %v, want [%s %s]", got, gpuName, migName)
	}
	if d, ok := b.Table.Lookup(gpuName); !ok || d.Sharing.Strategy != plan.SharingMPS {
		t.Errorf("MPS daemon up: table entry %+v (found %v), want the MPS device", d, ok)
	}
	b = mustBuild(t, inv, p.WithHeld(map[string]string{"example.com/mps": "daemon starting"}), sliceOpts(sliceCDI))
	if got := deviceNames(b.Devices); !slices.Equal(got, []string{migName}) {
		t.Errorf("MPS daemon down: devices %v, want only [%s]", got, migName)
	}
	if _, ok := b.Table.Lookup(gpuName); ok || b.Table.Len() != 1 {
		t.Errorf("MPS daemon down: the withheld device is in the table (%d devices)", b.Table.Len())
	}
	// MPS served by the device plugin is no concern of DRA's.
	p.Resources[0].Serve = plan.ServeDevicePlugin
	if b, err := BuildSlice(inv, p, sliceOpts(sliceCDI)); err != nil || len(b.Devices) != 1 {
		t.Errorf("MPS served by the device plugin: %v, %d devices; want no error and only the MIG device", err, len(b.Devices))
	}
}

func TestBuildSliceTooManyDevices(t *testing.T) {
	inv := &discovery.Inventory{DriverVersion: "570.86.15", CUDADriverVersion: "12.8"}
	r := plan.Resource{Name: "example.com/many", Serve: plan.ServeDRA}
	for i := range MaxDevices + 1 {
		uuid := "GPU-" + strings.Repeat("0", 8) + fmt.Sprintf("-0000-0000-0000-%012d", i)
		inv.GPUs = append(inv.GPUs, discovery.GPU{Index: i, UUID: uuid, Product: "X", MemoryMiB: 1024})
		r.Devices = append(r.Devices, sliceDev(uuid, plan.DeviceGPU, uuid, "0", i, "many"))
	}
	_, err := BuildSlice(inv, &plan.Plan{Resources: []plan.Resource{r}}, sliceOpts(sliceCDI))
	if err == nil || !strings.Contains(err.Error(), "65 devices served through DRA, more than the 64 one ResourceSlice holds") {
		t.Errorf("error %v, want the device cap", err)
	}
}

func TestSliceName(t *testing.T) {
	if got := SliceName("node-1"); got != "node-1-gpu.featureplug.io" {
		t.Errorf("SliceName(node-1) = %q", got)
	}
	long := strings.Repeat("a", 250)
	got := SliceName(long)
	if len(got) > 253 || !strings.HasSuffix(got, "-gpu.featureplug.io") || got == SliceName(strings.Repeat("a", 249)+"b") {
		t.Errorf("SliceName(250 chars) = %q (%d chars): want at most 253, the suffix, and distinct per node", got, len(got))
	}
}

func deviceNames(devs []resourceapi.Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.Name)
	}
	return out
}

// withOpts returns o changed by each edit.
func withOpts(o BuildOptions, edits ...func(*BuildOptions)) BuildOptions {
	for _, e := range edits {
		e(&o)
	}
	return o
}

// TestBuildSliceTimeSlicedMIG: a time-sliced MIG device carries
// draattr's attributes, the resource and the shares capacity, within what
// resource.k8s.io allows (draattr leaves the sink room for both).
func TestBuildSliceTimeSlicedMIG(t *testing.T) {
	inv := sliceInventory()
	p := &plan.Plan{Resources: []plan.Resource{{Name: "example.com/mig-shared", Serve: plan.ServeDRA,
		Sharing: plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 2},
		Devices: []plan.Device{sliceDev(sliceMIG, plan.DeviceMIG, sliceGPU1, "1:0", 1, "mig-shared")}}}}
	b := mustBuild(t, inv, p, sliceOpts(sliceCDI))
	d := b.Devices[0]
	if n := len(d.Attributes) + len(d.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		t.Errorf("%d attributes and capacities published", n)
	}
	if c, ok := d.Capacity[CapShares]; !ok || c.Value.Value() != 2 || d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
		t.Errorf("time-sliced MIG device without its sharing: %+v", d)
	}
}

// TestBuildSliceRefusesTooManyAttributes: a device that would carry more
// attributes and capacities than resource.k8s.io allows is refused,
// naming it, rather than published for the API server to refuse.
func TestBuildSliceRefusesTooManyAttributes(t *testing.T) {
	inv := sliceInventory()
	p := &plan.Plan{Resources: []plan.Resource{{Name: "example.com/a", Serve: plan.ServeDRA,
		Devices: []plan.Device{sliceDev(sliceGPU0, plan.DeviceGPU, sliceGPU0, "0", 0, "a")}}}}
	b := mustBuild(t, inv, p, sliceOpts(sliceCDI))
	d := b.Devices[0]
	// Fill the device up to the limit with made-up capacities: the
	// builder's check is the same for any source of entries.
	extra := resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice - len(d.Attributes) - len(d.Capacity) + 1
	dev := d
	dev.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
	for k, v := range d.Capacity {
		dev.Capacity[k] = v
	}
	for i := range extra {
		dev.Capacity[resourceapi.QualifiedName(fmt.Sprintf("x%d", i))] = resourceapi.DeviceCapacity{Value: resource.MustParse("1")}
	}
	if err := checkDeviceSize(&p.Resources[0], p.Resources[0].Devices[0], dev); err == nil ||
		err.Error() != fmt.Sprintf("resource example.com/a (rule a): device %s would have 33 attributes and capacities, more than the 32 resource.k8s.io allows", sliceGPU0) {
		t.Errorf("error %v, want the limit named", err)
	}
	if err := checkDeviceSize(&p.Resources[0], p.Resources[0].Devices[0], d); err != nil {
		t.Errorf("the device as built: %v", err)
	}
}
