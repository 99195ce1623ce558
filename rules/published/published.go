// Package published rebuilds a node's rule inputs from what featureplug
// published about it: the NFD features of its NodeFeature object. With the
// Node's labels, that is everything a rules file reads, so a plan made from
// the rebuilt inventory is the plan the node's agent makes, decision for
// decision; `featureplug rules explain --node` and `rules diff` use it.
//
// What the features do not carry is said, never guessed:
//
//   - The GPU link matrix (topology) is not published beyond each GPU's
//     NVLink count and NVLink peer count. It never changes which resource a
//     device becomes (rules see only those counts); it only steers
//     allocation. Inventory builds links that give the same counts, and
//     Plan drops them from the plan it returns (Plan.Links stays nil).
//   - GPUs NVML reported lost are not published; rules never see them.
//   - Of a GPU bound to vfio-pci, the drivers of its IOMMU group's other
//     devices are not published (vfio.go).
//   - A published value this featureplug cannot read back, or an
//     attribute it does not know (published by another version), is a Gap:
//     the rebuilt inventory then differs from the node's and Gaps names the
//     feature, instance and attribute.
package published

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/discovery"
)

// TopologyNote says what a plan rebuilt from published features lacks.
const TopologyNote = "GPU links (topology) are not published: the rebuilt plan has no link matrix; " +
	"links steer allocation only, never which resource a device becomes"

// Node is a node's rule inputs rebuilt from its published features.
type Node struct {
	// Inventory is the node's devices as the features describe them. Its
	// Links are synthetic: they give each GPU its published NVLink peer
	// count and nothing more.
	Inventory *discovery.Inventory
	// Gaps say where the published features could not be rebuilt exactly
	// (a value that does not parse, an attribute this version does not
	// know): rules reading those attributes may decide otherwise than on
	// the node. Empty when the rebuilt inventory publishes exactly the
	// features read.
	Gaps []string
}

// Rebuild reads featureplug's features (nvidia.driver, nvidia.capabilities,
// nvidia.gpu, nvidia.mig, nvidia.vfio) back into an Inventory and checks the result by
// converting it to features again (discovery.Features) and comparing with
// f: every difference is a Gap. Features of other sources are ignored. It
// fails when f holds none of featureplug's GPU features.
func Rebuild(f *nfdv1alpha1.Features) (*Node, error) {
	return rebuildWith(&rebuilder{read: map[string]bool{}}, f)
}

// rebuildWith is Rebuild with the rebuilder's state given.
func rebuildWith(r *rebuilder, f *nfdv1alpha1.Features) (*Node, error) {
	if f == nil {
		return nil, fmt.Errorf("no features published")
	}
	gpuSet, ok := f.Instances[discovery.FeatureGPU]
	if !ok {
		return nil, fmt.Errorf("no %s feature published: not a node featureplug describes", discovery.FeatureGPU)
	}
	inv := &discovery.Inventory{}
	drv := attrs{r: r, feature: discovery.FeatureDriver, m: f.Attributes[discovery.FeatureDriver].Elements}
	inv.DriverVersion = drv.str(discovery.AttrDriverVersion)
	inv.CUDADriverVersion = drv.str(discovery.AttrCUDAVersion)
	inv.NVMLVersion = drv.str(discovery.AttrNVMLVersion)

	peers := make([]int, len(gpuSet.Elements))
	byUUID := make(map[string]int, len(gpuSet.Elements))
	inv.GPUs = make([]discovery.GPU, len(gpuSet.Elements))
	for i, e := range gpuSet.Elements {
		a := attrs{r: r, feature: discovery.FeatureGPU, i: i, m: e.Attributes}
		g := &inv.GPUs[i]
		g.Index = a.int(discovery.AttrIndex)
		g.Minor = a.int(discovery.AttrMinor)
		g.UUID = a.str(discovery.AttrUUID)
		g.Product = a.str(discovery.AttrProduct)
		g.Brand = a.str(discovery.AttrBrand)
		g.Family = a.str(discovery.AttrFamily)
		g.Architecture = a.str(discovery.AttrArchitecture)
		g.ComputeMajor = a.int(discovery.AttrComputeMajor)
		g.ComputeMinor = a.int(discovery.AttrComputeMinor)
		g.MemoryMiB = a.uint(discovery.AttrMemory)
		g.MIGCapable = a.bool(discovery.AttrMIGCapable)
		g.MIGEnabled = a.bool(discovery.AttrMIGEnabled)
		g.NUMANode = a.int(discovery.AttrNUMA)
		g.PCIBusID = a.str(discovery.AttrPCIBus)
		g.ComputeMode = a.str(discovery.AttrComputeMode)
		g.Mode = a.str(discovery.AttrMode)
		g.Clique = a.str(discovery.AttrClique)
		g.NVLinks = a.int(discovery.AttrNVLinks)
		peers[i] = a.int(discovery.AttrNVLinkPeers)
		byUUID[g.UUID] = i
	}
	for i, e := range f.Instances[discovery.FeatureMIG].Elements {
		a := attrs{r: r, feature: discovery.FeatureMIG, i: i, m: e.Attributes}
		parent := a.str(discovery.AttrParentUUID)
		gi, ok := byUUID[parent]
		if !ok {
			r.gap("%s instance %d: parent.uuid %q is no published GPU: the MIG device is left out", discovery.FeatureMIG, i, parent)
			continue
		}
		g := &inv.GPUs[gi]
		g.MIGDevices = append(g.MIGDevices, discovery.MIGDevice{
			ParentIndex:       a.int(discovery.AttrParentIndex),
			ParentUUID:        parent,
			Index:             a.int(discovery.AttrIndex),
			GPUInstanceID:     a.int(discovery.AttrGPUInstance),
			ComputeInstanceID: a.int(discovery.AttrComputeInstance),
			UUID:              a.str(discovery.AttrUUID),
			Profile:           a.str(discovery.AttrProfile),
			MemoryMiB:         a.uint(discovery.AttrMemory),
			Multiprocessors:   a.int(discovery.AttrMultiprocessors),
			GISlices:          a.int(discovery.AttrSlicesGI),
			CISlices:          a.int(discovery.AttrSlicesCI),
			Engines: discovery.Engines{
				Copy:    a.int(discovery.AttrEnginesCopy),
				Decoder: a.int(discovery.AttrEnginesDecoder),
				Encoder: a.int(discovery.AttrEnginesEncoder),
				JPEG:    a.int(discovery.AttrEnginesJPEG),
				OFA:     a.int(discovery.AttrEnginesOFA),
			},
		})
	}
	vfio := make([]nfdInstance, 0, len(f.Instances[discovery.FeatureVFIO].Elements))
	for _, e := range f.Instances[discovery.FeatureVFIO].Elements {
		vfio = append(vfio, e.Attributes)
	}
	rebuildVFIO(r, inv, vfio) // vfio.go
	inv.Links = syntheticLinks(inv.GPUs, peers)
	r.compare(f, discovery.Features(inv))
	return &Node{Inventory: inv, Gaps: r.gaps}, nil
}

// syntheticLinks returns a link matrix that gives GPU i (by index) exactly
// peers[i] NVLink peers, the only thing rules read of the topology.
func syntheticLinks(gpus []discovery.GPU, peers []int) discovery.LinkMatrix {
	n := 0
	for _, g := range gpus {
		n = max(n, g.Index+1)
	}
	if n == 0 || n > 1<<10 || !slices.ContainsFunc(peers, func(p int) bool { return p > 0 }) {
		return nil
	}
	m := make(discovery.LinkMatrix, n)
	for i := range m {
		m[i] = make([]discovery.Link, n)
	}
	for i, g := range gpus {
		if g.Index < 0 {
			continue
		}
		lanes := max(g.NVLinks, 1)
		left := peers[i]
		for j := 0; j < n && left > 0; j++ {
			if j != g.Index {
				m[g.Index][j].NVLinks = lanes
				left--
			}
		}
	}
	return m
}

// rebuilder collects the gaps of one Rebuild.
type rebuilder struct {
	gaps []string
	// read holds "<feature>.<attribute>" of every attribute read (for
	// the test that every catalog attribute is read or derived).
	read map[string]bool
}

func (r *rebuilder) gap(format string, args ...any) {
	r.gaps = append(r.gaps, fmt.Sprintf(format, args...))
}

// attrs reads one instance's attributes, recording values that do not
// parse as gaps.
type attrs struct {
	r       *rebuilder
	feature string
	i       int
	m       map[string]string
}

func (a attrs) str(k string) string {
	a.r.read[a.feature+"."+k] = true
	return a.m[k]
}

func (a attrs) int(k string) int {
	a.r.read[a.feature+"."+k] = true
	v, ok := a.m[k]
	if !ok {
		return 0 // a missing attribute shows in the comparison
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		a.r.gap("%s instance %d: attribute %s: %q is not an integer", a.feature, a.i, k, v)
	}
	return n
}

func (a attrs) uint(k string) uint64 {
	a.r.read[a.feature+"."+k] = true
	v, ok := a.m[k]
	if !ok {
		return 0
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		a.r.gap("%s instance %d: attribute %s: %q is not a size in MiB", a.feature, a.i, k, v)
	}
	return n
}

func (a attrs) bool(k string) bool {
	a.r.read[a.feature+"."+k] = true
	return a.m[k] == "true"
}

// compare records every difference between the published features and
// those of the rebuilt inventory, for featureplug's four features.
func (r *rebuilder) compare(published, rebuilt *nfdv1alpha1.Features) {
	for _, name := range []string{discovery.FeatureDriver} {
		r.compareAttrs(name, "", published.Attributes[name].Elements, rebuilt.Attributes[name].Elements)
	}
	for _, name := range []string{discovery.FeatureCapabilities} {
		p, b := published.Flags[name].Elements, rebuilt.Flags[name].Elements
		for _, k := range slices.Sorted(maps.Keys(p)) {
			if _, ok := b[k]; !ok {
				r.gap("%s: flag %s is published but does not follow from the other features", name, k)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(b)) {
			if _, ok := p[k]; !ok {
				r.gap("%s: flag %s is not published but follows from the other features", name, k)
			}
		}
	}
	for _, name := range []string{discovery.FeatureGPU, discovery.FeatureMIG, discovery.FeatureVFIO} {
		p, b := published.Instances[name].Elements, rebuilt.Instances[name].Elements
		if len(p) != len(b) {
			r.gap("%s: %d instances published, %d rebuilt", name, len(p), len(b))
			continue
		}
		for i := range p {
			id := p[i].Attributes[discovery.AttrUUID]
			if name == discovery.FeatureVFIO {
				id = p[i].Attributes[discovery.AttrPCIBus]
			}
			r.compareAttrs(name, fmt.Sprintf(" instance %d (%s)", i, id), p[i].Attributes, b[i].Attributes)
		}
	}
}

func (r *rebuilder) compareAttrs(feature, where string, published, rebuilt map[string]string) {
	if maps.Equal(published, rebuilt) {
		return // the common case, without sorting
	}
	for _, k := range slices.Sorted(maps.Keys(published)) {
		pv := published[k]
		bv, ok := rebuilt[k]
		switch {
		case !ok:
			r.gap("%s%s: attribute %s=%q is not known to this featureplug: rules reading it are evaluated without it", feature, where, k, pv)
		case bv != pv:
			r.gap("%s%s: attribute %s: published %q, rebuilt %q", feature, where, k, pv, bv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(rebuilt)) {
		if _, ok := published[k]; !ok {
			r.gap("%s%s: attribute %s is not published: rules reading it see %q here, which the node may not", feature, where, k, rebuilt[k])
		}
	}
}

// String lists the gaps, one a line.
func (n *Node) String() string { return strings.Join(n.Gaps, "\n") }
