package fakenode

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// wireNVLink gives every GPU its NVLink lanes from the validated groups.
// Lanes are used in group order: a direct group gives each GPU Links lanes
// to each peer (remote: the peer's PCI info); an NVSwitch group gives each
// GPU Links lanes spread round-robin over the group's own switches (remote:
// a switch). Lanes left over stay disabled.
func wireNVLink(gpus []*gpu, groups []NVLinkSpec) {
	for _, g := range gpus {
		g.lanes = make([]lane, g.product.nvlinkLanes)
	}
	next := make([]int, len(gpus)) // next free lane per GPU
	switches := 0                  // switches numbered across the node
	for _, grp := range groups {
		if grp.NVSwitch {
			p := gpus[grp.GPUs[0]].product
			for _, idx := range grp.GPUs {
				g := gpus[idx]
				for k := range grp.Links {
					addr := switchAddress(switches + k%p.nvswitches)
					g.lanes[next[idx]] = lane{enabled: true, remote: addr.pciInfo(p.switchPCIDeviceID), remoteType: nvml.NVLINK_DEVICE_TYPE_SWITCH}
					next[idx]++
				}
			}
			switches += p.nvswitches
			continue
		}
		for _, idx := range grp.GPUs {
			g := gpus[idx]
			for _, peer := range grp.GPUs {
				if peer == idx {
					continue
				}
				pg := gpus[peer]
				for range grp.Links {
					g.lanes[next[idx]] = lane{enabled: true, remote: pg.addr.pciInfo(pg.product.pciDeviceID), remoteType: nvml.NVLINK_DEVICE_TYPE_GPU}
					next[idx]++
				}
			}
		}
	}
}

// topologyLevel maps the PCIe level names of a pcie group to NVML's.
func topologyLevel(name string) nvml.GpuTopologyLevel {
	switch name {
	case "PIX":
		return nvml.TOPOLOGY_SINGLE
	case "PXB":
		return nvml.TOPOLOGY_MULTIPLE
	case "PHB":
		return nvml.TOPOLOGY_HOSTBRIDGE
	case "NODE":
		return nvml.TOPOLOGY_NODE
	default:
		return nvml.TOPOLOGY_SYSTEM
	}
}

// wirePCIe sets every pair's common PCIe ancestor: the nearest level of the
// pcie groups holding both GPUs, else NODE on the same NUMA node and SYS
// across nodes (or when a GPU has no NUMA node).
func wirePCIe(gpus []*gpu, groups []PCIeSpec) {
	for _, g := range gpus {
		g.topology = make([]nvml.GpuTopologyLevel, len(gpus))
		for j, o := range gpus {
			switch {
			case j == g.index:
				g.topology[j] = nvml.TOPOLOGY_INTERNAL
			case g.numa >= 0 && g.numa == o.numa:
				g.topology[j] = nvml.TOPOLOGY_NODE
			default:
				g.topology[j] = nvml.TOPOLOGY_SYSTEM
			}
		}
	}
	for _, grp := range groups {
		level := topologyLevel(grp.Level)
		for _, a := range grp.GPUs {
			for _, b := range grp.GPUs {
				if a != b && level < gpus[a].topology[b] {
					gpus[a].topology[b] = level
				}
			}
		}
	}
}
