package draattr

import (
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/featureplug/featureplug/discovery"
)

// A GPU bound to vfio-pci for a virtual machine has no NVML, so its
// device in the slice carries what sysfs says, in featureplug's own domain
// under either schema (NVIDIA's DRA driver publishes no VFIO devices under
// names a claim could rely on): type "vfio", the product and KubeVirt's
// device name, the PCI vendor and device IDs, the IOMMU group and how
// many devices it holds, and the standard attributes. KubeVirt reads
// resource.kubernetes.io/pciBusID of an allocated device to pass it
// through.

// TypeVFIO is AttrType of a GPU passed through to a virtual machine.
const TypeVFIO = "vfio"

// Attributes of a VFIO device besides AttrType, AttrResource and the
// standard attributes.
const (
	// AttrVFIOProductName is the product name ("NVIDIA L40S"), as
	// nvidia.vfio's product.
	AttrVFIOProductName resourceapi.QualifiedName = "productName"
	// AttrVFIODeviceName is the device's name as KubeVirt's resource
	// names use it ("AD102GL_L40S").
	AttrVFIODeviceName resourceapi.QualifiedName = "deviceName"
	// AttrVFIOFamily is the architecture family ("ada-lovelace"); absent
	// outside featureplug's table of device IDs.
	AttrVFIOFamily resourceapi.QualifiedName = "family"
	// AttrPCIVendorID and AttrPCIDeviceID are the PCI IDs as four
	// lowercase hex digits ("10de", "26b9").
	AttrPCIVendorID resourceapi.QualifiedName = "pciVendorId"
	AttrPCIDeviceID resourceapi.QualifiedName = "pciDeviceId"
	// AttrIOMMUGroup is the IOMMU group, the unit VFIO gives one VM.
	AttrIOMMUGroup resourceapi.QualifiedName = "iommuGroup"
	// AttrIOMMUGroupDevices is how many devices the group holds, the GPU
	// included: the VM gets them all (the GPU's audio function).
	AttrIOMMUGroupDevices resourceapi.QualifiedName = "iommuGroupDevices"
)

// VFIODeviceName returns a VFIO device's name in the slice under either
// schema: "vfio-" and its PCI address with ':' and '.' as '-'
// ("vfio-0000-c1-00-0"), a DNS label stable across restarts.
func VFIODeviceName(pciAddress string) string {
	return DeviceName("vfio-" + strings.NewReplacer(":", "-", ".", "-").Replace(pciAddress))
}

// VFIODevice returns the attributes of a GPU passed through to a virtual
// machine, read from sysfs (no capacities: its memory is the VM's to
// see). It does not set AttrResource.
func VFIODevice(d *discovery.VFIODevice) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrType:              {StringValue: ptr(TypeVFIO)},
		AttrPCIVendorID:       {StringValue: ptr(d.VendorID)},
		AttrPCIDeviceID:       {StringValue: ptr(d.DeviceID)},
		AttrIOMMUGroup:        {IntValue: ptr(int64(d.IOMMUGroup))},
		AttrIOMMUGroupDevices: {IntValue: ptr(int64(len(d.GroupMembers) + 1))},
	}
	for name, v := range map[resourceapi.QualifiedName]string{AttrVFIOProductName: d.Product, AttrVFIODeviceName: d.DeviceName, AttrVFIOFamily: d.Family} {
		if v != "" && v != discovery.Unknown && len(v) <= resourceapi.DeviceAttributeMaxValueLength {
			attrs[name] = resourceapi.DeviceAttribute{StringValue: ptr(v)}
		}
	}
	attrs[AttrPCIBusID] = resourceapi.DeviceAttribute{StringValue: ptr(d.PCIAddress)}
	if d.PCIeRoot != "" {
		attrs[AttrPCIeRoot] = resourceapi.DeviceAttribute{StringValue: ptr(d.PCIeRoot)}
	}
	if d.NUMANode >= 0 {
		attrs[AttrNUMANode] = resourceapi.DeviceAttribute{IntValue: ptr(int64(d.NUMANode))}
	}
	return attrs
}
