package discovery

import (
	"strconv"
	"strings"
)

// VFIO passthrough: NVIDIA GPUs given to virtual machines are bound to a
// VFIO driver instead of nvidia, so NVML never sees them. Discovery reads
// them from sysfs (sysfs.go) into Inventory.VFIO; the rules map them to
// resource names like any device (devices: vfio), and the plan carries
// what serving them needs.

// VFIODevice is one NVIDIA GPU reserved for VFIO passthrough: bound to a
// VFIO driver (vfio-pci), or unbound while its driver_override still names
// one (it left vfio-pci and is expected back; serving reports it
// Unhealthy meanwhile).
type VFIODevice struct {
	// PCIAddress is the GPU's PCI address, lowercase, with a 4-digit
	// domain: "0000:c1:00.0". It identifies the device.
	PCIAddress string `json:"pciAddress"`
	// VendorID, DeviceID and Class are the PCI IDs as NFD's pci source
	// publishes them: four lowercase hex digits without 0x ("10de",
	// "26b9"); Class without the programming interface ("0302").
	VendorID string `json:"vendorID"`
	DeviceID string `json:"deviceID"`
	Class    string `json:"class"`
	// Product is the name NVML gives the product ("NVIDIA L40S"), so that
	// one expression matches the GPU on either driver; for a device ID
	// outside featureplug's table, "<vendor>:<device>" ("10de:2bb1").
	Product string `json:"product"`
	// DeviceName is the device's name as KubeVirt's resource names use it
	// (NVIDIA's kubevirt-gpu-device-plugin derives it from the PCI ID
	// database): "AD102GL_L40S"; the device ID ("2bb1") outside the table.
	DeviceName string `json:"deviceName"`
	// Family is the lowercase architecture family, as nvidia.gpu's
	// ("ada-lovelace"); Unknown outside the table.
	Family string `json:"family"`
	// Driver is the kernel driver the device is bound to ("vfio-pci"), ""
	// while unbound.
	Driver string `json:"driver,omitempty"`
	// DriverOverride is the device's driver_override ("vfio-pci", as
	// driverctl or a manual binding sets it), "" when none.
	DriverOverride string `json:"driverOverride,omitempty"`
	// IOMMUGroup is the device's IOMMU group, NoIOMMUGroup when the host
	// has no IOMMU enabled.
	IOMMUGroup int `json:"iommuGroup"`
	// GroupMembers are the other devices of the IOMMU group (the GPU's
	// audio function, a bridge), ordered by address. VFIO hands a group to
	// one VM as a whole.
	GroupMembers []PCIFunction `json:"groupMembers,omitempty"`
	// NUMANode is the device's NUMA node, or NoNUMANode.
	NUMANode int `json:"numaNode"`
	// PCIeRoot is the PCIe root complex the device hangs off ("pci0000:c0"),
	// as Kubernetes' DRA helper reads it from sysfs; "" when sysfs does not
	// say.
	PCIeRoot string `json:"pcieRoot,omitempty"`
	// CDev is the device's VFIO character device under /dev/vfio/devices
	// ("vfio3") when the kernel offers the iommufd interface (/dev/iommu
	// and the device's vfio-dev entry exist), "" otherwise.
	CDev string `json:"cdev,omitempty"`
}

// PCIFunction is one PCI function of an IOMMU group.
type PCIFunction struct {
	// Address is the PCI address ("0000:c1:00.1").
	Address string `json:"address"`
	// VendorID, DeviceID and Class are as in VFIODevice ("10de", "22ba",
	// "0403").
	VendorID string `json:"vendorID"`
	DeviceID string `json:"deviceID"`
	Class    string `json:"class"`
	// Driver is the driver it is bound to, "" when none.
	Driver string `json:"driver,omitempty"`
}

// NoIOMMUGroup is the IOMMUGroup of a device the kernel put in no IOMMU
// group: the host runs without an IOMMU, and the device cannot be passed
// through.
const NoIOMMUGroup = -1

// VFIO drivers: the kernel drivers that hold a device for passthrough.
// nvgrace_gpu_vfio_pci is vfio-pci's variant for Grace Hopper and Grace
// Blackwell superchips, as NVIDIA's kubevirt-gpu-device-plugin accepts it.
const (
	DriverVFIOPCI       = "vfio-pci"
	DriverNVGraceVFIO   = "nvgrace_gpu_vfio_pci"
	driverNVIDIA        = "nvidia"
	driverPCIStub       = "pci-stub"
	driverPCIePort      = "pcieport"
	pciVendorNVIDIA     = "10de"
	pciClassBridgePCI   = "0604"
	vfioDevicePathRoot  = "/dev/vfio"
	vfioContainerDevice = "/dev/vfio/vfio"
	iommufdDevice       = "/dev/iommu"
)

// IsVFIODriver reports whether driver holds a device for VFIO passthrough.
func IsVFIODriver(driver string) bool {
	return driver == DriverVFIOPCI || driver == DriverNVGraceVFIO
}

// Bound reports whether the device is bound to a VFIO driver now.
func (d *VFIODevice) Bound() bool { return IsVFIODriver(d.Driver) }

// IsGPU reports whether the function is a display controller (a GPU, of
// any vendor).
func (f *PCIFunction) IsGPU() bool { return strings.HasPrefix(f.Class, "03") }

// HoldsGroup reports whether the function, bound as it is, lets VFIO open
// its IOMMU group: bound to a VFIO driver, to pci-stub, to the PCIe port
// driver of a bridge (these drivers leave DMA to VFIO), or to no driver.
// A function bound to a host driver (snd_hda_intel, nvidia) makes the
// group unusable for passthrough: the kernel refuses to open it.
func (f *PCIFunction) HoldsGroup() bool {
	switch {
	case f.Driver == "", IsVFIODriver(f.Driver), f.Driver == driverPCIStub:
		return true
	case f.Driver == driverPCIePort && f.Class == pciClassBridgePCI:
		return true
	}
	return false
}

// GroupGPUs returns the number of GPUs in the device's IOMMU group, the
// device included.
func (d *VFIODevice) GroupGPUs() int {
	n := 1
	for i := range d.GroupMembers {
		if d.GroupMembers[i].IsGPU() {
			n++
		}
	}
	return n
}

// GroupHeld returns the number of devices of the IOMMU group bound to a
// host driver (PCIFunction.HoldsGroup is false): VFIO cannot open the
// group while any is.
func (d *VFIODevice) GroupHeld() int {
	n := 0
	for i := range d.GroupMembers {
		if !d.GroupMembers[i].HoldsGroup() {
			n++
		}
	}
	return n
}

// DevicePaths returns the device nodes a VM's container needs to use the
// device, as host paths: /dev/vfio/vfio and /dev/vfio/<group> (the legacy
// group interface), and /dev/iommu with /dev/vfio/devices/<cdev> when the
// kernel offers iommufd. Nil without an IOMMU group.
func (d *VFIODevice) DevicePaths() []string {
	if d.IOMMUGroup == NoIOMMUGroup {
		return nil
	}
	paths := []string{vfioContainerDevice, vfioDevicePathRoot + "/" + strconv.Itoa(d.IOMMUGroup)}
	if d.CDev != "" {
		paths = append(paths, iommufdDevice, vfioDevicePathRoot+"/devices/"+d.CDev)
	}
	return paths
}

// VFIODeviceByAddress returns the VFIO device with the given PCI address.
func (inv *Inventory) VFIODeviceByAddress(addr string) (*VFIODevice, bool) {
	for i := range inv.VFIO {
		if inv.VFIO[i].PCIAddress == addr {
			return &inv.VFIO[i], true
		}
	}
	return nil, false
}

// pciProduct is what featureplug knows of one NVIDIA PCI device ID.
type pciProduct struct {
	// product is NVML's name of the product.
	product string
	// pciName is the device's name in the PCI ID database (pci.ids).
	pciName string
	// family is the architecture family, as nvidia.gpu's family.
	family string
}

// nvidiaPCIProducts are the datacenter GPUs featureplug names without
// NVML, by PCI device ID: the products of its fake-node catalog and their
// PCIe or SXM siblings. pciName is the PCI ID database's name (pci.ids
// version 2026.07.31, as go-nvlib v0.13.0 embeds it), from which
// VFIODevice.DeviceName derives as NVIDIA's kubevirt-gpu-device-plugin
// derives it; product is NVML's name (nvidia-smi's "Product Name"). A
// table rather than the host's pci.ids: resource names must not change
// with the pci.ids version of a node's OS image.
var nvidiaPCIProducts = map[string]pciProduct{
	"20b0": {"NVIDIA A100-SXM4-40GB", "GA100 [A100 SXM4 40GB]", "ampere"},
	"20b2": {"NVIDIA A100-SXM4-80GB", "GA100 [A100 SXM4 80GB]", "ampere"},
	"20b5": {"NVIDIA A100 80GB PCIe", "GA100 [A100 PCIe 80GB]", "ampere"},
	"20f1": {"NVIDIA A100-PCIE-40GB", "GA100 [A100 PCIe 40GB]", "ampere"},
	"2321": {"NVIDIA H100 NVL", "GH100 [H100L 94GB]", "hopper"},
	"2330": {"NVIDIA H100 80GB HBM3", "GH100 [H100 SXM5 80GB]", "hopper"},
	"2331": {"NVIDIA H100 PCIe", "GH100 [H100 PCIe]", "hopper"},
	"2335": {"NVIDIA H200", "GH100 [H200 SXM 141GB]", "hopper"},
	"233b": {"NVIDIA H200 NVL", "GH100 [H200 NVL]", "hopper"},
	"2901": {"NVIDIA B200", "GB100 [B200]", "blackwell"},
	"26b9": {"NVIDIA L40S", "AD102GL [L40S]", "ada-lovelace"},
	"27b8": {"NVIDIA L4", "AD104GL [L4]", "ada-lovelace"},
}

// nameVFIODevice fills in Product, DeviceName and Family from the device
// IDs.
func nameVFIODevice(d *VFIODevice) {
	if p, ok := nvidiaPCIProducts[d.DeviceID]; ok && d.VendorID == pciVendorNVIDIA {
		d.Product, d.DeviceName, d.Family = p.product, KubeVirtDeviceName(p.pciName), p.family
		return
	}
	d.Product, d.DeviceName, d.Family = d.VendorID+":"+d.DeviceID, d.DeviceID, Unknown
}

// KubeVirtDeviceName turns a PCI ID database name into the device name
// NVIDIA's kubevirt-gpu-device-plugin registers as nvidia.com/<name>, the
// name KubeVirt's permittedHostDevices then lists: upper case, '/' and '.'
// become '_', every run of white space one '_', and every other character
// but letters, digits and '_' is dropped. "GH100 [H100 SXM5 80GB]" becomes
// "GH100_H100_SXM5_80GB".
func KubeVirtDeviceName(pciName string) string {
	var b strings.Builder
	space := false
	for _, r := range strings.ToUpper(strings.TrimSpace(pciName)) {
		switch {
		case r == ' ' || r == '\t' || r == '\n':
			space = true
			continue
		case space:
			b.WriteByte('_')
		}
		space = false
		switch {
		case r == '/' || r == '.':
			b.WriteByte('_')
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		}
	}
	return b.String()
}
