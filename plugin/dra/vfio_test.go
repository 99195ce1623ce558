package dra

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/discovery/statedir"
	"github.com/featureplug/featureplug/plugin/cdi"
	"github.com/featureplug/featureplug/rules/plan"
)

// vfioAddr is the PCI address of VFIO GPU i of the tests.
func vfioAddr(i int) string { return fmt.Sprintf("0000:%x7:00.0", 4+i) }

// vfioInventory is sliceInventory with three L40S on vfio-pci, in IOMMU
// groups 34..36, the first with its audio function.
func vfioInventory() *discovery.Inventory {
	inv := sliceInventory()
	for i := range 3 {
		d := discovery.VFIODevice{
			PCIAddress: vfioAddr(i), VendorID: "10de", DeviceID: "26b9", Class: "0302", Product: "NVIDIA L40S",
			DeviceName: "AD102GL_L40S", Family: "ada-lovelace", Driver: discovery.DriverVFIOPCI, IOMMUGroup: 34 + i,
			NUMANode: i / 2, PCIeRoot: "pci0000:00",
		}
		if i == 0 {
			d.GroupMembers = []discovery.PCIFunction{{Address: "0000:47:00.1", VendorID: "10de", DeviceID: "22ba", Class: "0403", Driver: discovery.DriverVFIOPCI}}
		}
		inv.VFIO = append(inv.VFIO, d)
	}
	return inv
}

// vfioPlanDevice is VFIO GPU i as the planner makes it.
func vfioPlanDevice(i int) plan.Device {
	addr, group := vfioAddr(i), 34+i
	return plan.Device{ID: addr, Kind: plan.DeviceVFIO, GPUUUID: addr, GPUIndex: -1, NUMANode: i / 2, Rule: "vms",
		VFIO: &plan.VFIODevice{PCIAddress: addr, IOMMUGroup: group, DevicePaths: []string{"/dev/vfio/vfio", fmt.Sprintf("/dev/vfio/%d", group)},
			Driver: discovery.DriverVFIOPCI, VendorID: "10de", DeviceID: "26b9"}}
}

// vfioSlicePlan serves GPU 0 to containers through DRA, VFIO GPUs 0 and 1
// to VMs through DRA (their rule says so) and VFIO GPU 2 through a device
// plugin.
func vfioSlicePlan() *plan.Plan {
	p := slicePlan()
	p.Resources = p.Resources[:1]
	p.VFIO = []plan.Resource{
		{Name: "nvidia.com/AD102GL_L40S", Serve: plan.ServeDRA, Devices: []plan.Device{vfioPlanDevice(0), vfioPlanDevice(1)}},
		{Name: "example.com/vm-dp", Serve: plan.ServeDevicePlugin, Devices: []plan.Device{vfioPlanDevice(2)}},
	}
	return p
}

// TestBuildSliceVFIO checks that the VFIO GPUs a rule serves through DRA
// are devices of the slice with sysfs's attributes and the standard PCI
// ones, prepared as their entry of the VFIO CDI spec, and that the one
// served through a device plugin is not in the slice.
func TestBuildSliceVFIO(t *testing.T) {
	o := sliceOpts(sliceCDI)
	o.VFIOCDIName = cdi.VFIOQualifiedName
	b := mustBuild(t, vfioInventory(), vfioSlicePlan(), o)
	want := []string{"gpu-0a1b2c3d-0000-0000-0000-000000000000", "vfio-0000-47-00-0", "vfio-0000-57-00-0"}
	if got := deviceNames(b.Devices); !slices.Equal(got, want) {
		t.Fatalf("devices %v, want %v", got, want)
	}
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: ptr.To(s)} }
	num := func(n int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValue: ptr.To(n)} }
	wantAttrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		draattr.AttrType: str("vfio"), draattr.AttrResource: str("nvidia.com/AD102GL_L40S"),
		"productName": str("NVIDIA L40S"), "deviceName": str("AD102GL_L40S"), "family": str("ada-lovelace"),
		"pciVendorId": str("10de"), "pciDeviceId": str("26b9"), "iommuGroup": num(34), "iommuGroupDevices": num(2),
		"resource.kubernetes.io/pciBusID": str("0000:47:00.0"), "resource.kubernetes.io/pcieRoot": str("pci0000:00"),
		"resource.kubernetes.io/numaNode": num(0),
	}
	dev := b.Devices[1]
	if len(dev.Attributes) != len(wantAttrs) || dev.Capacity != nil || dev.AllowMultipleAllocations != nil || dev.Taints != nil {
		t.Errorf("device %s: %d attributes %v, capacity %v, multiple %v, taints %v; want exactly %d attributes and nothing else",
			dev.Name, len(dev.Attributes), dev.Attributes, dev.Capacity, dev.AllowMultipleAllocations, dev.Taints, len(wantAttrs))
	}
	for k, v := range wantAttrs {
		if got, ok := dev.Attributes[k]; !ok || !equality.Semantic.DeepEqual(got, v) {
			t.Errorf("device %s: attribute %s = %v (present %v), want %v", dev.Name, k, got, ok, v)
		}
	}
	entry, ok := b.Table.Lookup("vfio-0000-57-00-0")
	if !ok || !slices.Equal(entry.CDIDevices, []string{"featureplug.io/vfio=0000:57:00.0"}) || entry.Resource != "nvidia.com/AD102GL_L40S" || entry.Device.ID != vfioAddr(1) {
		t.Errorf("table entry %+v (found %v), want the VFIO CDI device of 0000:57:00.0", entry, ok)
	}
}

// TestBuildSliceVFIOUnhealthy checks that a VFIO GPU the probe holds
// unhealthy (keyed by its PCI address) stays in the slice with the
// taint, and that the others carry none.
func TestBuildSliceVFIOUnhealthy(t *testing.T) {
	o := sliceOpts(sliceCDI)
	o.Unhealthy = Unhealthy{vfioAddr(1): "vfio-unbound"}
	b := mustBuild(t, vfioInventory(), vfioSlicePlan(), o)
	for _, d := range b.Devices {
		var want []resourceapi.DeviceTaint
		if d.Name == "vfio-0000-57-00-0" {
			want = []resourceapi.DeviceTaint{{Key: TaintUnhealthy, Value: "vfio-unbound", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		}
		if !equality.Semantic.DeepEqual(d.Taints, want) {
			t.Errorf("%s: taints %v, want %v", d.Name, d.Taints, want)
		}
	}
	if e, _ := b.Table.Lookup("vfio-0000-57-00-0"); e.Unhealthy != "vfio-unbound" {
		t.Errorf("table entry Unhealthy %q, want vfio-unbound", e.Unhealthy)
	}
}

// TestBuildSliceVFIOMissing checks that a VFIO device of the plan that
// discovery no longer has is an error naming resource, rule and address.
func TestBuildSliceVFIOMissing(t *testing.T) {
	inv := vfioInventory()
	inv.VFIO = inv.VFIO[1:]
	_, err := BuildSlice(inv, vfioSlicePlan(), sliceOpts(sliceCDI))
	want := "resource nvidia.com/AD102GL_L40S (rule vms): VFIO device 0000:47:00.0 is not in the inventory"
	if err == nil || err.Error() != want {
		t.Errorf("BuildSlice: %v, want %q", err, want)
	}
}

// TestSinkRefusesVFIOWithoutSpec checks that the sink refuses a plan that
// serves a VFIO resource through DRA when there is no VFIO CDI spec.
func TestSinkRefusesVFIOWithoutSpec(t *testing.T) {
	cs := fake.NewClientset()
	s, err := NewSink(SinkConfig{NodeName: "n", Slices: cs.ResourceV1().ResourceSlices(), WatchListClient: cs,
		Node: func(context.Context) (*corev1.Node, error) { return &corev1.Node{}, nil }, CDIKind: "nvidia.com/gpu", StateDir: statedir.Dir(t.TempDir())})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Check(vfioInventory(), vfioSlicePlan())
	want := "resource nvidia.com/AD102GL_L40S (rule vms) is served through DRA, which prepares a VFIO device as a CDI device: no VFIO CDI spec (--cdi-spec-dir is empty)"
	if err == nil || err.Error() != want {
		t.Errorf("Check: %v, want %q", err, want)
	}
}
