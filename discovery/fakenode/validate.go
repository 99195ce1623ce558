package fakenode

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/featureplug/featureplug/discovery/migplace"
)

// MaxGPUs is the most GPUs one fake node may have: as many as the largest
// real nodes hold.
const MaxGPUs = 16

// Limits of a fake node file.
const (
	// maxNUMANode is the highest NUMA node a GPU may sit on.
	maxNUMANode = 63
	// maxECCCount bounds health.volatileDoubleBitErrors.
	maxECCCount = 1 << 20
)

var (
	driverVersionRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+){1,3}$`)
	cudaVersionRE   = regexp.MustCompile(`^([0-9]+)\.([0-9]{1,2})$`)
)

// pcieLevels are the PCIe level names a pcie group may use, nearest first.
func pcieLevels() []string { return []string{"PIX", "PXB", "PHB", "NODE", "SYS"} }

// layout is a validated Spec with counts expanded and MIG placements chosen.
type layout struct {
	name          string
	driverVersion string
	cudaVersion   int // e.g. 12080
	cudaMajor     int
	gpus          []gpuLayout
	nvlink        []NVLinkSpec
	pcie          []PCIeSpec
	vfio          []vfioLayout // vfio.go
}

// gpuLayout is one GPU of a layout.
type gpuLayout struct {
	product    *product
	numa       int // -1: not reported
	migEnabled bool
	gis        []giLayout
	health     HealthSpec
	extra      gpuExtra // mode and fabric (mode.go)
}

// giLayout is one GPU instance of a layout, with its placement chosen.
type giLayout struct {
	profile *migProfile
	start   int
	cis     []int // compute instance sizes in compute slices
}

// validator collects the problems of one file.
type validator struct {
	source string
	cat    *catalog
	errs   []error
}

func (v *validator) fail(field, format string, args ...any) {
	v.errs = append(v.errs, &SpecError{Source: v.source, Field: field, Problem: fmt.Sprintf(format, args...)})
}

// validate checks a decoded Spec and turns it into a layout. It reports
// every problem it finds, each naming the file, field path and value.
func validate(source string, spec *Spec, cat *catalog) (*layout, error) {
	v := &validator{source: source, cat: cat}
	l := &layout{name: spec.Name, driverVersion: spec.DriverVersion, nvlink: spec.NVLink, pcie: spec.PCIe}

	if spec.Name == "" {
		v.fail("name", "is required")
	} else if errs := validation.IsDNS1123Subdomain(spec.Name); len(errs) > 0 {
		v.fail("name", "%q is not a valid node name: %s", spec.Name, strings.Join(errs, "; "))
	}
	if spec.DriverVersion == "" {
		v.fail("driverVersion", "is required, e.g. \"570.86.15\"")
	} else if !driverVersionRE.MatchString(spec.DriverVersion) {
		v.fail("driverVersion", "%q is not a driver version like \"570.86.15\"", spec.DriverVersion)
	}
	if spec.CUDAVersion == "" {
		v.fail("cudaVersion", "is required, e.g. \"12.8\"")
	} else if m := cudaVersionRE.FindStringSubmatch(spec.CUDAVersion); m == nil {
		v.fail("cudaVersion", "%q is not a CUDA version like \"12.8\"", spec.CUDAVersion)
	} else {
		major, _ := strconv.Atoi(m[1])
		minor, _ := strconv.Atoi(m[2])
		l.cudaMajor, l.cudaVersion = major, major*1000+minor*10
	}

	if len(spec.GPUs) == 0 {
		v.fail("gpus", "at least one GPU is required")
	}
	for i := range spec.GPUs {
		l.gpus = append(l.gpus, v.gpuEntry(i, &spec.GPUs[i], len(l.gpus))...)
	}
	l.vfio = v.vfioEntries(spec.VFIO, len(l.gpus)) // vfio.go
	if len(l.gpus) > MaxGPUs {
		v.fail("gpus", "%d GPUs; a node may have at most %d", len(l.gpus), MaxGPUs)
	} else if n := len(l.gpus) + len(l.vfio); n > MaxGPUs {
		v.fail("vfio", "%d GPUs with those of gpus; a node may have at most %d", n, MaxGPUs)
	}
	if len(v.errs) == 0 {
		v.nvlink(spec.NVLink, l.gpus)
		v.pcie(spec.PCIe, len(l.gpus))
	}
	if len(v.errs) > 0 {
		return nil, errors.Join(v.errs...)
	}
	return l, nil
}

// gpuEntry validates gpus[i] and returns the GPUs it stands for; first is
// the index of the first of them.
func (v *validator) gpuEntry(i int, g *GPUSpec, first int) []gpuLayout {
	path := fmt.Sprintf("gpus[%d]", i)
	before := len(v.errs)
	count, numa := v.countAndNUMA(path, g.Count, g.NUMA)
	p, ok := v.cat.product(g.Product)
	if g.Product == "" {
		v.fail(path+".product", "is required (known products: %s)", strings.Join(v.cat.keys(), ", "))
	} else if !ok {
		v.fail(path+".product", "%q is not a known product (known products: %s)", g.Product, strings.Join(v.cat.keys(), ", "))
	}
	if p == nil {
		return nil
	}
	var gis []giLayout
	if g.MIGEnabled {
		if !p.migCapable() {
			v.fail(path+".mig", "%s does not support MIG; remove the mig key", p.key)
		} else {
			gis = v.migLayout(path, g.MIG, p, first, count)
		}
	}
	var health HealthSpec
	if g.Health != nil {
		health = v.health(path+".health", g.Health, p)
	}
	extra := v.extra(path, g)
	if len(v.errs) > before {
		return nil
	}
	out := make([]gpuLayout, count)
	for k := range out {
		out[k] = gpuLayout{product: p, numa: numa, migEnabled: g.MIGEnabled, gis: gis, health: health, extra: extra}
	}
	return out
}

// countAndNUMA validates an entry's count and numa keys and returns them
// with their defaults (1 and node 0).
func (v *validator) countAndNUMA(path string, countKey, numaKey *int) (count, numa int) {
	count = 1
	if countKey != nil {
		count = *countKey
		if count < 1 || count > MaxGPUs {
			v.fail(path+".count", "%d is out of range (1-%d)", count, MaxGPUs)
		}
	}
	if numaKey != nil {
		numa = *numaKey
		if numa < -1 || numa > maxNUMANode {
			v.fail(path+".numa", "%d is out of range (-1 for none, 0-%d)", numa, maxNUMANode)
		}
	}
	return count, numa
}

// health validates a GPU's failure evidence against what its product's
// memory supports.
func (v *validator) health(path string, h *HealthSpec, p *product) HealthSpec {
	if h.RetiredPagesPending && p.memoryErrors != pageRetirement {
		v.fail(path+".retiredPagesPending", "%s retires no pages (it remaps rows); use rowRemapPending", p.key)
	}
	if p.memoryErrors != rowRemapping {
		if h.RowRemapPending {
			v.fail(path+".rowRemapPending", "%s remaps no rows (it retires pages); use retiredPagesPending", p.key)
		}
		if h.RowRemapFailed {
			v.fail(path+".rowRemapFailed", "%s remaps no rows (it retires pages)", p.key)
		}
	}
	if n := h.VolatileDoubleBitErrors; n != nil && (*n < 0 || *n > maxECCCount) {
		v.fail(path+".volatileDoubleBitErrors", "%d is out of range (0-%d)", *n, maxECCCount)
	}
	if _, ok := recoveryActionByName(h.RecoveryAction); !ok {
		v.fail(path+".recoveryAction", "%q is not a recovery action (have %s)", h.RecoveryAction, strings.Join(recoveryActionNames[:], ", "))
	}
	return *h
}

// giRequest is one GPU instance a MIG layout asks for.
type giRequest struct {
	entry   int // index in the mig list
	profile *migProfile
	start   int // -1: any
	cis     []int
}

// migLayout validates the MIG layout of gpus[i] (path) on product p and
// chooses placements. first and count name the GPUs in messages.
func (v *validator) migLayout(path string, specs []MIGSpec, p *product, first, count int) []giLayout {
	gpuName := fmt.Sprintf("GPU %d (%s)", first, p.key)
	if count > 1 {
		gpuName = fmt.Sprintf("GPUs %d-%d (%s)", first, first+count-1, p.key)
	}
	before := len(v.errs)
	var reqs []giRequest
	perProfile := map[*migProfile]int{}
	slicesUsed := 0
	for j, m := range specs {
		mpath := fmt.Sprintf("%s.mig[%d]", path, j)
		if m.Profile == "" {
			v.fail(mpath+".profile", "is required (profiles of %s: %s)", p.key, strings.Join(p.profileNames(), ", "))
			continue
		}
		prof, ok := p.profileByName(m.Profile)
		if !ok {
			v.fail(mpath+".profile", "%q is not a MIG profile of %s (have %s)", m.Profile, p.key, strings.Join(p.profileNames(), ", "))
			continue
		}
		n := 1
		if m.Count != nil {
			n = *m.Count
			if n < 1 || n > computeSlices {
				v.fail(mpath+".count", "%d is out of range (1-%d)", n, computeSlices)
				continue
			}
		}
		start := -1
		if m.Placement != nil {
			start = *m.Placement
			if !slices.Contains(prof.starts, start) {
				v.fail(mpath+".placement", "%d is not a placement of %s (it starts at memory slice %s)", start, prof.name, orList(prof.starts))
				continue
			}
			if n > 1 {
				v.fail(mpath+".placement", "a fixed placement needs count 1, not %d", n)
				continue
			}
		}
		cis, ok := v.computeInstances(mpath, m.ComputeInstances, prof)
		if !ok {
			continue
		}
		perProfile[prof] += n
		if perProfile[prof] > prof.max {
			v.fail(mpath, "%s: %d instances of %s, a GPU holds at most %d", gpuName, perProfile[prof], prof.name, prof.max)
			continue
		}
		slicesUsed += n * prof.compute
		for range n {
			reqs = append(reqs, giRequest{entry: j, profile: prof, start: start, cis: cis})
		}
	}
	if len(v.errs) > before {
		return nil
	}
	if slicesUsed > computeSlices {
		v.fail(path+".mig", "%s: the layout needs %d compute slices, a GPU has %d", gpuName, slicesUsed, computeSlices)
		return nil
	}
	starts, err := place(reqs)
	if err != nil {
		var pe *placementError
		if errors.As(err, &pe) {
			v.fail(fmt.Sprintf("%s.mig[%d]", path, pe.req.entry), "%s: %s", gpuName, pe.problem)
		}
		return nil
	}
	out := make([]giLayout, len(reqs))
	for k, r := range reqs {
		out[k] = giLayout{profile: r.profile, start: starts[k], cis: r.cis}
	}
	slices.SortStableFunc(out, func(a, b giLayout) int { return a.start - b.start })
	return out
}

// computeInstances validates the compute instance sizes of one GPU
// instance; none means one that fills it.
func (v *validator) computeInstances(mpath string, sizes []int, prof *migProfile) ([]int, bool) {
	if len(sizes) == 0 {
		return []int{prof.compute}, true
	}
	total := 0
	for k, c := range sizes {
		if !migplace.ComputeInstanceFits(c, prof.compute) {
			v.fail(fmt.Sprintf("%s.computeInstances[%d]", mpath, k), "%d is not a compute instance size of %s (have %s)", c, prof.name, orList(migplace.ComputeInstanceSizes(prof.compute)))
			return nil, false
		}
		total += c
	}
	if total > prof.compute {
		v.fail(mpath+".computeInstances", "%v need %d compute slices, %s has %d", sizes, total, prof.name, prof.compute)
		return nil, false
	}
	return slices.Clone(sizes), true
}

// placementError says which GPU instance of a layout found no room.
type placementError struct {
	req     giRequest
	problem string
}

func (e *placementError) Error() string { return e.problem }

// place chooses a start for every request, as NVML would accept them:
// fixed placements first, then the others largest first, searching all
// combinations so that any layout the hardware can hold is found.
func place(reqs []giRequest) ([]int, error) {
	starts := make([]int, len(reqs))
	var used uint
	for k, r := range reqs {
		if r.start < 0 {
			continue
		}
		mask := slotMask(r.start, r.profile.size)
		if used&mask != 0 {
			o := reqs[slices.IndexFunc(reqs[:k], func(o giRequest) bool {
				return o.start >= 0 && slotMask(o.start, o.profile.size)&mask != 0
			})]
			return nil, &placementError{req: r, problem: fmt.Sprintf("%s at memory slice %d overlaps %s at memory slice %d (mig[%d])",
				r.profile.name, r.start, o.profile.name, o.start, o.entry)}
		}
		used |= mask
		starts[k] = r.start
	}
	var free []int
	for k, r := range reqs {
		if r.start < 0 {
			free = append(free, k)
		}
	}
	slices.SortStableFunc(free, func(a, b int) int { return reqs[b].profile.size - reqs[a].profile.size })
	if search(reqs, free, starts, used) {
		return starts, nil
	}
	// Name the instance a first-fit pass cannot place: the search failing
	// means first fit fails too.
	for _, k := range free {
		r := reqs[k]
		s, ok := firstFit(r.profile, used)
		if !ok {
			return nil, &placementError{req: r, problem: fmt.Sprintf("no free placement for %s (it starts at memory slice %s) next to the rest of the layout", r.profile.name, orList(r.profile.starts))}
		}
		used |= slotMask(s, r.profile.size)
	}
	return nil, &placementError{req: reqs[free[len(free)-1]], problem: "the layout does not fit"}
}

// search assigns starts to reqs[free...] by backtracking.
func search(reqs []giRequest, free []int, starts []int, used uint) bool {
	if len(free) == 0 {
		return true
	}
	k := free[0]
	p := reqs[k].profile
	for _, s := range p.starts {
		mask := slotMask(s, p.size)
		if used&mask != 0 {
			continue
		}
		starts[k] = s
		if search(reqs, free[1:], starts, used|mask) {
			return true
		}
	}
	return false
}

// firstFit returns the lowest free start for profile p.
func firstFit(p *migProfile, used uint) (int, bool) {
	for _, s := range p.starts {
		if used&slotMask(s, p.size) == 0 {
			return s, true
		}
	}
	return 0, false
}

// slotMask is the bit mask of the memory slices [start, start+size).
func slotMask(start, size int) uint {
	return ((uint(1) << size) - 1) << start
}

// nvlink validates the NVLink groups against the GPUs' lanes.
func (v *validator) nvlink(groups []NVLinkSpec, gpus []gpuLayout) {
	lanes := make([]int, len(gpus))
	fabric := -1 // the nvswitch group, if any
	for i, g := range groups {
		path := fmt.Sprintf("nvlink[%d]", i)
		if g.NVSwitch {
			if fabric >= 0 {
				v.fail(path+".nvswitch", "nvlink[%d] already connects GPUs through NVSwitches; a node has one NVSwitch fabric (as every HGX/DGX baseboard): list all its GPUs in one group", fabric)
				continue
			}
			fabric = i
		}
		if !v.indexes(path+".gpus", g.GPUs, len(gpus)) {
			continue
		}
		if g.Links < 1 {
			v.fail(path+".links", "%d: a group needs at least 1 lane per pair", g.Links)
			continue
		}
		for k, idx := range g.GPUs {
			p := gpus[idx].product
			if p.nvlinkLanes == 0 {
				v.fail(fmt.Sprintf("%s.gpus[%d]", path, k), "GPU %d (%s) has no NVLink", idx, p.key)
				continue
			}
			if g.NVSwitch && p != gpus[g.GPUs[0]].product {
				v.fail(fmt.Sprintf("%s.gpus[%d]", path, k), "GPU %d (%s) differs from GPU %d (%s); an NVSwitch group needs one product", idx, p.key, g.GPUs[0], gpus[g.GPUs[0]].product.key)
				continue
			}
			need := g.Links
			if !g.NVSwitch {
				need = g.Links * (len(g.GPUs) - 1)
			}
			lanes[idx] += need
			if lanes[idx] > p.nvlinkLanes {
				hint := ""
				if !g.NVSwitch {
					hint = "; set nvswitch: true for GPUs connected through NVSwitches"
				}
				v.fail(path, "GPU %d (%s) would need %d NVLink lanes, it has %d%s", idx, p.key, lanes[idx], p.nvlinkLanes, hint)
				break
			}
		}
	}
}

// pcie validates the PCIe groups.
func (v *validator) pcie(groups []PCIeSpec, n int) {
	for i, g := range groups {
		path := fmt.Sprintf("pcie[%d]", i)
		v.indexes(path+".gpus", g.GPUs, n)
		if !slices.Contains(pcieLevels(), g.Level) {
			v.fail(path+".level", "%q is not a PCIe level (have %s)", g.Level, strings.Join(pcieLevels(), ", "))
		}
	}
}

// indexes checks a group's GPU indexes: at least two, existing, distinct.
func (v *validator) indexes(path string, idx []int, n int) bool {
	ok := true
	if len(idx) < 2 {
		v.fail(path, "a group needs at least 2 GPUs, not %d", len(idx))
		ok = false
	}
	seen := map[int]bool{}
	for k, i := range idx {
		switch {
		case i < 0 || i >= n:
			v.fail(fmt.Sprintf("%s[%d]", path, k), "GPU %d does not exist (the node has %d GPUs, 0-%d)", i, n, n-1)
			ok = false
		case seen[i]:
			v.fail(fmt.Sprintf("%s[%d]", path, k), "GPU %d is listed twice", i)
			ok = false
		}
		seen[i] = true
	}
	return ok
}

// orList formats numbers as "0, 2 or 4".
func orList(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}
