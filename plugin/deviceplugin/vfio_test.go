package deviceplugin

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/plugin/health"
	"github.com/featureplug/featureplug/rules/plan"
)

// vfioResource is the VFIO resource of the tests: four L40S on vfio-pci,
// two per NUMA node, each in its own IOMMU group (34..37); the first
// shares its group with its audio function.
const vfioResource = "nvidia.com/AD102GL_L40S"

// vfioAddr is the PCI address of VFIO GPU i.
func vfioAddr(i int) string { return fmt.Sprintf("0000:%x7:00.0", 4+i) }

// vfioDevice is VFIO GPU i as the planner makes it.
func vfioDevice(i int) plan.Device {
	addr, group := vfioAddr(i), 34+i
	members := 1
	if i == 0 {
		members = 2
	}
	return plan.Device{
		ID: addr, Kind: plan.DeviceVFIO, GPUUUID: addr, GPUIndex: -1, NUMANode: i / 2, Rule: "vms",
		VFIO: &plan.VFIODevice{
			PCIAddress: addr, IOMMUGroup: group, DevicePaths: []string{"/dev/vfio/vfio", fmt.Sprintf("/dev/vfio/%d", group)},
			GroupDevices: members, Driver: discovery.DriverVFIOPCI, VendorID: "10de", DeviceID: "26b9",
		},
	}
}

// vfioPlan serves two GPUs to containers and four to VMs.
func vfioPlan() *plan.Plan {
	return &plan.Plan{
		Resources: []plan.Resource{{Name: "nvidia.com/gpu", Devices: gpus(0, 1)}},
		VFIO:      []plan.Resource{{Name: vfioResource, Devices: []plan.Device{vfioDevice(0), vfioDevice(1), vfioDevice(2), vfioDevice(3)}}},
	}
}

// deviceNodes formats device specs as "host->container:permissions".
func deviceNodes(ds []*pluginapi.DeviceSpec) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.GetHostPath()+"->"+d.GetContainerPath()+":"+d.GetPermissions())
	}
	return out
}

// TestVFIOServing serves GPUs to containers and to VMs from one plan, with
// the CDI strategies on: the VFIO resource gets its own server, its
// devices are the GPUs' PCI addresses with their NUMA nodes, and Allocate
// answers the VFIO device nodes and KubeVirt's variable for exactly the
// allocated GPUs, with nothing of NVIDIA's container runtime.
func TestVFIOServing(t *testing.T) {
	opts := DefaultOptions()
	opts.DeviceListStrategies = []DeviceListStrategy{DeviceListEnvVar, DeviceListCDIAnnotations, DeviceListCDICRI}
	e := startEnv(t, opts, vfioPlan())
	e.waitRegistered(1, "nvidia.com/gpu", vfioResource)

	devs := e.kubelet.Devices(vfioResource)
	var ids []string
	for _, d := range devs {
		ids = append(ids, fmt.Sprintf("%s@%d", d.GetID(), d.GetTopology().GetNodes()[0].GetID()))
	}
	if want := []string{"0000:47:00.0@0", "0000:57:00.0@0", "0000:67:00.0@1", "0000:77:00.0@1"}; !slices.Equal(ids, want) {
		t.Errorf("devices = %v, want %v", ids, want)
	}

	tests := []struct {
		ids     []string
		devices []string
	}{
		{[]string{vfioAddr(1)}, []string{"/dev/vfio/vfio->/dev/vfio/vfio:mrw", "/dev/vfio/35->/dev/vfio/35:mrw"}},
		{[]string{vfioAddr(3), vfioAddr(0)}, []string{"/dev/vfio/vfio->/dev/vfio/vfio:mrw", "/dev/vfio/34->/dev/vfio/34:mrw", "/dev/vfio/37->/dev/vfio/37:mrw"}},
	}
	for _, tt := range tests {
		resp, err := e.kubelet.Allocate(e.ctx(), vfioResource, tt.ids)
		if err != nil {
			t.Fatalf("Allocate(%v): %v", tt.ids, err)
		}
		if got := deviceNodes(resp.GetDevices()); !slices.Equal(got, tt.devices) {
			t.Errorf("Allocate(%v) devices = %v, want %v", tt.ids, got, tt.devices)
		}
		// Plan order, whatever the request's order.
		sorted := slices.Sorted(slices.Values(tt.ids))
		want := map[string]string{"PCI_RESOURCE_NVIDIA_COM_AD102GL_L40S": strings.Join(sorted, ",")}
		if !maps.Equal(resp.GetEnvs(), want) {
			t.Errorf("Allocate(%v) envs = %v, want %v", tt.ids, resp.GetEnvs(), want)
		}
		if len(resp.GetAnnotations()) != 0 || len(resp.GetCdiDevices()) != 0 || len(resp.GetMounts()) != 0 {
			t.Errorf("Allocate(%v): annotations %v, CDI devices %v, mounts %v; want none for a VM's GPUs", tt.ids, resp.GetAnnotations(), resp.GetCdiDevices(), resp.GetMounts())
		}
	}
	// The containers' resource keeps NVIDIA's answer.
	resp, err := e.kubelet.Allocate(e.ctx(), "nvidia.com/gpu", []string{gpuUUID(0)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetEnvs()[EnvVisibleDevices] == "" || len(resp.GetCdiDevices()) != 1 || len(resp.GetDevices()) != 0 {
		t.Errorf("nvidia.com/gpu answer = %v", resp)
	}

	// GetPreferredAllocation keeps a VM's GPUs on one NUMA node.
	all := []string{vfioAddr(0), vfioAddr(1), vfioAddr(2), vfioAddr(3)}
	for _, tc := range []struct {
		must []string
		want []string
	}{
		{nil, []string{vfioAddr(0), vfioAddr(1)}},
		{[]string{vfioAddr(3)}, []string{vfioAddr(2), vfioAddr(3)}},
	} {
		got, err := e.kubelet.GetPreferredAllocation(e.ctx(), vfioResource, all, tc.must, 2)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("preferred 2 (must %v) = %v, want %v", tc.must, got, tc.want)
		}
	}
}

// TestVFIOHealth holds a VM's GPU Unhealthy through a tracker condition
// (the VFIO probe's, when the GPU left vfio-pci): Unhealthy in the device
// list, refused by Allocate, passed over by GetPreferredAllocation, and
// Healthy again once the condition ends.
func TestVFIOHealth(t *testing.T) {
	opts := DefaultOptions()
	tr := withHealth(t, &opts, nil, health.DefaultRecovery, "", nil)
	e := startEnv(t, opts, vfioPlan())
	e.waitRegistered(1, vfioResource)

	tr.SetConditions("vfio", map[string]health.Condition{vfioAddr(1): {Kind: discovery.EventVFIOUnbound, Reason: "bound to no driver"}})
	e.waitDevices(vfioResource, "GPU 1 Unhealthy", func(d []*pluginapi.Device) bool {
		h := healthOf(d)
		return h[vfioAddr(1)] == pluginapi.Unhealthy && h[vfioAddr(0)] == pluginapi.Healthy
	})
	_, err := e.kubelet.Allocate(e.ctx(), vfioResource, []string{vfioAddr(1)})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), vfioAddr(1)) {
		t.Errorf("Allocate of the unbound GPU: %v, want FailedPrecondition naming it", err)
	}
	got, err := e.kubelet.GetPreferredAllocation(e.ctx(), vfioResource, []string{vfioAddr(0), vfioAddr(1), vfioAddr(2)}, nil, 2)
	if err != nil || slices.Contains(got, vfioAddr(1)) {
		t.Errorf("preferred 2 = %v, %v; want two GPUs without the unbound one", got, err)
	}

	tr.SetConditions("vfio", nil)
	e.waitDevices(vfioResource, "GPU 1 Healthy again", func(d []*pluginapi.Device) bool {
		return healthOf(d)[vfioAddr(1)] == pluginapi.Healthy
	})
	if _, err := e.kubelet.Allocate(e.ctx(), vfioResource, []string{vfioAddr(1)}); err != nil {
		t.Errorf("Allocate of the re-bound GPU: %v", err)
	}
}

// TestVFIOPlanRefused refuses VFIO resources the servers cannot serve,
// naming the resource, device and field.
func TestVFIOPlanRefused(t *testing.T) {
	bad := vfioDevice(1)
	bad.VFIO.DevicePaths = []string{"/dev/vfio/vfio", "/sys/../dev/vfio/35"}
	none := vfioDevice(2)
	none.VFIO.DevicePaths = nil
	none.GPUUUID = ""
	p := &plan.Plan{VFIO: []plan.Resource{
		{Name: vfioResource, Devices: []plan.Device{vfioDevice(0), bad, none, vfioDevice(0)}},
	}}
	m, err := NewManager(Options{KubeletDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	err = m.Apply(p)
	if err == nil {
		t.Fatal("Apply took the plan")
	}
	for _, want := range []string{
		`vfio[0] (nvidia.com/AD102GL_L40S).devices[1] (0000:57:00.0).vfio.devicePaths: "/sys/../dev/vfio/35" is not a clean path under /dev`,
		`vfio[0] (nvidia.com/AD102GL_L40S).devices[2] (0000:67:00.0): no VFIO device nodes`,
		`vfio[0] (nvidia.com/AD102GL_L40S).devices[2].gpuUUID: empty`,
		`vfio[0] (nvidia.com/AD102GL_L40S).devices[3].id: "0000:47:00.0" appears twice`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
