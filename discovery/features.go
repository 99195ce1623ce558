package discovery

import (
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
)

// Features converts an Inventory into NFD features, as the attribute catalog
// (Attributes) describes them. The result is deterministic: instances are
// ordered by GPU index, then MIG device index; nvidia.vfio instances (only
// on a node with VFIO devices) by PCI address.
func Features(inv *Inventory) *nfdv1alpha1.Features {
	f := nfdv1alpha1.NewFeatures()

	f.Attributes[FeatureDriver] = nfdv1alpha1.NewAttributeFeatures(DriverAttributes(inv))

	flags := make(map[string]nfdv1alpha1.Nil, len(byFeature.flags))
	for i := range byFeature.flags {
		a := &byFeature.flags[i]
		if _, ok := a.node(inv); ok {
			flags[a.Name] = nfdv1alpha1.Nil{}
		}
	}
	f.Flags[FeatureCapabilities] = nfdv1alpha1.FlagFeatureSet{Elements: flags}

	gpus := make([]nfdv1alpha1.InstanceFeature, 0, len(inv.GPUs))
	// Never nil: the API server refuses an instance feature with null elements.
	migs := make([]nfdv1alpha1.InstanceFeature, 0, inv.MIGDeviceCount())
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		gpus = append(gpus, nfdv1alpha1.InstanceFeature{Attributes: GPUAttributes(inv, g)})
		if len(g.MIGDevices) == 0 {
			continue
		}
		parent := parentValues(g)
		for j := range g.MIGDevices {
			migs = append(migs, nfdv1alpha1.InstanceFeature{Attributes: migAttributes(parent, &g.MIGDevices[j])})
		}
	}
	f.Instances[FeatureGPU] = nfdv1alpha1.InstanceFeatureSet{Elements: gpus}
	f.Instances[FeatureMIG] = nfdv1alpha1.InstanceFeatureSet{Elements: migs}
	if len(inv.VFIO) > 0 {
		vfio := make([]nfdv1alpha1.InstanceFeature, 0, len(inv.VFIO))
		for i := range inv.VFIO {
			vfio = append(vfio, nfdv1alpha1.InstanceFeature{Attributes: VFIOAttributes(&inv.VFIO[i])})
		}
		f.Instances[FeatureVFIO] = nfdv1alpha1.InstanceFeatureSet{Elements: vfio}
	}
	return f
}

// VFIOAttributes returns the attributes of one nvidia.vfio instance.
func VFIOAttributes(d *VFIODevice) map[string]string {
	list := byFeature.vfio
	attrs := make(map[string]string, len(list))
	for i := range list {
		attrs[list[i].Name] = list[i].vfio(d)
	}
	return attrs
}

// DriverAttributes returns the attributes of the nvidia.driver feature.
func DriverAttributes(inv *Inventory) map[string]string {
	attrs := make(map[string]string, len(byFeature.driver))
	for i := range byFeature.driver {
		a := &byFeature.driver[i]
		if v, ok := a.node(inv); ok {
			attrs[a.Name] = v
		}
	}
	return attrs
}

// GPUAttributes returns the attributes of one nvidia.gpu instance.
func GPUAttributes(inv *Inventory, g *GPU) map[string]string {
	list := byFeature.gpu
	attrs := make(map[string]string, len(list))
	for i := range list {
		a := &list[i]
		attrs[a.Name] = a.gpu(inv, g)
	}
	return attrs
}

// MIGAttributes returns the attributes of one nvidia.mig instance, including
// the attributes of its parent GPU that rules commonly match on.
func MIGAttributes(parent *GPU, m *MIGDevice) map[string]string {
	return migAttributes(parentValues(parent), m)
}

// parentValues returns the values of the nvidia.mig attributes read from
// the parent GPU, in byFeature.parent's order: the same for all its MIG
// devices, so Features reads them once per GPU.
func parentValues(g *GPU) []string {
	list := byFeature.parent
	values := make([]string, len(list))
	for i := range list {
		values[i] = list[i].parent(g)
	}
	return values
}

func migAttributes(parent []string, m *MIGDevice) map[string]string {
	list, plist := byFeature.mig, byFeature.parent
	attrs := make(map[string]string, len(list)+len(plist))
	for i := range list {
		a := &list[i]
		attrs[a.Name] = a.mig(m)
	}
	for i := range plist {
		attrs[plist[i].Name] = parent[i]
	}
	return attrs
}

// byFeature is the catalog split by feature, read-only like it, so that
// building features does not scan the whole catalog for every instance.
var byFeature = func() (v struct{ gpu, mig, parent, vfio, driver, flags []Attribute }) {
	for _, a := range catalog {
		switch {
		case a.Feature == FeatureGPU:
			v.gpu = append(v.gpu, a)
		case a.parent != nil:
			v.parent = append(v.parent, a)
		case a.Feature == FeatureMIG:
			v.mig = append(v.mig, a)
		case a.Feature == FeatureVFIO:
			v.vfio = append(v.vfio, a)
		case a.Feature == FeatureDriver:
			v.driver = append(v.driver, a)
		case a.Feature == FeatureCapabilities:
			v.flags = append(v.flags, a)
		}
	}
	return v
}()

func (inv *Inventory) anyGPU(pred func(*GPU) bool) bool {
	for i := range inv.GPUs {
		if pred(&inv.GPUs[i]) {
			return true
		}
	}
	return false
}

func (m LinkMatrix) hasNVLink() bool {
	for i := range m {
		if m.nvlinkPeers(i) > 0 {
			return true
		}
	}
	return false
}

// nvlinkPeers returns how many other GPUs GPU i reaches by NVLink.
func (m LinkMatrix) nvlinkPeers(i int) int {
	if i < 0 || i >= len(m) {
		return 0
	}
	n := 0
	for j, l := range m[i] {
		if j != i && l.NVLinks > 0 {
			n++
		}
	}
	return n
}
