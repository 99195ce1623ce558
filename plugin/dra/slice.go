package dra

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/discovery/migplace"
	"github.com/featureplug/featureplug/plugin/migpartition"
	"github.com/featureplug/featureplug/rules/plan"
)

// Names in the ResourceSlice besides draattr's attributes.
const (
	// TaintUnhealthy is the key of the taint an unhealthy device carries
	// (effect NoSchedule, value a short reason such as "xid-79"): the
	// device stays in the slice, claims that do not tolerate the taint
	// are not allocated it, and recovery removes the taint.
	TaintUnhealthy = DriverName + "/unhealthy"
	// CapShares is the consumable capacity of a time-sliced device: its
	// replicas. A claim consumes one share unless it asks for more
	// (capacity.requests), so at most replicas claims share the device.
	CapShares resourceapi.QualifiedName = "shares"
)

// MaxDevices is the most devices featureplug publishes for one node: one
// ResourceSlice holds at most 64 devices once any of them carries a taint
// (resource.k8s.io's ResourceSliceMaxDevicesWithAdvancedFeatures), and
// taints come and go with health, so the lower limit always applies.
const MaxDevices = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures

// Unhealthy maps a device key (a GPU UUID for the whole GPU and its MIG
// devices, a MIG UUID for one MIG device) to the short reason it is held
// unhealthy ("xid-79", "ecc-double-bit"), a label value.
type Unhealthy map[string]string

// reason returns why d is unhealthy; false when it is healthy.
func (u Unhealthy) reason(d plan.Device) (string, bool) {
	if r, ok := u[d.GPUUUID]; ok {
		return r, true
	}
	if d.Kind == plan.DeviceMIG {
		if r, ok := u[d.ID]; ok {
			return r, true
		}
	}
	return "", false
}

// unhealthyReason is the taint value of d, "" when it is healthy.
func unhealthyReason(u Unhealthy, d plan.Device) string {
	why, _ := u.reason(d)
	return why
}

// UnhealthyReason is the taint value for a health event of kind and xid:
// "xid-<n>" for an XID, the kind itself otherwise ("ecc-double-bit").
func UnhealthyReason(kind discovery.HealthEventKind, xid uint64) string {
	if kind == discovery.EventXID {
		return "xid-" + strconv.FormatUint(xid, 10)
	}
	if kind == "" {
		return "unhealthy"
	}
	return string(kind)
}

// Build is what the DRA sink publishes for one plan: the devices of the
// node's ResourceSlice and the Table the kubelet-side server prepares
// claims from.
type Build struct {
	// Devices are sorted by name.
	Devices []resourceapi.Device
	// Slices are the node's pool: Devices in the first slice, then the
	// partitionable devices of the GPUs partitioned on demand (their
	// counter sets, then their devices: dynmig.go).
	Slices []SliceContent
	// Table holds the same devices with their CDI device IDs.
	Table *Table
	// Withheld are the GPUs partitioned on demand that are not offered,
	// and why.
	Withheld []migpartition.Withheld
}

// BuildOptions say which resources the DRA sink serves and how it names
// their CDI devices.
type BuildOptions struct {
	// CDIKind is the "vendor/class" of the CDI spec the agent writes, and
	// CDIName names a device in it (plugin/cdi's Options.DeviceName, so
	// that the IDs are the spec's by construction; nil: the device ID). A
	// device's CDI device ID is <CDIKind>=<CDIName(device)>. plugin/dra
	// takes the function rather than plugin/cdi's Options so that it does
	// not link NVIDIA's nvcdi, which plugin/cdi does.
	CDIKind string
	CDIName func(plan.Device) string
	// VFIOCDIName is the fully qualified CDI device ID of a VFIO device
	// (plugin/cdi's VFIOQualifiedName); nil leaves the Table's VFIO
	// devices without one, for callers that read only the slice.
	VFIOCDIName func(plan.Device) string
	// Unhealthy are the devices held unhealthy; they carry TaintUnhealthy.
	Unhealthy Unhealthy
	// Created reports whether featureplug created the MIG device with
	// the given UUID at placement pl of GPU gpu for a claim
	// (migpartition.Options.Created); nil: none.
	Created func(gpu, uuid string, pl migplace.Placement) bool
	// Default is the API of the resources whose rules did not choose one,
	// for a plan not resolved yet (plan.WithServeDefault); the agent's
	// sinks get resolved plans and leave it empty.
	Default plan.Serve
}

// DRAResources returns the resources of p served through DRA, held back
// or not, in plan order, then its VFIO resources served through DRA
// (vfio.go).
func DRAResources(p *plan.Plan) []*plan.Resource {
	if p == nil {
		return nil
	}
	var out []*plan.Resource
	for i := range p.Resources {
		if p.Resources[i].Serve == plan.ServeDRA {
			out = append(out, &p.Resources[i])
		}
	}
	return append(out, draVFIOResources(p)...)
}

// BuildSlice makes the devices of the node's ResourceSlice from the
// resources of p that DRA serves (and its VFIO resources that DRA
// serves, as vfio.go says): one device per plan device, named and
// given attributes and capacities by the draattr schema of the plan's
// DRACompatibility (featureplug's own names, or NVIDIA's DRA driver's as
// well), with the resource name as draattr.AttrResource. A
// time-sliced or MPS-shared device allows multiple allocations and has
// the consumable capacity CapShares = replicas (a claim takes one share
// by default, and only one when the rule fails requests greater than one,
// which MPS always does); its other capacities are consumed only when a
// claim asks for them. An unhealthy device carries the NoSchedule taint
// TaintUnhealthy. Resources held back (plan.Resource.Held: an MPS
// resource whose control daemon is not up) are left out.
//
// It fails, naming the resource and rule, for a device that is not in inv
// or that would carry more attributes and capacities than resource.k8s.io
// allows, or for more than MaxDevices devices.
func BuildSlice(inv *discovery.Inventory, p *plan.Plan, o BuildOptions) (Build, error) {
	if o.Default != "" {
		p = p.WithServeDefault(o.Default)
	}
	vendor, class := parser.ParseQualifier(o.CDIKind)
	if err := parser.ValidateVendorName(vendor); err != nil {
		return Build{}, fmt.Errorf("CDI kind %q: %w", o.CDIKind, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return Build{}, fmt.Errorf("CDI kind %q: %w", o.CDIKind, err)
	}
	var compat draattr.Compatibility
	if p != nil {
		compat = draattr.Compatibility(p.DRACompatibility)
	}
	schema, err := draattr.For(compat)
	if err != nil {
		return Build{}, err
	}
	cdiName := o.CDIName
	if cdiName == nil {
		cdiName = func(d plan.Device) string { return d.ID }
	}
	var (
		devs  []resourceapi.Device
		table []Device
		errs  []error
		seen  = map[string]string{}
	)
	for _, r := range DRAResources(p) {
		if r.Held != "" {
			continue
		}
		for _, d := range r.Devices {
			if d.Kind == plan.DeviceVFIO {
				dev, entry, err := vfioSliceDevice(inv, r, d, o) // vfio.go
				if err != nil {
					errs = append(errs, err)
					continue
				}
				devs, table = append(devs, dev), append(table, entry)
				continue
			}
			gpu, mig, ok := findDevice(inv, d)
			if !ok {
				errs = append(errs, fmt.Errorf("resource %s (rule %s): device %s is not in the inventory", r.Name, d.Rule, d.ID))
				continue
			}
			name := schema.DeviceName(gpu, mig)
			if prev, dup := seen[name]; dup {
				errs = append(errs, fmt.Errorf("resource %s (rule %s): device %s has the ResourceSlice name %q of device %s", r.Name, d.Rule, d.ID, name, prev))
				continue
			}
			seen[name] = d.ID
			dev := sliceDevice(schema, inv, gpu, mig, name, r, d, o.Unhealthy)
			if err := checkDeviceSize(r, d, dev); err != nil {
				errs = append(errs, err)
				continue
			}
			devs = append(devs, dev)
			table = append(table, Device{
				Name:       name,
				Resource:   r.Name,
				Sharing:    r.Sharing,
				Device:     d,
				CDIDevices: []string{parser.QualifiedName(vendor, class, cdiName(d))},
				PCIBusID:   gpu.PCIBusID,
				Product:    gpu.Product,
				Unhealthy:  unhealthyReason(o.Unhealthy, d),
			})
		}
	}
	if len(devs) > MaxDevices {
		errs = append(errs, fmt.Errorf("%d devices served through DRA, more than the %d one ResourceSlice holds", len(devs), MaxDevices))
	}
	dyn, dynTable, withheld, err := buildDynamic(inv, p, schema, o) // dynmig.go
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return Build{}, errors.Join(errs...)
	}
	slices.SortFunc(devs, func(a, b resourceapi.Device) int { return cmp.Compare(a.Name, b.Name) })
	b := Build{Devices: devs, Table: NewTable(append(table, dynTable...)), Withheld: withheld}
	if len(devs) > 0 {
		b.Slices = append(b.Slices, SliceContent{Devices: devs})
	}
	b.Slices = append(b.Slices, dyn...)
	return b, nil
}

// checkDeviceSize refuses a device with more attributes and capacities
// than resource.k8s.io allows, naming it.
func checkDeviceSize(r *plan.Resource, d plan.Device, dev resourceapi.Device) error {
	if n := len(dev.Attributes) + len(dev.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		return fmt.Errorf("resource %s (rule %s): device %s would have %d attributes and capacities, more than the %d resource.k8s.io allows",
			r.Name, d.Rule, d.ID, n, resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice)
	}
	return nil
}

// findDevice finds the GPU (and MIG device) of d in inv.
func findDevice(inv *discovery.Inventory, d plan.Device) (*discovery.GPU, *discovery.MIGDevice, bool) {
	if inv == nil {
		return nil, nil, false
	}
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		if g.UUID != d.GPUUUID {
			continue
		}
		if d.Kind != plan.DeviceMIG {
			return g, nil, g.UUID == d.ID
		}
		for j := range g.MIGDevices {
			if g.MIGDevices[j].UUID == d.ID {
				return g, &g.MIGDevices[j], true
			}
		}
		return nil, nil, false
	}
	return nil, nil, false
}

// sliceDevice is one device of the slice.
func sliceDevice(schema *draattr.Schema, inv *discovery.Inventory, gpu *discovery.GPU, mig *discovery.MIGDevice, name string, r *plan.Resource, d plan.Device, bad Unhealthy) resourceapi.Device {
	attrs, caps := schema.Device(inv, gpu, mig)
	if attrs == nil {
		attrs = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	}
	res := r.Name
	attrs[draattr.AttrResource] = resourceapi.DeviceAttribute{StringValue: &res}
	dev := resourceapi.Device{Name: name, Attributes: attrs}
	if replicas := r.Sharing.Replicas; sharedByClaims(r.Sharing) && replicas > 1 {
		if caps == nil {
			caps = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
		}
		// Every capacity of a device that allows multiple allocations is
		// consumable, in full by default: a claim that does not ask for
		// memory must take none of it, or the first claim would hold
		// the whole device.
		for k, c := range caps {
			c.RequestPolicy = &resourceapi.CapacityRequestPolicy{Default: resource.NewQuantity(0, resource.DecimalSI)}
			caps[k] = c
		}
		one := resource.NewQuantity(1, resource.DecimalSI)
		rng := &resourceapi.CapacityRequestPolicyRange{Min: one, Step: resource.NewQuantity(1, resource.DecimalSI)}
		if r.Sharing.OneReplicaPerContainer() {
			rng.Max = resource.NewQuantity(1, resource.DecimalSI)
		}
		caps[CapShares] = resourceapi.DeviceCapacity{
			Value:         *resource.NewQuantity(int64(replicas), resource.DecimalSI),
			RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: resource.NewQuantity(1, resource.DecimalSI), ValidRange: rng},
		}
		multi := true
		dev.AllowMultipleAllocations = &multi
	}
	if len(caps) > 0 {
		dev.Capacity = caps
	}
	if why, ok := bad.reason(d); ok {
		dev.Taints = []resourceapi.DeviceTaint{{Key: TaintUnhealthy, Value: why, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	return dev
}

// sharedByClaims reports whether a device of sharing s is shared between
// claims as consumable capacity: a strategy of the table that shares a
// device (time-slicing; MPS, whose control daemon the agent runs for the
// resource, and whose client limits the device's CDI spec entry carries).
func sharedByClaims(s plan.Sharing) bool {
	spec, ok := s.Spec()
	return ok && spec.Shares
}
