// Package catalog tries rules files on every device featureplug's fake-node
// catalog can make, so that `featureplug rules check` finds at check time
// what would otherwise only fail on a real node: a resource template that
// gives an invalid name for some product or MIG profile, or a rule that
// would advertise more device IDs than the caps allow.
//
// The nodes are every bundled fake node (discovery/fakenode) as it is, and,
// per catalog product, synthetic nodes holding one whole GPU and one GPU per
// MIG profile (+me profiles included) and compute instance size; for the
// caps, these stand for the largest node of the product (fakenode.MaxGPUs
// GPUs, each with as many MIG devices of a kind as one GPU holds). One more
// synthetic node has a GPU of every product bound to vfio-pci.
package catalog

import (
	"fmt"
	"os"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"sigs.k8s.io/yaml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/rules"
)

// maxGPUsPerNode is how many GPUs one synthetic node holds, and how many
// the largest node of a product holds: the most a fake node may have, as
// many as the largest real nodes.
const maxGPUsPerNode = fakenode.MaxGPUs

// Fake node facts of the synthetic nodes.
const (
	syntheticDriver = "570.86.15"
	syntheticCUDA   = "12.8"
)

// Nodes returns the nodes rules are checked on: every bundled fake node,
// then the synthetic nodes of every catalog product, each standing for the
// largest node of its product (maxGPUsPerNode GPUs) for the caps.
func Nodes() ([]rules.CheckNode, error) {
	var out []rules.CheckNode
	for _, name := range fakenode.BundledNames() {
		node, err := fakenode.Named(name)
		if err != nil {
			return nil, fmt.Errorf("bundled fake node %s: %w", name, err)
		}
		inv, err := discover(node)
		if err != nil {
			return nil, fmt.Errorf("bundled fake node %s: %w", name, err)
		}
		out = append(out, rules.CheckNode{Name: "fake node " + name, Inventory: inv})
	}
	for _, p := range fakenode.Products() {
		specs, instances := productSpecs(p)
		for i, spec := range specs {
			data, err := yaml.Marshal(spec)
			if err != nil {
				return nil, fmt.Errorf("catalog product %s: %w", p.Key, err)
			}
			node, err := fakenode.Parse(spec.Name, data)
			if err != nil {
				return nil, fmt.Errorf("catalog product %s: %w", p.Key, err)
			}
			inv, err := discover(node)
			if err != nil {
				return nil, fmt.Errorf("catalog product %s: %w", p.Key, err)
			}
			name := "catalog product " + p.Key
			if len(specs) > 1 {
				name += fmt.Sprintf(" (node %d of %d)", i+1, len(specs))
			}
			out = append(out, rules.CheckNode{Name: name, Inventory: inv, Synthetic: true,
				Largest: &rules.LargestNode{GPUs: maxGPUsPerNode, PerGPU: perGPU(inv, instances[i])}})
		}
	}
	vfio, err := vfioNode()
	if err != nil {
		return nil, err
	}
	return append(out, vfio), nil
}

// vfioNode is the synthetic node with one GPU of every catalog product
// bound to vfio-pci.
func vfioNode() (rules.CheckNode, error) {
	products := fakenode.Products()
	spec := fakenode.Spec{Name: "catalog-vfio", DriverVersion: syntheticDriver, CUDAVersion: syntheticCUDA,
		GPUs: []fakenode.GPUSpec{{Product: products[0].Key}}}
	for _, p := range products {
		spec.VFIO = append(spec.VFIO, fakenode.VFIOSpec{Product: p.Key})
	}
	data, err := yaml.Marshal(spec)
	if err != nil {
		return rules.CheckNode{}, fmt.Errorf("catalog products on vfio-pci: %w", err)
	}
	node, err := fakenode.Parse(spec.Name, data)
	if err != nil {
		return rules.CheckNode{}, fmt.Errorf("catalog products on vfio-pci: %w", err)
	}
	inv, err := discover(node)
	if err != nil {
		return rules.CheckNode{}, fmt.Errorf("catalog products on vfio-pci: %w", err)
	}
	return rules.CheckNode{Name: "catalog products on vfio-pci", Inventory: inv, Synthetic: true}, nil
}

// Check tries a rule set on every node of Nodes (see rules.CheckNodes).
func Check(rs *rules.RuleSet) error {
	nodes, err := Nodes()
	if err != nil {
		return err
	}
	return rs.CheckNodes(nodes)
}

// discover reads a fake node's inventory: its GPUs bound to vfio-pci too,
// from the sysfs tree it lays out in a temporary directory.
func discover(node *fakenode.Node) (*discovery.Inventory, error) {
	lib := node.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("initializing fake NVML: %s", ret.Error())
	}
	defer func() { _ = lib.Shutdown() }()
	inv, err := discovery.Discover(lib)
	if err != nil {
		return nil, err
	}
	if err := discovery.ReadMIGGeometry(lib, inv); err != nil {
		return nil, err
	}
	if node.VFIOCount() == 0 {
		return inv, nil
	}
	dir, err := os.MkdirTemp("", "featureplug-catalog-sysfs-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := node.WriteSysfs(dir); err != nil {
		return nil, err
	}
	if inv.VFIO, err = discovery.DiscoverVFIO(dir); err != nil {
		return nil, err
	}
	return inv, nil
}

// productSpecs returns the synthetic fake nodes of one product: a whole GPU
// (MIG disabled), then, for a MIG-capable product, one GPU per MIG profile
// and compute instance size, at most maxGPUsPerNode GPUs a node; and, per
// node and GPU, the most GPU instances of the GPU's profile one GPU holds
// (1 for the whole GPU).
func productSpecs(p fakenode.Product) ([]fakenode.Spec, [][]int) {
	gpus := []fakenode.GPUSpec{{Product: p.Key}}
	instances := []int{1}
	for _, prof := range p.MIGProfiles {
		for _, size := range prof.ComputeInstanceSizes {
			gpus = append(gpus, fakenode.GPUSpec{Product: p.Key, MIG: []fakenode.MIGSpec{{Profile: prof.Name, ComputeInstances: []int{size}}}})
			instances = append(instances, prof.MaxInstances)
		}
	}
	var out []fakenode.Spec
	var outInstances [][]int
	for len(gpus) > 0 {
		n := min(len(gpus), maxGPUsPerNode)
		out = append(out, fakenode.Spec{
			Name:          fmt.Sprintf("catalog-%s-%d", strings.ToLower(p.Key), len(out)),
			DriverVersion: syntheticDriver,
			CUDAVersion:   syntheticCUDA,
			GPUs:          gpus[:n],
		})
		outInstances = append(outInstances, instances[:n])
		gpus, instances = gpus[n:], instances[n:]
	}
	return out, outInstances
}

// perGPU returns, per MIG device of a synthetic node, how many MIG devices
// like it one GPU holds: the most GPU instances of its profile, times the
// compute instances of its size one of them holds. instances is
// productSpecs' count per GPU of the node.
func perGPU(inv *discovery.Inventory, instances []int) map[string]int {
	out := make(map[string]int)
	for gi, g := range inv.GPUs {
		for _, d := range g.MIGDevices {
			cis := 1
			if d.CISlices > 0 && d.GISlices >= d.CISlices {
				cis = d.GISlices / d.CISlices
			}
			out[d.UUID] = max(1, instances[gi]*cis)
		}
	}
	return out
}
