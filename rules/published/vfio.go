package published

import (
	"github.com/featureplug/featureplug/discovery"
)

// rebuildVFIO reads the nvidia.vfio instances back into inv.VFIO. The
// IOMMU group's other devices are published as counts (devices, GPUs,
// devices bound to a host driver), what the plan decides on: the rebuilt
// members are placeholders that give those counts. The device's VFIO
// character device (iommufd) is not published, so the rebuilt plan lists
// the legacy /dev/vfio paths only.
func rebuildVFIO(r *rebuilder, inv *discovery.Inventory, set []nfdInstance) {
	for i, attrsOf := range set {
		a := attrs{r: r, feature: discovery.FeatureVFIO, i: i, m: attrsOf}
		d := discovery.VFIODevice{
			PCIAddress: a.str(discovery.AttrPCIBus),
			VendorID:   a.str(discovery.AttrVendor),
			DeviceID:   a.str(discovery.AttrDevice),
			Class:      a.str(discovery.AttrClass),
			Product:    a.str(discovery.AttrProduct),
			DeviceName: a.str(discovery.AttrDeviceName),
			Family:     a.str(discovery.AttrFamily),
			IOMMUGroup: a.int(discovery.AttrIOMMUGroup),
			NUMANode:   a.int(discovery.AttrNUMA),
			Driver:     a.str(discovery.AttrDriver),
		}
		if d.Driver == "none" {
			d.Driver = ""
		}
		d.GroupMembers = placeholderMembers(a.int(discovery.AttrIOMMUGroupDevices)-1,
			a.int(discovery.AttrIOMMUGroupGPUs)-1, a.int(discovery.AttrIOMMUGroupHeld))
		inv.VFIO = append(inv.VFIO, d)
	}
}

// nfdInstance is the attributes of one published instance.
type nfdInstance = map[string]string

// placeholderMembers returns n group members of which gpus are GPUs and
// held are bound to a host driver (the first are GPUs, the last held, so
// they overlap only when gpus+held > n). Counts out of range are clamped;
// the comparison of features then names the difference.
func placeholderMembers(n, gpus, held int) []discovery.PCIFunction {
	n = max(0, min(n, 64))
	out := make([]discovery.PCIFunction, n)
	for k := range out {
		out[k].Class = "0000"
		if k < gpus {
			out[k].Class = "0300"
		}
		if k >= n-held {
			out[k].Driver = "host"
		}
	}
	return out
}
