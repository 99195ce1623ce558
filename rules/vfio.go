package rules

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// Rules with devices: vfio claim the GPUs bound to vfio-pci for virtual
// machines (discovery's Inventory.VFIO). Each such device sees the
// node-level features and its own nvidia.vfio instance; its resource goes
// to Plan.VFIO, never shared, and under a name no rule gives to
// containers.
//
// IOMMU groups: VFIO hands a VM a whole IOMMU group, so a GPU is
// advertised as one device together with the other devices of its group
// (its audio function) when every one of them lets VFIO open the group:
// bound to vfio-pci, pci-stub, a bridge's pcieport, or no driver. The
// plan counts them in the device's GroupDevices; KubeVirt's environment
// lists the GPU alone. A GPU is refused, with the reason as the decision's problem,
// when its group holds a device the host still uses (bound to another
// driver: opening the group would fail), when its group holds another GPU
// (two VMs cannot each get one; one device per group avoids handing the
// second GPU to a VM that cannot open it), or when the host has no IOMMU.
// NVIDIA's kubevirt-gpu-device-plugin advertises every NVIDIA function of
// a group separately, leaving the failure to the VM's start; refusing up
// front says why on the node.

// kindMiss says why a rule for one kind of device skips a device of
// another: "devices: mig (device is a gpu)".
func kindMiss(rule, device plan.DeviceKind) string {
	switch {
	case rule == plan.DeviceMIG && device == plan.DeviceGPU:
		return missWantsMIG
	case rule == plan.DeviceGPU && device == plan.DeviceMIG:
		return missWantsGPU
	}
	return "devices: " + string(rule) + " (device is " + kindNoun(device) + ")"
}

// kindNoun names a device kind with its article, as misses say it.
func kindNoun(k plan.DeviceKind) string {
	switch k {
	case plan.DeviceMIG:
		return "a mig device"
	case plan.DeviceVFIO:
		return "a vfio device"
	}
	return "a " + string(k)
}

// missedKind returns the rule kind a miss says the rule is for when the
// miss is only about the kind of device (kindMiss), and false otherwise.
func missedKind(reason string) (plan.DeviceKind, bool) {
	for _, k := range []plan.DeviceKind{plan.DeviceGPU, plan.DeviceMIG, plan.DeviceVFIO} {
		for _, d := range []plan.DeviceKind{plan.DeviceGPU, plan.DeviceMIG, plan.DeviceVFIO} {
			if k != d && reason == kindMiss(k, d) {
				return k, true
			}
		}
	}
	return "", false
}

// visitVFIO calls visit for every VFIO device of the inventory, with the
// node-level features and its own nvidia.vfio instance; t and f are
// visitTargets' reused values.
func visitVFIO(inv *discovery.Inventory, feats *nfdv1alpha1.Features, t *target, f *nfdv1alpha1.Features, visit func(*target)) {
	elems := feats.Instances[discovery.FeatureVFIO].Elements
	for i := range inv.VFIO {
		d := &inv.VFIO[i]
		attrs := discovery.VFIOAttributes(d)
		if i < len(elems) && elems[i].Attributes[discovery.AttrPCIBus] == d.PCIAddress {
			attrs = elems[i].Attributes
		}
		*f = nfdv1alpha1.Features{
			Flags:      feats.Flags,
			Attributes: feats.Attributes,
			Instances: map[string]nfdv1alpha1.InstanceFeatureSet{
				discovery.FeatureVFIO: {Elements: []nfdv1alpha1.InstanceFeature{{Attributes: attrs}}},
			},
		}
		*t = target{kind: plan.DeviceVFIO, vfio: d, attrs: attrs, features: f}
		visit(t)
	}
}

// id is the device's ID in plans: GPU or MIG UUID, a VFIO device's PCI
// address.
func (t *target) id() string {
	switch {
	case t.vfio != nil:
		return t.vfio.PCIAddress
	case t.mig != nil:
		return t.mig.UUID
	}
	return t.gpu.UUID
}

// describeVFIO names a VFIO device for people: "VFIO NVIDIA L40S".
func describeVFIO(d *discovery.VFIODevice) string { return "VFIO " + d.Product }

// claimVFIO gives a VFIO device to the resource name r gave it, unless its
// IOMMU group cannot be passed through (problem says why, on the rule that
// claimed it, as a template's problem does) or the name is a resource for
// containers.
func (pl *planner) claimVFIO(r *rule, t *target, name, desc string) (string, *Error) {
	d := t.vfio
	if why := groupProblem(d); why != "" {
		return name, &Error{Source: pl.rs.source, Line: r.line, Rule: r.index, RuleName: r.name, Msg: desc + " (" + d.PCIAddress + "): " + why}
	}
	c, ok := pl.claims[name]
	if !ok {
		c = &claim{rule: r, sharing: r.sharing, vfio: true}
		pl.claims[name] = c
		pl.order = append(pl.order, name)
	} else if !pl.sameKind(c, r, t, name, desc) || !pl.sameServe(c, r, name, desc) {
		return "", nil
	}
	c.devices = append(c.devices, claimed{mig: -1, rule: r, Device: plan.Device{
		ID: d.PCIAddress, Kind: plan.DeviceVFIO, GPUUUID: d.PCIAddress, GPUIndex: -1, NUMANode: d.NUMANode, Rule: r.name,
		VFIO: &plan.VFIODevice{
			PCIAddress: d.PCIAddress, IOMMUGroup: d.IOMMUGroup, DevicePaths: d.DevicePaths(),
			GroupDevices: len(d.GroupMembers) + 1, Driver: d.Driver, VendorID: d.VendorID, DeviceID: d.DeviceID,
		},
	}})
	return name, nil
}

// sameKind reports whether a device of t's kind may join claim c: a
// resource is for containers or for VMs, never both. It records the error
// when not.
func (pl *planner) sameKind(c *claim, r *rule, t *target, name, desc string) bool {
	if c.vfio == (t.kind == plan.DeviceVFIO) {
		return true
	}
	pl.fail(r, "resource", strconv.Quote(r.resource), fmt.Sprintf("resource %q of %s is also given by rules[%d] %q to %s; a resource serves containers or virtual machines, not both",
		name, desc, c.rule.index, c.rule.name, kindPlural(c.rule.devices)))
	return false
}

// kindPlural names the devices of a kind in messages.
func kindPlural(k plan.DeviceKind) string {
	switch k {
	case plan.DeviceMIG:
		return "MIG devices"
	case plan.DeviceVFIO:
		return "GPUs bound to vfio-pci"
	}
	return "whole GPUs"
}

// groupProblem says why a VFIO device cannot be passed through because of
// its IOMMU group, "" when it can (see the package comment above). It
// reads only what nvidia.vfio publishes, so that a plan rebuilt from the
// published features says the same (rules/published).
func groupProblem(d *discovery.VFIODevice) string {
	if d.IOMMUGroup == discovery.NoIOMMUGroup {
		return "in no IOMMU group: the host runs without an IOMMU; enable it (intel_iommu=on or amd_iommu=on on the kernel command line, VT-d or AMD-Vi in the firmware)"
	}
	group := "IOMMU group " + strconv.Itoa(d.IOMMUGroup)
	see := "featureplug discover lists its devices and their drivers, as does /sys/kernel/iommu_groups/" + strconv.Itoa(d.IOMMUGroup) + "/devices"
	switch gpus, held := d.GroupGPUs(), d.GroupHeld(); {
	case gpus > 1:
		return fmt.Sprintf("%s holds %d GPUs: VFIO gives a whole group to one VM, so they cannot go to different VMs and none is advertised; split the group (ACS on the PCIe switch or root port) to pass them through (%s)",
			group, gpus, see)
	case held > 0:
		return fmt.Sprintf("%s cannot be passed through: %s bound to a host driver; bind every device of the group to vfio-pci, or leave it without a driver (%s)",
			group, countDevices(held), see)
	}
	return ""
}

// countDevices says "1 other device is" or "2 other devices are".
func countDevices(n int) string {
	if n == 1 {
		return "1 other device is"
	}
	return strconv.Itoa(n) + " other devices are"
}

// splitVFIO takes the VFIO resources out of a plan's resources, their
// devices ordered by PCI address.
func splitVFIO(all []plan.Resource) (containers, vfio []plan.Resource) {
	containers = all[:0:0]
	for _, r := range all {
		if len(r.Devices) > 0 && r.Devices[0].Kind == plan.DeviceVFIO {
			slices.SortFunc(r.Devices, func(a, b plan.Device) int { return cmp.Compare(a.ID, b.ID) })
			vfio = append(vfio, r)
			continue
		}
		containers = append(containers, r)
	}
	return containers, vfio
}

// resourceOf returns the resource a decision's device went to, in either
// list of the plan.
func resourceOf(p *plan.Plan, name string) (*plan.Resource, bool) {
	if r, ok := p.Resource(name); ok {
		return r, true
	}
	return p.VFIOResource(name)
}

// checkKinds refuses, at load time, a literal resource name given both to
// VFIO devices and to devices for containers.
func (c *checker) checkKinds(r *rule, earlier []*rule) {
	for _, first := range earlier {
		if (first.devices == plan.DeviceVFIO) != (r.devices == plan.DeviceVFIO) {
			c.ruleError(r, path{"resource"}, "", fmt.Sprintf("resource %q is also given by rules[%d] %q to %s; a resource serves containers or virtual machines, not both",
				r.resource, first.index, first.name, kindPlural(first.devices)))
			return
		}
	}
}

// checkKindFeature warns about a term on a per-device feature the rule's
// devices never see: nvidia.mig on a devices: gpu rule, nvidia.gpu or
// nvidia.mig on a devices: vfio rule, nvidia.vfio on a rule for
// containers' devices.
func (c *checker) checkKindFeature(r *rule, at path, term *nfdv1alpha1.FeatureMatcherTerm, feature string) {
	var msg string
	switch {
	case feature == discovery.FeatureMIG && r.devices == plan.DeviceGPU:
		msg = "a devices: gpu rule sees no nvidia.mig instance, so the term never matches"
	case r.devices == plan.DeviceVFIO && (feature == discovery.FeatureGPU || feature == discovery.FeatureMIG):
		msg = "a devices: vfio rule sees no " + feature + " instance (NVML does not see GPUs bound to vfio-pci), so the term never matches; match nvidia.vfio"
	case feature == discovery.FeatureVFIO && (r.devices == plan.DeviceGPU || r.devices == plan.DeviceMIG):
		msg = "a devices: " + string(r.devices) + " rule sees no nvidia.vfio instance, so the term never matches"
	default:
		return
	}
	c.ruleWarning(r, at.with("feature"), strconv.Quote(term.Feature), msg)
}

// sampleVFIO is the VFIO device of the sample node (sample.go): templates
// of devices: vfio rules are tried on it.
func sampleVFIO() discovery.VFIODevice {
	d := discovery.VFIODevice{
		PCIAddress: "0000:c1:00.0", VendorID: "10de", DeviceID: "2330", Class: "0302",
		Driver: discovery.DriverVFIOPCI, DriverOverride: discovery.DriverVFIOPCI, IOMMUGroup: 45, NUMANode: 1,
	}
	d.Product, d.DeviceName, d.Family = "NVIDIA H100 80GB HBM3", "GH100_H100_SXM5_80GB", "hopper"
	return d
}
