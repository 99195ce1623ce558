package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Where ReadSysfs looks, relative to its root: the PCI devices and IOMMU
// groups in sysfs, and the iommufd device node.
const (
	SysfsPCIDevices  = "sys/bus/pci/devices"
	SysfsIOMMUGroups = "sys/kernel/iommu_groups"
	devIOMMU         = "dev/iommu"
)

// SysfsGPUs is what ReadSysfs found of the node's NVIDIA GPUs.
type SysfsGPUs struct {
	// VFIO are the GPUs reserved for VFIO passthrough (VFIODevice says
	// which), ordered by PCI address.
	VFIO []VFIODevice
	// NVIDIA are the PCI addresses of the GPUs bound to the nvidia
	// driver: NVML's to read.
	NVIDIA []string
}

// ReadSysfs reads the node's NVIDIA GPUs (PCI vendor 0x10de, display
// class 0x03xx) from sysfs under root ("/", or "/host" where a container
// mounts the host's /sys and /dev there): the PCI devices in
// <root>/sys/bus/pci/devices (vendor, device, class, driver,
// driver_override, numa_node, iommu_group), the other members of each VFIO
// GPU's IOMMU group in <root>/sys/kernel/iommu_groups, and whether the
// kernel offers iommufd (<root>/dev/iommu). It reads only files, no
// config space, and costs a few reads per PCI device.
//
// A root without a PCI bus in sysfs has no GPUs. A device that vanishes
// while it is read (hot unplug) is skipped; any other failure to read an
// NVIDIA GPU is an error naming the file.
func ReadSysfs(root string) (*SysfsGPUs, error) {
	dir := filepath.Join(root, SysfsPCIDevices)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return &SysfsGPUs{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading PCI devices: %w", err)
	}
	_, err = os.Stat(filepath.Join(root, devIOMMU))
	iommufd := err == nil
	out := &SysfsGPUs{}
	for _, e := range entries {
		d, err := readVFIOCandidate(root, e.Name(), iommufd, out)
		if err != nil {
			return nil, err
		}
		if d != nil {
			out.VFIO = append(out.VFIO, *d)
		}
	}
	// ReadDir sorts by name, which for PCI addresses is address order.
	return out, nil
}

// readVFIOCandidate reads one PCI device: a VFIO device when it is an
// NVIDIA GPU reserved for passthrough; an NVIDIA GPU on the nvidia driver
// is recorded in out.NVIDIA; anything else is nil.
func readVFIOCandidate(root, addr string, iommufd bool, out *SysfsGPUs) (*VFIODevice, error) {
	dev := filepath.Join(root, SysfsPCIDevices, addr)
	vendor, err := readPCIID(dev, "vendor")
	if err != nil || vendor != pciVendorNVIDIA {
		return nil, nil // not an NVIDIA device, or gone: nothing to read
	}
	f, err := readFunction(dev, addr)
	if err != nil || !f.IsGPU() {
		return nil, ignoreGone(err)
	}
	if f.Driver == driverNVIDIA {
		out.NVIDIA = append(out.NVIDIA, addr)
		return nil, nil
	}
	override, err := readString(dev, "driver_override")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if override == "(null)" {
		override = ""
	}
	if !IsVFIODriver(f.Driver) && (f.Driver != "" || !IsVFIODriver(override)) {
		return nil, nil // another driver (nouveau), or unbound and not reserved
	}
	d := &VFIODevice{
		PCIAddress: addr, VendorID: f.VendorID, DeviceID: f.DeviceID, Class: f.Class,
		Driver: f.Driver, DriverOverride: override, NUMANode: NoNUMANode, IOMMUGroup: NoIOMMUGroup,
	}
	nameVFIODevice(d)
	if s, err := readString(dev, "numa_node"); err == nil {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			d.NUMANode = n
		}
	}
	d.PCIeRoot = sysfsPCIeRoot(root, addr)
	group, err := readLinkBase(dev, "iommu_group")
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		n, err := strconv.Atoi(group)
		if err != nil {
			return nil, fmt.Errorf("PCI device %s: iommu_group %q is not a group number", addr, group)
		}
		d.IOMMUGroup = n
		if d.GroupMembers, err = readGroupMembers(root, n, addr); err != nil {
			return nil, err
		}
	}
	if iommufd {
		d.CDev = readCDev(dev)
	}
	return d, nil
}

// readGroupMembers reads the devices of IOMMU group n other than self.
func readGroupMembers(root string, n int, self string) ([]PCIFunction, error) {
	dir := filepath.Join(root, SysfsIOMMUGroups, strconv.Itoa(n), "devices")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading IOMMU group %d: %w", n, err)
	}
	var out []PCIFunction
	for _, e := range entries {
		if e.Name() == self {
			continue
		}
		f, err := readFunction(filepath.Join(dir, e.Name()), e.Name())
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b PCIFunction) int { return strings.Compare(a.Address, b.Address) })
	return out, nil
}

// readFunction reads a PCI function's IDs and driver.
func readFunction(dev, addr string) (PCIFunction, error) {
	f := PCIFunction{Address: addr}
	var err error
	if f.VendorID, err = readPCIID(dev, "vendor"); err != nil {
		return f, err
	}
	if f.DeviceID, err = readPCIID(dev, "device"); err != nil {
		return f, err
	}
	if f.Class, err = readPCIID(dev, "class"); err != nil {
		return f, err
	}
	f.Driver, err = readLinkBase(dev, "driver")
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	return f, err
}

// readCDev returns the name of the device's VFIO character device
// (vfio-dev/vfioN), "" when it has none.
func readCDev(dev string) string {
	entries, err := os.ReadDir(filepath.Join(dev, "vfio-dev"))
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "vfio") {
			return e.Name()
		}
	}
	return ""
}

// readPCIID reads a sysfs ID file ("0x10de", a class "0x030200") as NFD's
// pci source publishes it: four lowercase hex digits without 0x, a class
// without its programming interface ("0302").
func readPCIID(dev, name string) (string, error) {
	s, err := readString(dev, name)
	if err != nil {
		return "", err
	}
	s = strings.ToLower(strings.TrimPrefix(s, "0x"))
	if _, perr := strconv.ParseUint(s, 16, 32); perr != nil || len(s) < 4 {
		return "", fmt.Errorf("%s: %q is not a PCI ID", filepath.Join(dev, name), s)
	}
	return s[:4], nil
}

// readString reads a one-line sysfs file, trimmed.
func readString(dev, name string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dev, name))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(data)), nil
}

// readLinkBase returns the last element of a sysfs symlink's target: the
// driver name of "driver", the group number of "iommu_group".
func readLinkBase(dev, name string) (string, error) {
	target, err := os.Readlink(filepath.Join(dev, name))
	if err != nil {
		return "", err
	}
	return filepath.Base(target), nil
}

// ignoreGone drops the error of a device that left the bus while it was
// read.
func ignoreGone(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// DiscoverVFIO reads the node's GPUs reserved for VFIO passthrough from
// sysfs under root (see ReadSysfs), for Inventory.VFIO.
func DiscoverVFIO(root string) ([]VFIODevice, error) {
	s, err := ReadSysfs(root)
	if err != nil {
		return nil, err
	}
	return s.VFIO, nil
}

// CheckVFIOOnly says whether a node whose NVML could not be opened
// (nvmlErr) can be discovered from sysfs alone: nil when sysfs under root
// shows GPUs reserved for VFIO and none bound to the nvidia driver (a node
// that gives all its GPUs to virtual machines needs no NVIDIA driver).
// Otherwise it returns nvmlErr, saying which GPUs need NVML when some are
// bound to nvidia.
func CheckVFIOOnly(root string, nvmlErr error) error {
	s, err := ReadSysfs(root)
	if err != nil {
		return fmt.Errorf("%w (and reading sysfs for GPUs bound to vfio-pci: %v)", nvmlErr, err)
	}
	switch {
	case len(s.NVIDIA) > 0:
		return fmt.Errorf("%w (GPUs %s are bound to the nvidia driver and need NVML)", nvmlErr, strings.Join(s.NVIDIA, ", "))
	case len(s.VFIO) == 0:
		return nvmlErr
	}
	return nil
}
