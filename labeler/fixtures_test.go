package labeler

import (
	"fmt"
	"slices"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// Hand-built inventories and plans for the label tests. MIG figures are the
// A100-SXM4-40GB values of the GPU catalog (nvidia-smi mig -lgip).

var a100MIGProfiles = map[string]discovery.MIGDevice{
	"1g.5gb":  {Profile: "1g.5gb", MemoryMiB: 4864, Multiprocessors: 14, GISlices: 1, CISlices: 1, Engines: discovery.Engines{Copy: 1}},
	"2g.10gb": {Profile: "2g.10gb", MemoryMiB: 9856, Multiprocessors: 28, GISlices: 2, CISlices: 2, Engines: discovery.Engines{Copy: 2, Decoder: 1}},
	"3g.20gb": {Profile: "3g.20gb", MemoryMiB: 19968, Multiprocessors: 42, GISlices: 3, CISlices: 3, Engines: discovery.Engines{Copy: 3, Decoder: 2}},
}

// gpu returns a GPU of a model; product carries the facts of the model.
func gpu(index int, product string) discovery.GPU {
	g := discovery.GPU{
		Index:       index,
		Minor:       index,
		UUID:        fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", index),
		Product:     product,
		Brand:       "Nvidia",
		PCIBusID:    fmt.Sprintf("0000:%02x:00.0", 0x07+index*0x10),
		NUMANode:    index / 4,
		ComputeMode: "Default",
		Mode:        discovery.ModeCompute,
	}
	switch product {
	case "NVIDIA A100-SXM4-40GB":
		g.Architecture, g.Family, g.ComputeMajor, g.ComputeMinor, g.MemoryMiB, g.MIGCapable = "Ampere", "ampere", 8, 0, 40960, true
	case "NVIDIA A100 80GB PCIe":
		g.Architecture, g.Family, g.ComputeMajor, g.ComputeMinor, g.MemoryMiB, g.MIGCapable = "Ampere", "ampere", 8, 0, 81920, true
	case "NVIDIA H100 80GB HBM3":
		g.Architecture, g.Family, g.ComputeMajor, g.ComputeMinor, g.MemoryMiB, g.MIGCapable = "Hopper", "hopper", 9, 0, 81559, true
	case "NVIDIA L40S":
		g.Architecture, g.Family, g.ComputeMajor, g.ComputeMinor, g.MemoryMiB = "Ada Lovelace", "ada-lovelace", 8, 9, 46068
	default:
		panic("unknown test product " + product)
	}
	return g
}

// withMIG enables MIG on g with devices of the given profiles.
func withMIG(g discovery.GPU, profiles ...string) discovery.GPU {
	g.MIGEnabled = true
	for i, p := range profiles {
		m, ok := a100MIGProfiles[p]
		if !ok {
			panic("unknown test profile " + p)
		}
		m.ParentIndex, m.ParentUUID, m.Index = g.Index, g.UUID, i
		m.GPUInstanceID, m.ComputeInstanceID = i+1, 0
		m.UUID = fmt.Sprintf("MIG-%08d-%04d-0000-0000-000000000000", g.Index, i)
		g.MIGDevices = append(g.MIGDevices, m)
	}
	return g
}

func inventory(gpus ...discovery.GPU) *discovery.Inventory {
	return &discovery.Inventory{
		DriverVersion:     "570.86.15",
		CUDADriverVersion: "12.8",
		NVMLVersion:       "12.570.86.15",
		GPUs:              gpus,
	}
}

// a100MixedMIG is a DGX A100 40GB: GPUs 0-3 in MIG mode with the balanced
// layout (2x 1g.5gb, 2g.10gb, 3g.20gb), GPUs 4-7 whole.
func a100MixedMIG() *discovery.Inventory {
	var gpus []discovery.GPU
	for i := range 8 {
		g := gpu(i, "NVIDIA A100-SXM4-40GB")
		if i < 4 {
			g = withMIG(g, "1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb")
		}
		gpus = append(gpus, g)
	}
	return inventory(gpus...)
}

// a100AllMIG is a DGX A100 40GB with every GPU split into seven 1g.5gb.
func a100AllMIG() *discovery.Inventory {
	var gpus []discovery.GPU
	for i := range 8 {
		gpus = append(gpus, withMIG(gpu(i, "NVIDIA A100-SXM4-40GB"), "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"))
	}
	return inventory(gpus...)
}

// h100 is a DGX H100 with MIG disabled.
func h100() *discovery.Inventory {
	var gpus []discovery.GPU
	for i := range 8 {
		gpus = append(gpus, gpu(i, "NVIDIA H100 80GB HBM3"))
	}
	return inventory(gpus...)
}

// heterogeneous has one A100 80GB PCIe (index 0) and two L40S: the L40S is
// the most common model.
func heterogeneous() *discovery.Inventory {
	return inventory(gpu(0, "NVIDIA A100 80GB PCIe"), gpu(1, "NVIDIA L40S"), gpu(2, "NVIDIA L40S"))
}

// planFor builds a Plan the way the rules package would: resources ordered
// by name, devices in inventory order. claim returns the resource name and
// sharing for a device (kind, parent GPU, MIG device or nil), "" for none.
func planFor(inv *discovery.Inventory, claim func(g *discovery.GPU, m *discovery.MIGDevice) (string, plan.Sharing)) *plan.Plan {
	byName := map[string]*plan.Resource{}
	var names []string
	add := func(name string, s plan.Sharing, d plan.Device) {
		r, ok := byName[name]
		if !ok {
			r = &plan.Resource{Name: name, Sharing: s}
			byName[name] = r
			names = append(names, name)
		}
		r.Devices = append(r.Devices, d)
	}
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		if !g.MIGEnabled {
			if name, s := claim(g, nil); name != "" {
				add(name, s, plan.Device{ID: g.UUID, Kind: plan.DeviceGPU, GPUUUID: g.UUID, GPUIndex: g.Index,
					Index: fmt.Sprint(g.Index), NUMANode: g.NUMANode, MemoryMiB: g.MemoryMiB, Rule: "test"})
			}
			continue
		}
		for j := range g.MIGDevices {
			m := &g.MIGDevices[j]
			if name, s := claim(g, m); name != "" {
				add(name, s, plan.Device{ID: m.UUID, Kind: plan.DeviceMIG, GPUUUID: g.UUID, GPUIndex: g.Index,
					Index: fmt.Sprintf("%d:%d", g.Index, m.Index), NUMANode: g.NUMANode, Profile: m.Profile, MemoryMiB: m.MemoryMiB, Rule: "test"})
			}
		}
	}
	plan := &plan.Plan{}
	slices.Sort(names)
	for _, n := range names {
		plan.Resources = append(plan.Resources, *byName[n])
	}
	return plan
}

// mixedPlan serves whole GPUs as nvidia.com/gpu and MIG devices as
// nvidia.com/mig-<profile>, like the built-in "mixed" rules.
func mixedPlan(inv *discovery.Inventory) *plan.Plan {
	p := planFor(inv, func(_ *discovery.GPU, m *discovery.MIGDevice) (string, plan.Sharing) {
		if m != nil {
			return MIGResourcePrefix + m.Profile, plan.Sharing{}
		}
		return GPUResource, plan.Sharing{}
	})
	p.MIGStrategy = MIGStrategyMixed
	return p
}

// singlePlan serves MIG devices as nvidia.com/gpu, like the built-in
// "single" rules.
func singlePlan(inv *discovery.Inventory) *plan.Plan {
	p := planFor(inv, func(_ *discovery.GPU, _ *discovery.MIGDevice) (string, plan.Sharing) {
		return GPUResource, plan.Sharing{}
	})
	p.MIGStrategy = MIGStrategySingle
	return p
}

// sharedPlan serves whole GPUs as nvidia.com/gpu shared with strategy s.
func sharedPlan(inv *discovery.Inventory, s plan.SharingStrategy, replicas int) *plan.Plan {
	return planFor(inv, func(_ *discovery.GPU, m *discovery.MIGDevice) (string, plan.Sharing) {
		if m != nil {
			return "", plan.Sharing{}
		}
		return GPUResource, plan.Sharing{Strategy: s, Replicas: replicas}
	})
}

// perModelPlan names a resource after each model.
func perModelPlan(inv *discovery.Inventory) *plan.Plan {
	return planFor(inv, func(g *discovery.GPU, m *discovery.MIGDevice) (string, plan.Sharing) {
		switch {
		case m != nil:
			return "", plan.Sharing{}
		case g.Product == "NVIDIA L40S":
			return "example.com/l40s", plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 2}
		default:
			return "example.com/a100-80gb", plan.Sharing{}
		}
	})
}
