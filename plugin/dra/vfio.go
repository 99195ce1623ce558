package dra

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/rules/plan"
)

// GPUs passed through to virtual machines (plan.Plan.VFIO) whose rule says
// serve: dra are devices of the same slice: type "vfio", with the
// attributes sysfs gives (draattr.VFIODevice, resource.kubernetes.io/pciBusID
// among them, which KubeVirt passes through), never shared. Preparing one
// answers the CDI ID of its entry in the VFIO spec (plugin/cdi's
// VFIOKind), which holds its VFIO device nodes only. A GPU the VFIO probe
// holds unhealthy (it left vfio-pci, its group is broken) carries
// TaintUnhealthy, keyed by its PCI address as the probe keys it.

// draVFIOResources returns the VFIO resources of p served through DRA, in
// plan order.
func draVFIOResources(p *plan.Plan) []*plan.Resource {
	if p == nil {
		return nil
	}
	var out []*plan.Resource
	for i := range p.VFIO {
		if p.VFIO[i].Serve == plan.ServeDRA {
			out = append(out, &p.VFIO[i])
		}
	}
	return out
}

// vfioSliceDevice is the slice device and Table entry of VFIO device d of
// resource r. It fails, naming the resource and rule, when d is not in
// inv.
func vfioSliceDevice(inv *discovery.Inventory, r *plan.Resource, d plan.Device, o BuildOptions) (resourceapi.Device, Device, error) {
	var vd *discovery.VFIODevice
	ok := false
	if inv != nil {
		vd, ok = inv.VFIODeviceByAddress(d.ID)
	}
	if !ok {
		return resourceapi.Device{}, Device{}, fmt.Errorf("resource %s (rule %s): VFIO device %s is not in the inventory", r.Name, d.Rule, d.ID)
	}
	attrs := draattr.VFIODevice(vd)
	res := r.Name
	attrs[draattr.AttrResource] = resourceapi.DeviceAttribute{StringValue: &res}
	name := draattr.VFIODeviceName(d.ID)
	dev := resourceapi.Device{Name: name, Attributes: attrs}
	why, bad := o.Unhealthy.reason(d)
	if bad {
		dev.Taints = []resourceapi.DeviceTaint{{Key: TaintUnhealthy, Value: why, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	entry := Device{Name: name, Resource: r.Name, Sharing: r.Sharing, Device: d, Unhealthy: why}
	if o.VFIOCDIName != nil {
		entry.CDIDevices = []string{o.VFIOCDIName(d)}
	}
	return dev, entry, nil
}

// isVFIO reports whether r is a resource of GPUs passed through to VMs.
func isVFIO(r *plan.Resource) bool {
	return len(r.Devices) > 0 && r.Devices[0].Kind == plan.DeviceVFIO
}
