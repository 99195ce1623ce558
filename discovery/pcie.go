package discovery

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/dynamic-resource-allocation/deviceattribute"
)

// SysfsProvider is implemented by an nvml.Interface that comes with a
// sysfs of its own (the fake node, whose GPUs hang off PCIe roots its
// topology gives). Discover reads that sysfs instead of the machine's.
type SysfsProvider interface {
	// Sysfs returns the tree under /sys: paths are relative to it
	// ("bus/pci/devices/0000:07:00.0").
	Sysfs() fs.ReadLinkFS
}

// WithSysfs sets the sysfs tree (relative to /sys) Discover reads PCIe
// roots from, over both WithSysfsRoot and a SysfsProvider library.
func WithSysfs(fsys fs.ReadLinkFS) Option {
	return func(r *reader) { r.sysfs = fsys }
}

// sysfsTree is the sysfs Discover reads: WithSysfs's, the library's own,
// or <sysfsRoot>/sys.
func (r *reader) sysfsTree() fs.ReadLinkFS {
	if r.sysfs != nil {
		return r.sysfs
	}
	if p, ok := r.lib.(SysfsProvider); ok {
		return p.Sysfs()
	}
	if t, ok := os.DirFS(filepath.Join(r.sysfsRoot, "sys")).(fs.ReadLinkFS); ok {
		return t
	}
	return nil
}

// pcieRoot returns the PCIe root complex of the PCI device at busID, as
// Kubernetes' DRA helper reads it from sysfs (the first element of the
// device's path under /sys/devices: "pci0000:00"), or "" when sysfs does
// not say (no sysfs in the container, a bus ID NVML could not read).
func (r *reader) pcieRoot(busID string) string {
	tree := r.sysfsTree()
	if tree == nil {
		return ""
	}
	attr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID, deviceattribute.WithFS(tree))
	if err != nil || attr.Value.StringValue == nil {
		return ""
	}
	return *attr.Value.StringValue
}

// sysfsPCIeRoot returns the PCIe root complex of the PCI device at
// busID under the sysfs of the host whose root is root, as pcieRoot reads
// it; "" when sysfs does not say.
func sysfsPCIeRoot(root, busID string) string {
	tree, ok := os.DirFS(filepath.Join(root, "sys")).(fs.ReadLinkFS)
	if !ok {
		return ""
	}
	attr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID, deviceattribute.WithFS(tree))
	if err != nil || attr.Value.StringValue == nil {
		return ""
	}
	return *attr.Value.StringValue
}

// sysfsNUMANode reads the NUMA node of the PCI device at busID from
// sysfs (bus/pci/devices/<busID>/numa_node), for drivers whose NVML does
// not report it; NoNUMANode when sysfs does not say.
func (r *reader) sysfsNUMANode(busID string) int {
	tree := r.sysfsTree()
	if tree == nil {
		return NoNUMANode
	}
	data, err := fs.ReadFile(tree, path.Join("bus/pci/devices", busID, "numa_node"))
	if err != nil {
		return NoNUMANode
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || n < 0 {
		return NoNUMANode
	}
	return n
}
