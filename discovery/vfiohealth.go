package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// The health of a GPU passed through to virtual machines: NVML does not
// see it, so no XID or ECC event reaches featureplug. What the host can
// tell is whether the GPU can still be handed to a VM: bound to a VFIO
// driver, on the PCI bus, with its IOMMU group's device node in /dev/vfio.
// CheckVFIODevice reads that from sysfs; the health tracker holds a GPU
// that fails it Unhealthy while it fails (plugin/health's VFIO probe).

// Health kinds of a VFIO device that cannot be handed to a VM now.
const (
	// EventVFIOUnbound: the GPU is no longer bound to a VFIO driver
	// (unbound, or bound to nvidia or another host driver).
	EventVFIOUnbound HealthEventKind = "vfio-unbound"
	// EventVFIOGone: the GPU left the PCI bus (removed, hot-unplugged).
	EventVFIOGone HealthEventKind = "vfio-gone"
	// EventVFIONoGroupNode: the GPU is bound, but its IOMMU group's device
	// node (/dev/vfio/<group>) is missing, so no VM can open the group.
	EventVFIONoGroupNode HealthEventKind = "vfio-no-group-node"
)

// VFIOProblem says why a VFIO device cannot be handed to a VM now.
type VFIOProblem struct {
	// Kind is one of the EventVFIO kinds.
	Kind HealthEventKind
	// Reason says what was found, for logs and people: "bound to nvidia".
	Reason string
}

// CheckVFIODevice reads, under the sysfs root (as ReadSysfs), whether the
// GPU at addr, in IOMMU group group, can be handed to a VM now: it is on
// the PCI bus, bound to a VFIO driver, and <root>/dev/vfio/<group> exists
// (looked for only where <root>/dev/vfio/vfio shows the host's /dev).
// It returns the problem and true when not. A few readlink and stat calls:
// cheap enough to run every few seconds for every VFIO GPU. An error other
// than a missing file is a problem too (it is named): a device the agent
// cannot read is not one it can vouch for.
func CheckVFIODevice(root, addr string, group int) (VFIOProblem, bool) {
	dev := filepath.Join(root, SysfsPCIDevices, addr)
	if _, err := os.Lstat(dev); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return VFIOProblem{EventVFIOGone, "not on the PCI bus (" + dev + " is gone)"}, true
		}
		return VFIOProblem{EventVFIOGone, fmt.Sprintf("cannot read %s: %v", dev, err)}, true
	}
	driver, err := readLinkBase(dev, "driver")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return VFIOProblem{EventVFIOUnbound, "bound to no driver"}, true
	case err != nil:
		return VFIOProblem{EventVFIOUnbound, fmt.Sprintf("cannot read its driver: %v", err)}, true
	case !IsVFIODriver(driver):
		return VFIOProblem{EventVFIOUnbound, "bound to " + driver + ", not vfio-pci"}, true
	}
	if group == NoIOMMUGroup {
		return VFIOProblem{EventVFIONoGroupNode, "in no IOMMU group"}, true
	}
	if _, err := os.Stat(filepath.Join(root, vfioContainerDevice)); err != nil {
		// The host's /dev is not visible under root (an unprivileged
		// container's own /dev): the binding is all there is to read.
		return VFIOProblem{}, false
	}
	node := filepath.Join(root, vfioDevicePathRoot, strconv.Itoa(group))
	if _, err := os.Stat(node); err != nil {
		return VFIOProblem{EventVFIONoGroupNode, fmt.Sprintf("its group's device node is missing: %v", err)}, true
	}
	return VFIOProblem{}, false
}
