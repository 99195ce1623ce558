package fakenode

import (
	"fmt"
	"io/fs"
	"strconv"
	"testing/fstest"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Sysfs returns the part of /sys that places the node's GPUs in the PCIe
// tree, as Linux lays it out: bus/pci/devices/<address> is a link to the
// GPU's directory under devices/<root complex>/<root port>, which holds
// numa_node. It implements discovery.SysfsProvider, so discovery reads
// PCIe roots from it as it reads them from a real /sys.
//
// The roots follow the node's topology: GPUs whose common PCIe ancestor is
// at most a host bridge (PIX, PXB or PHB in the file's pcie groups) share
// a root complex; any other GPU has one of its own. Root complexes are
// named after the lowest-numbered GPU under them: "pci0000:00" for GPU 0,
// "pci0000:10" for GPU 1 (whose address is 0000:17:00.0), and so on.
func (l *library) Sysfs() fs.ReadLinkFS {
	gpus := l.node.gpus
	fsys := fstest.MapFS{}
	for _, g := range gpus {
		root := rootOf(gpus, g.index)
		rootBus := uint32(0x10 * root)
		addr := fmt.Sprintf("%04x:%02x:%02x.0", 0, g.addr.bus, g.addr.device)
		port := fmt.Sprintf("%04x:%02x:%02x.0", 0, rootBus, 1)
		dir := fmt.Sprintf("devices/pci0000:%02x/%s/%s", rootBus, port, addr)
		fsys["bus/pci/devices/"+addr] = &fstest.MapFile{Mode: fs.ModeSymlink | 0o777, Data: []byte("../../../" + dir)}
		fsys[dir+"/numa_node"] = &fstest.MapFile{Data: []byte(strconv.Itoa(g.numa) + "\n")}
	}
	return fsys
}

// rootOf returns the lowest index of the GPUs sharing GPU i's root
// complex: those it reaches through PCIe bridges and at most a host
// bridge, directly or through another such GPU.
func rootOf(gpus []*gpu, i int) int {
	seen := map[int]bool{i: true}
	todo := []int{i}
	low := i
	for len(todo) > 0 {
		a := todo[0]
		todo = todo[1:]
		low = min(low, a)
		for b, level := range gpus[a].topology {
			if !seen[b] && b != a && level <= nvml.TOPOLOGY_HOSTBRIDGE {
				seen[b] = true
				todo = append(todo, b)
			}
		}
	}
	return low
}
