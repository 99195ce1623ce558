package dra

import (
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/discovery/migplace"
	"github.com/featureplug/featureplug/plugin/migpartition"
	"github.com/featureplug/featureplug/rules/plan"
)

// instanceAttrs are the attributes of a MIG device that only a created
// instance has: a placement device, published before it is created,
// leaves them out.
var instanceAttrs = []resourceapi.QualifiedName{"uuid", "index", "gpuInstanceId", "computeInstanceId"}

// AttrPlacementStart is the first memory slice of a placement device's
// placement, for claims that select a placement.
const AttrPlacementStart resourceapi.QualifiedName = "placementStart"

// buildDynamic lays out the GPUs p partitions on demand as partitionable
// devices (plugin/migpartition): per GPU a counter set, one device per
// placement of every offered profile, with a MIG device's attributes as
// the schema names them (profile, memory as capacity, the parent's
// product, UUID, PCIe and NUMA attributes) and the resource, and the whole
// GPU, with a GPU's attributes, when the rules offer it. A placement
// device is tainted when its GPU or the MIG device created at its
// placement is unhealthy, the whole GPU when the GPU is. It returns the
// slices (counter sets, then devices) and the devices' Table entries.
func buildDynamic(inv *discovery.Inventory, p *plan.Plan, schema *draattr.Schema, o BuildOptions) ([]SliceContent, []Device, []migpartition.Withheld, error) {
	if p == nil || len(p.DynamicMIG) == 0 {
		return nil, nil, nil, nil
	}
	var (
		table []Device
		errs  []error
	)
	decorate := func(g *plan.DynamicGPU, prof *plan.DynamicProfile, pl migplace.Placement, d *resourceapi.Device) {
		gpu, ok := gpuOf(inv, g.UUID)
		if !ok {
			errs = append(errs, fmt.Errorf("GPU %d (%s, rule %s) partitioned on demand is not in the inventory", g.Index, g.UUID, g.Rule))
			return
		}
		dev := plan.Device{ID: g.UUID, Kind: plan.DeviceGPU, GPUUUID: g.UUID, GPUIndex: g.Index, Index: fmt.Sprint(g.Index),
			NUMANode: g.NUMANode, MemoryMiB: g.MemoryMiB, Rule: g.Rule}
		res := g.WholeGPU
		var mig *discovery.MIGDevice
		if prof != nil {
			res = prof.Resource
			id := prof.ID
			mig = &discovery.MIGDevice{ParentIndex: g.Index, ParentUUID: g.UUID, Index: -1, GPUInstanceID: -1, ComputeInstanceID: -1,
				Profile: prof.Name, MemoryMiB: prof.MemoryMiB, Multiprocessors: prof.Multiprocessors,
				GISlices: prof.ComputeSlices, CISlices: prof.ComputeSlices, Engines: prof.Engines, GPUInstanceProfileID: &id, Placement: &pl}
			dev.ID, dev.Kind, dev.Profile, dev.MemoryMiB = "", plan.DeviceMIG, prof.Name, prof.MemoryMiB
		}
		attrs, caps := schema.Device(inv, gpu, mig)
		if mig != nil {
			for _, k := range instanceAttrs {
				delete(attrs, k)
			}
			start := int64(pl.Start)
			attrs[AttrPlacementStart] = resourceapi.DeviceAttribute{IntValue: &start}
		}
		attrs[draattr.AttrResource] = resourceapi.DeviceAttribute{StringValue: &res}
		d.Attributes = attrs
		if len(caps) > 0 {
			d.Capacity = caps
		}
		why := dynamicUnhealthy(o.Unhealthy, g, prof != nil, pl)
		if why != "" {
			d.Taints = []resourceapi.DeviceTaint{{Key: TaintUnhealthy, Value: why, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		}
		r := &plan.Resource{Name: res}
		if err := checkDeviceSize(r, plan.Device{ID: d.Name, Rule: g.Rule}, *d); err != nil {
			errs = append(errs, err)
		}
		table = append(table, Device{Name: d.Name, Resource: res, Device: dev, Unhealthy: why, PCIBusID: gpu.PCIBusID, Product: gpu.Product})
	}
	l := migpartition.Build(p.DynamicMIG, migpartition.Options{Created: createdByUUID(p, o.Created), Decorate: decorate})
	if len(errs) > 0 {
		return nil, nil, nil, errors.Join(errs...)
	}
	for i := range table {
		a, _ := l.Lookup(table[i].Name)
		table[i].Partition = &a
	}
	out := make([]SliceContent, len(l.Slices))
	for i, s := range l.Slices {
		out[i] = SliceContent{Devices: s.Devices, SharedCounters: s.SharedCounters}
	}
	return out, table, l.Withheld, nil
}

// createdByUUID is created as migpartition asks it: by the MIG device's
// UUID alone.
func createdByUUID(p *plan.Plan, created func(gpu, uuid string, pl migplace.Placement) bool) func(string) bool {
	if created == nil {
		return nil
	}
	type at struct {
		gpu string
		pl  migplace.Placement
	}
	where := map[string]at{}
	for _, g := range p.DynamicMIG {
		for _, m := range g.Existing {
			where[m.UUID] = at{g.UUID, m.Placement}
		}
	}
	return func(uuid string) bool {
		w, ok := where[uuid]
		return ok && created(w.gpu, uuid, w.pl)
	}
}

// dynamicUnhealthy is the taint value of a device of a GPU partitioned on
// demand: the GPU's, or for a placement the MIG device's created there.
func dynamicUnhealthy(u Unhealthy, g *plan.DynamicGPU, placement bool, pl migplace.Placement) string {
	if why, ok := u[g.UUID]; ok {
		return why
	}
	if !placement {
		return ""
	}
	for _, m := range g.Existing {
		if m.Placement == pl {
			if why, ok := u[m.UUID]; ok {
				return why
			}
		}
	}
	return ""
}

// gpuOf returns the GPU with the given UUID in inv.
func gpuOf(inv *discovery.Inventory, uuid string) (*discovery.GPU, bool) {
	if inv == nil {
		return nil, false
	}
	return inv.GPUByUUID(uuid)
}

// dynamicRule names the rule that gives a resource of GPUs partitioned on
// demand.
func dynamicRule(p *plan.Plan, resource string) string {
	for _, g := range p.DynamicMIG {
		if g.WholeGPU == resource {
			return g.Rule
		}
		for _, prof := range g.Profiles {
			if prof.Resource == resource {
				return g.Rule
			}
		}
	}
	return "?"
}
