package deviceplugin

import (
	"fmt"
	"path"
	"reflect"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/featureplug/featureplug/rules/plan"
)

// GPUs passed through to virtual machines (the plan's VFIO resources) are
// served by the same servers as the devices for containers, one per
// resource, with the same registration, health and preferred allocation
// (by NUMA node: they have no links). Only Allocate's answer differs, as
// KubeVirt expects it from a device plugin of host devices: the VFIO
// device nodes of the allocated GPUs' IOMMU groups, and their PCI
// addresses in PCI_RESOURCE_<RESOURCE_NAME>; no NVIDIA_VISIBLE_DEVICES, no
// CDI, no sharing.

// vfioDevicePermissions are the cgroup permissions of the VFIO device
// nodes: read, write and mknod, as KubeVirt's and NVIDIA's plugins give.
const vfioDevicePermissions = "mrw"

// servedResources returns every resource of p a server serves: the
// resources for containers, then the VFIO resources.
func servedResources(p *plan.Plan) []plan.Resource {
	if len(p.VFIO) == 0 {
		return p.Resources
	}
	out := make([]plan.Resource, 0, len(p.Resources)+len(p.VFIO))
	return append(append(out, p.Resources...), p.VFIO...)
}

// isVFIO reports whether r holds GPUs passed through to virtual machines
// (a resource holds devices of one kind: plan.ValidatePlan).
func isVFIO(r *plan.Resource) bool {
	return len(r.Devices) > 0 && r.Devices[0].Kind == plan.DeviceVFIO
}

// validateVFIOResources checks what the servers rely on in p's VFIO
// resources, beyond plan.ValidatePlan: names not given twice, device IDs
// the kubelet takes, a health key, and device nodes that are absolute
// paths under /dev.
func validateVFIOResources(p *plan.Plan) []error {
	var errs []error
	names := make(map[string]int, len(p.VFIO))
	for i := range p.VFIO {
		r := &p.VFIO[i]
		if j, dup := names[r.Name]; dup {
			errs = append(errs, fmt.Errorf("vfio[%d].name: %q repeats vfio[%d]", i, r.Name, j))
		}
		names[r.Name] = i
		seen := make(map[string]bool, len(r.Devices))
		for j, d := range r.Devices {
			at := fmt.Sprintf("vfio[%d] (%s).devices[%d]", i, r.Name, j)
			if err := validateDeviceName(d.ID); err != nil {
				errs = append(errs, fmt.Errorf("%s.id: %w", at, err))
			}
			if seen[d.ID] {
				errs = append(errs, fmt.Errorf("%s.id: %q appears twice", at, d.ID))
			}
			seen[d.ID] = true
			if d.GPUUUID == "" {
				// The key of its health in the tracker (the VFIO probe's).
				errs = append(errs, fmt.Errorf("%s.gpuUUID: empty (a VFIO device's is its PCI address)", at))
			}
			if d.VFIO == nil {
				continue // ValidatePlan says so
			}
			if len(d.VFIO.DevicePaths) == 0 {
				errs = append(errs, fmt.Errorf("%s (%s): no VFIO device nodes", at, d.ID))
			}
			for _, p := range d.VFIO.DevicePaths {
				if path.Clean(p) != p || !strings.HasPrefix(p, "/dev/") {
					errs = append(errs, fmt.Errorf("%s (%s).vfio.devicePaths: %q is not a clean path under /dev", at, d.ID, p))
				}
			}
		}
	}
	return errs
}

// vfioResponse is Allocate's answer for one container's VFIO devices a:
// the device nodes of every allocated GPU (/dev/vfio/vfio and the
// container's IOMMU groups, /dev/iommu and the devices' VFIO character
// devices with iommufd), each once, at the same path in the container as
// on the host, as KubeVirt's virt-launcher opens them; and
// the allocated GPUs' PCI addresses, in plan order, in the variable
// KubeVirt reads for the resource (plan.KubeVirtEnvVar).
func (ds *deviceSet) vfioResponse(a allocation) *pluginapi.ContainerAllocateResponse {
	addrs := make([]string, len(a.phys))
	resp := &pluginapi.ContainerAllocateResponse{}
	seen := map[string]bool{}
	for i, p := range a.phys {
		v := ds.physical[p].VFIO
		addrs[i] = v.PCIAddress
		for _, dev := range v.DevicePaths {
			if seen[dev] {
				continue
			}
			seen[dev] = true
			resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{
				ContainerPath: dev,
				HostPath:      dev,
				Permissions:   vfioDevicePermissions,
			})
		}
	}
	resp.Envs = map[string]string{plan.KubeVirtEnvVar(ds.resource.Name): strings.Join(addrs, ",")}
	return resp
}

// equalDevice compares two plan devices, their VFIO details by value.
func equalDevice(a, b plan.Device) bool {
	va, vb := a.VFIO, b.VFIO
	a.VFIO, b.VFIO = nil, nil
	if a != b || (va == nil) != (vb == nil) {
		return false
	}
	if va == nil {
		return true
	}
	return reflect.DeepEqual(*va, *vb)
}
