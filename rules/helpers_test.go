package rules

import (
	"fmt"

	"github.com/featureplug/featureplug/discovery"
)

// testGPU returns a GPU of a model, with MIG disabled.
func testGPU(index int, product string) discovery.GPU {
	g := discovery.GPU{
		Index: index, Minor: index,
		UUID:         fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", index),
		Product:      product,
		Brand:        "Nvidia",
		PCIBusID:     fmt.Sprintf("0000:%02x:00.0", 7+index),
		NUMANode:     index / 4,
		ComputeMode:  "Default",
		Architecture: "Ampere", Family: "ampere",
		ComputeMajor: 8, ComputeMinor: 0,
	}
	switch product {
	case "NVIDIA A100-SXM4-40GB":
		g.MemoryMiB, g.MIGCapable = 40960, true
	case "NVIDIA A100-SXM4-80GB":
		g.MemoryMiB, g.MIGCapable = 81920, true
	case "NVIDIA H100 80GB HBM3":
		g.MemoryMiB, g.MIGCapable = 81559, true
		g.Architecture, g.Family, g.ComputeMajor = "Hopper", "hopper", 9
	case "Tesla T4":
		g.MemoryMiB = 15360
		g.Brand, g.Architecture, g.Family, g.ComputeMajor, g.ComputeMinor = "Tesla", "Turing", "turing", 7, 5
	default:
		panic("no test data for " + product)
	}
	return g
}

// withMIG enables MIG on a GPU and gives it MIG devices of the profiles.
func withMIG(g discovery.GPU, profiles ...string) discovery.GPU {
	g.MIGEnabled = true
	for i, p := range profiles {
		var slices int
		var mem uint64
		if _, err := fmt.Sscanf(p, "%dg.%dgb", &slices, &mem); err != nil {
			panic(fmt.Sprintf("withMIG: profile %q: %v", p, err))
		}
		g.MIGDevices = append(g.MIGDevices, discovery.MIGDevice{
			ParentIndex: g.Index, ParentUUID: g.UUID, Index: i,
			GPUInstanceID: i + 1, ComputeInstanceID: 0,
			UUID:      fmt.Sprintf("MIG-%08d-%04d-0000-0000-000000000000", g.Index, i),
			Profile:   p,
			MemoryMiB: mem*1024 - 256, Multiprocessors: 14 * slices,
			GISlices: slices, CISlices: slices,
			Engines: discovery.Engines{Copy: slices},
		})
	}
	return g
}

// testInventory builds an inventory around GPUs, with a driver and no links.
func testInventory(gpus ...discovery.GPU) *discovery.Inventory {
	return &discovery.Inventory{
		DriverVersion:     "570.86.15",
		CUDADriverVersion: "12.8",
		NVMLVersion:       "12.570.86.15",
		GPUs:              gpus,
	}
}

// a100Node is a two-GPU A100 node: GPU 0 whole, GPU 1 split into three MIG
// devices.
func a100Node() *discovery.Inventory {
	inv := testInventory(
		testGPU(0, "NVIDIA A100-SXM4-40GB"),
		withMIG(testGPU(1, "NVIDIA A100-SXM4-40GB"), "3g.20gb", "2g.10gb", "1g.5gb"),
	)
	inv.Links = discovery.LinkMatrix{
		{{}, {NVLinks: 12, PCIe: discovery.PCIeSystem}},
		{{NVLinks: 12, PCIe: discovery.PCIeSystem}, {}},
	}
	return inv
}

// modelNode has one GPU of each of four models, none with MIG.
func modelNode() *discovery.Inventory {
	return testInventory(
		testGPU(0, "NVIDIA H100 80GB HBM3"),
		testGPU(1, "NVIDIA A100-SXM4-80GB"),
		testGPU(2, "NVIDIA A100-SXM4-40GB"),
		testGPU(3, "Tesla T4"),
	)
}
