package fakenode

import "github.com/featureplug/featureplug/discovery/migplace"

// Product describes one GPU model of the fake-node catalog, for tools that
// try something on every device the catalog can make (`featureplug rules
// check` evaluates every rule against every product and MIG profile).
type Product struct {
	// Key is the name fake node files use, e.g. "A100-SXM4-40GB".
	Key string
	// Name is the product name NVML reports, e.g. "NVIDIA A100-SXM4-40GB".
	Name string
	// MIGProfiles are the GPU instance profiles, in catalog order; empty
	// for a product without MIG.
	MIGProfiles []MIGProfile
}

// MIGProfile is one GPU instance profile of a catalog product.
type MIGProfile struct {
	// Name is the canonical profile name, e.g. "1g.10gb+me".
	Name string
	// MaxInstances is the most GPU instances of this profile one GPU can
	// hold (GpuInstanceProfileInfo.InstanceCount).
	MaxInstances int
	// ComputeInstanceSizes are the compute instance sizes, in compute
	// slices, a GPU instance of this profile can hold (the last fills it),
	// as MIGSpec.ComputeInstances takes them.
	ComputeInstanceSizes []int
}

// Products lists the catalog's products, sorted by key.
func Products() []Product {
	cat := newCatalog()
	out := make([]Product, 0, len(cat.products))
	for _, p := range cat.products {
		prod := Product{Key: p.key, Name: p.name}
		for _, m := range p.mig {
			prod.MIGProfiles = append(prod.MIGProfiles, MIGProfile{Name: m.name, MaxInstances: m.max, ComputeInstanceSizes: migplace.ComputeInstanceSizes(m.compute)})
		}
		out = append(out, prod)
	}
	return out
}
