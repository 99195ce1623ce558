package labeler

import (
	"strconv"
	"strings"
	"time"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// Node-level label keys, with gpu-feature-discovery's names.
const (
	// LabelGPUPresent is "true" on every node with at least one GPU.
	LabelGPUPresent = "nvidia.com/gpu.present"
	// LabelTimestamp is the Unix time the labels were computed; only set
	// when LabelOptions.Timestamp asks for it (it makes every write a change).
	LabelTimestamp = "nvidia.com/gfd.timestamp"
	// LabelMachine is the machine type (DMI product name, see MachineType).
	LabelMachine = "nvidia.com/gpu.machine"
	// LabelMIGCapable is "true" when any GPU supports MIG.
	LabelMIGCapable = "nvidia.com/mig.capable"
	// LabelMIGStrategy is single or mixed: the Plan's MIG strategy (the
	// one the rules amount to), absent for none, as gpu-feature-discovery
	// labels its configured strategy.
	LabelMIGStrategy = "nvidia.com/mig.strategy"
	// LabelGPUMode is compute or graphics: the GPUs' PCI class (3D
	// controller or VGA controller), unknown when they differ or NVML
	// cannot tell, as gpu-feature-discovery labels it.
	LabelGPUMode = "nvidia.com/gpu.mode"
	// LabelGPUClique is "<IMEX cluster UUID>.<clique ID>" of the node's
	// fabric-attached GPUs (NVLink multi-node, e.g. GB200 NVL72), absent
	// when none is attached or they disagree.
	LabelGPUClique = "nvidia.com/gpu.clique"
	// LabelMPSCapable is "true" when the Plan shares a resource with MPS and
	// no GPU has MIG enabled.
	LabelMPSCapable = "nvidia.com/mps.capable"

	// LabelDriverMajor, LabelDriverMinor, LabelDriverRevision and
	// LabelDriverFull are the kernel driver version (e.g. 570, 86, 15 and
	// 570.86.15).
	LabelDriverMajor    = "nvidia.com/cuda.driver-version.major"
	LabelDriverMinor    = "nvidia.com/cuda.driver-version.minor"
	LabelDriverRevision = "nvidia.com/cuda.driver-version.revision"
	LabelDriverFull     = "nvidia.com/cuda.driver-version.full"
	// LabelRuntimeMajor, LabelRuntimeMinor and LabelRuntimeFull are the CUDA
	// version the driver supports (e.g. 12, 8 and 12.8).
	LabelRuntimeMajor = "nvidia.com/cuda.runtime-version.major"
	LabelRuntimeMinor = "nvidia.com/cuda.runtime-version.minor"
	LabelRuntimeFull  = "nvidia.com/cuda.runtime-version.full"

	// LabelDeprecatedDriverMajor and the four labels below are the older
	// names gpu-feature-discovery still writes next to the ones above;
	// LabelOptions.OmitDeprecated leaves them out.
	LabelDeprecatedDriverMajor  = "nvidia.com/cuda.driver.major"
	LabelDeprecatedDriverMinor  = "nvidia.com/cuda.driver.minor"
	LabelDeprecatedDriverRev    = "nvidia.com/cuda.driver.rev"
	LabelDeprecatedRuntimeMajor = "nvidia.com/cuda.runtime.major"
	LabelDeprecatedRuntimeMinor = "nvidia.com/cuda.runtime.minor"
)

// GPUResource is the resource whose labels (nvidia.com/gpu.product,
// nvidia.com/gpu.count, ...) double as the node's GPU model labels.
const GPUResource = "nvidia.com/gpu"

// MIGResourcePrefix starts the names of per-profile MIG resources
// (nvidia.com/mig-1g.10gb); MIG devices served under such names make the
// MIG strategy "mixed".
const MIGResourcePrefix = "nvidia.com/mig-"

// Suffixes of the per-resource labels <resource name>.<suffix>, e.g.
// nvidia.com/gpu.count or nvidia.com/mig-1g.10gb.memory.
const (
	SuffixProduct         = "product"
	SuffixCount           = "count"
	SuffixMemory          = "memory"
	SuffixFamily          = "family"
	SuffixComputeMajor    = "compute.major"
	SuffixComputeMinor    = "compute.minor"
	SuffixReplicas        = "replicas"
	SuffixSharingStrategy = "sharing-strategy"
	SuffixMultiprocessors = "multiprocessors"
	SuffixSlicesGI        = "slices.gi"
	SuffixSlicesCI        = "slices.ci"
	SuffixEnginesCopy     = "engines.copy"
	SuffixEnginesDecoder  = "engines.decoder"
	SuffixEnginesEncoder  = "engines.encoder"
	SuffixEnginesJPEG     = "engines.jpeg"
	SuffixEnginesOFA      = "engines.ofa"
)

// Values of LabelMIGStrategy.
const (
	MIGStrategyNone   = plan.MIGStrategyNone
	MIGStrategySingle = plan.MIGStrategySingle
	MIGStrategyMixed  = plan.MIGStrategyMixed
)

// sharedSuffix is appended to the product label of a resource whose devices
// are shared by more than one container, as gpu-feature-discovery does.
const sharedSuffix = "SHARED"

// invalidSuffix ends the product label of a node the single strategy
// refuses: <product>-MIG-INVALID, gpu-feature-discovery's value.
const invalidSuffix = "INVALID"

// renamedSuffix ends the names NVIDIA's renameByDefault gives shared
// resources (nvidia.com/gpu.shared, nvidia.com/mig-1g.10gb.shared).
const renamedSuffix = ".shared"

// MachineUnknown is the nvidia.com/gpu.machine value when the machine type
// cannot be read, gpu-feature-discovery's.
const MachineUnknown = "unknown"

// Values of LabelGPUMode.
const (
	GPUModeCompute  = "compute"
	GPUModeGraphics = "graphics"
	GPUModeUnknown  = "unknown"
)

// LabelOptions tunes Labels. The zero value gives gpu-feature-discovery's
// default label set without a timestamp.
type LabelOptions struct {
	// Timestamp, when not zero, adds LabelTimestamp with its Unix seconds.
	// Leave it zero in agents that publish on change: a timestamp makes
	// every publish a write.
	Timestamp time.Time
	// Machine is published as LabelMachine (sanitized); empty publishes
	// MachineUnknown, as gpu-feature-discovery does without a DMI file.
	Machine string
	// OmitDeprecated leaves out the deprecated cuda.driver.* and
	// cuda.runtime.* labels.
	OmitDeprecated bool
	// OnDropped, when set, is called for every label that Labels leaves out
	// because its key is not a valid label key (e.g. a long resource name
	// plus a suffix exceeds 63 characters). Labels are never truncated.
	OnDropped func(key, reason string)
}

// Labels computes the node labels for an Inventory and, when plan is not
// nil, for the resources the Plan serves. It is a pure function: the same
// input gives the same map. A node without GPUs gets no labels at all, so
// publishing the result removes stale ones; a node whose GPUs are all bound
// to vfio-pci gets only featureplug.io/vfio.count and vfio.product
// (vfio.go), which any node with VFIO GPUs gets. Names, values and presence
// follow gpu-feature-discovery v0.20 (see README.md and golden_test.go for
// where each comes from).
//
// Node facts (always, from the Inventory):
//   - nvidia.com/gpu.present, mig.capable, mps.capable, gpu.mode,
//     gpu.machine, gpu.clique (fabric-attached GPUs only), the driver and
//     CUDA version labels;
//   - nvidia.com/gpu.product, gpu.count, gpu.memory, gpu.family,
//     gpu.compute.major and gpu.compute.minor describe the node's GPU model.
//     On a node with several models this is the most common model (ties go
//     to the model of the lowest GPU index), and gpu.count counts the GPUs of
//     that model, as gpu-feature-discovery counts per model. The features
//     (nvidia.gpu instances) carry every GPU.
//
// With a Plan (a nil Plan means no rules yet):
//   - nvidia.com/mig.strategy: the Plan's MIG strategy, single or mixed;
//     absent for none.
//   - nvidia.com/gpu.replicas and gpu.sharing-strategy describe how the
//     node model's whole GPUs are shared, whatever resource serves them (a
//     renamed resource such as nvidia.com/gpu.shared counts, as with
//     NVIDIA's renameByDefault); gpu.product gets -SHARED when they are
//     shared under nvidia.com/gpu itself. They are 0 and none when the
//     model's GPUs are all in MIG mode, and absent when its whole GPUs are
//     not served at all.
//   - single: when nvidia.com/gpu serves MIG devices, gpu.product,
//     gpu.count and gpu.memory describe them
//     (NVIDIA-A100-SXM4-40GB-MIG-1g.5gb, the number of MIG devices, their
//     memory) and the MIG attribute labels (gpu.multiprocessors,
//     gpu.slices.gi, ...) are added; on a node the strategy refuses
//     (Plan.SingleInvalid) gpu.product is <product>-MIG-INVALID and
//     gpu.count, gpu.replicas and gpu.memory are 0.
//   - mixed: every served MIG profile P gets nvidia.com/mig-P.product,
//     .count, .replicas, .sharing-strategy and the MIG attribute labels,
//     whatever resource serves it ('+' in P becomes '.').
//   - every other resource R (not nvidia.com/gpu, not nvidia.com/mig-*,
//     not a renameByDefault name <those>.shared) gets R.product, R.count
//     (devices, not replicas), R.replicas, R.sharing-strategy and, for
//     whole GPUs, R.memory, R.family, R.compute.major/minor, or, for MIG
//     devices, the MIG attribute labels. A resource whose devices differ
//     (models or profiles) is described by its most common kind of device,
//     ties going to the first in Plan order.
//
// Values are made valid label values (see SanitizeValue); keys that are not
// valid label keys are left out (see LabelOptions.OnDropped).
func Labels(inv *discovery.Inventory, p *plan.Plan, opts LabelOptions) map[string]string {
	l := labelSet{m: make(map[string]string), onDropped: opts.OnDropped}
	if inv == nil {
		return l.m
	}
	l.vfioLabels(inv) // vfio.go
	if len(inv.GPUs) == 0 {
		return l.m
	}

	l.set(LabelGPUPresent, "true")
	l.versions(inv, opts.OmitDeprecated)
	l.set(LabelMIGCapable, strconv.FormatBool(anyGPU(inv, func(g *discovery.GPU) bool { return g.MIGCapable })))
	l.set(LabelMPSCapable, strconv.FormatBool(mpsCapable(inv, p)))
	l.set(LabelGPUMode, gpuMode(inv))
	if clique := gpuClique(inv); clique != "" {
		l.set(LabelGPUClique, clique)
	}
	machine := SanitizeValue(opts.Machine)
	if machine == "" {
		machine = MachineUnknown
	}
	l.set(LabelMachine, machine)
	if !opts.Timestamp.IsZero() {
		l.set(LabelTimestamp, strconv.FormatInt(opts.Timestamp.Unix(), 10))
	}

	model, count := nodeModel(inv)
	l.gpuLabels(GPUResource, model, count)

	if p == nil {
		return l.m
	}
	if p.MIGStrategy == MIGStrategySingle || p.MIGStrategy == MIGStrategyMixed {
		l.set(LabelMIGStrategy, p.MIGStrategy)
	}
	idx := newDeviceIndex(inv)
	l.nodeSharing(inv, idx, model, p)
	if p.MIGStrategy == MIGStrategyMixed {
		l.migProfiles(idx, p)
	}
	for i := range p.Resources {
		r := &p.Resources[i]
		if r.Name == GPUResource || !gfdName(r.Name) {
			l.resource(idx, r)
		}
	}
	if p.SingleInvalid != "" {
		l.singleInvalid(inv)
	}
	return l.m
}

// gfdName reports whether gpu-feature-discovery labels the resource under
// a name of its own rather than under the resource's: nvidia.com/gpu,
// nvidia.com/mig-<profile>, and their renameByDefault names.
func gfdName(name string) bool {
	name = strings.TrimSuffix(name, renamedSuffix)
	return name == GPUResource || strings.HasPrefix(name, MIGResourcePrefix)
}

// nodeSharing adds nvidia.com/gpu.replicas and gpu.sharing-strategy for the
// whole GPUs of the node model, and -SHARED on gpu.product when they are
// shared as nvidia.com/gpu (a renamed resource keeps the plain product, as
// gpu-feature-discovery does).
func (l *labelSet) nodeSharing(inv *discovery.Inventory, idx deviceIndex, model *discovery.GPU, p *plan.Plan) {
	whole := false
	for i := range inv.GPUs {
		if g := &inv.GPUs[i]; g.Product == model.Product && !g.MIGEnabled {
			whole = true
		}
	}
	if !whole {
		// gpu-feature-discovery labels GPUs in MIG mode without sharing.
		l.set(resourceKey(GPUResource, SuffixReplicas), "0")
		l.set(resourceKey(GPUResource, SuffixSharingStrategy), noneLabel())
		return
	}
	for i := range p.Resources {
		r := &p.Resources[i]
		for _, d := range r.Devices {
			g, ok := idx.gpus[d.GPUUUID]
			if d.Kind != plan.DeviceGPU || !ok || g.Product != model.Product {
				continue
			}
			replicas, strategy := r.Sharing.Label()
			l.setInt(resourceKey(GPUResource, SuffixReplicas), replicas)
			l.set(resourceKey(GPUResource, SuffixSharingStrategy), strategy)
			if r.Name == GPUResource && replicas > 1 {
				l.set(resourceKey(GPUResource, SuffixProduct), productName(true, model.Product))
			}
			return
		}
	}
	// Not advertised: no replicas label.
}

// migProfiles adds the mixed strategy's nvidia.com/mig-<profile>.* labels
// for every MIG profile the Plan serves, in Plan order.
func (l *labelSet) migProfiles(idx deviceIndex, p *plan.Plan) {
	type served struct {
		gpu   *discovery.GPU
		mig   *discovery.MIGDevice
		res   *plan.Resource
		count int
	}
	byProfile := map[string]*served{}
	var order []string
	for i := range p.Resources {
		r := &p.Resources[i]
		for _, d := range r.Devices {
			m, ok := idx.migs[d.ID]
			if d.Kind != plan.DeviceMIG || !ok {
				continue
			}
			s, ok := byProfile[m.Profile]
			if !ok {
				s = &served{gpu: idx.gpus[d.GPUUUID], mig: m, res: r}
				byProfile[m.Profile] = s
				order = append(order, m.Profile)
			}
			s.count++
		}
	}
	for _, profile := range order {
		s := byProfile[profile]
		name := MIGResourcePrefix + migProfileName(profile)
		replicas, strategy := s.res.Sharing.Label()
		product := productName(replicas > 1 && s.res.Name == name, s.gpu.Product, "MIG", migProfileName(profile))
		l.set(resourceKey(name, SuffixProduct), product)
		l.setInt(resourceKey(name, SuffixCount), s.count)
		l.setInt(resourceKey(name, SuffixReplicas), replicas)
		l.set(resourceKey(name, SuffixSharingStrategy), strategy)
		l.migLabels(name, s.mig)
	}
}

// singleInvalid overrides the node's nvidia.com/gpu labels as
// gpu-feature-discovery does on a node the single strategy refuses.
func (l *labelSet) singleInvalid(inv *discovery.Inventory) {
	product := inv.GPUs[0].Product
	for i := range inv.GPUs {
		if inv.GPUs[i].MIGEnabled {
			product = inv.GPUs[i].Product
			break
		}
	}
	l.set(resourceKey(GPUResource, SuffixProduct), productName(false, product, "MIG", invalidSuffix))
	l.set(resourceKey(GPUResource, SuffixCount), "0")
	l.set(resourceKey(GPUResource, SuffixReplicas), "0")
	l.set(resourceKey(GPUResource, SuffixMemory), "0")
	if _, ok := l.m[resourceKey(GPUResource, SuffixSharingStrategy)]; !ok {
		l.set(resourceKey(GPUResource, SuffixSharingStrategy), noneLabel())
	}
}

// migProfileName is a MIG profile as NVIDIA names it in resource names
// and product labels: '+' becomes '.' (1g.10gb+me is 1g.10gb.me).
func migProfileName(profile string) string { return strings.ReplaceAll(profile, "+", ".") }

// gpuMode is LabelGPUMode's value: the GPUs' common mode, else unknown.
func gpuMode(inv *discovery.Inventory) string {
	mode := inv.GPUs[0].Mode
	for i := range inv.GPUs {
		if inv.GPUs[i].Mode != mode {
			return GPUModeUnknown
		}
	}
	switch mode {
	case discovery.ModeCompute:
		return GPUModeCompute
	case discovery.ModeGraphics:
		return GPUModeGraphics
	}
	return GPUModeUnknown
}

// gpuClique is LabelGPUClique's value: the one clique of the node's
// fabric-attached GPUs, or "" when none is attached or they are in
// different cliques (gpu-feature-discovery then logs a warning and leaves
// the label out; discovery's features carry each GPU's clique).
func gpuClique(inv *discovery.Inventory) string {
	clique := ""
	for i := range inv.GPUs {
		c := inv.GPUs[i].Clique
		switch {
		case c == "":
		case clique == "":
			clique = c
		case c != clique:
			return ""
		}
	}
	return clique
}

// labelSet collects labels, validating keys and sanitizing values.
type labelSet struct {
	m         map[string]string
	onDropped func(key, reason string)
}

func (l *labelSet) set(key, value string) {
	if errs := validLabelKey(key); errs != "" {
		if l.onDropped != nil {
			l.onDropped(key, errs)
		}
		return
	}
	l.m[key] = SanitizeValue(value)
}

func (l *labelSet) setInt(key string, v int) { l.set(key, strconv.Itoa(v)) }

// versions adds the driver and CUDA version labels. A version that does not
// have gpu-feature-discovery's form (X.Y[.Z] for the driver, X.Y for CUDA)
// gives no labels rather than wrong ones.
func (l *labelSet) versions(inv *discovery.Inventory, omitDeprecated bool) {
	if parts := strings.Split(inv.DriverVersion, "."); (len(parts) == 2 || len(parts) == 3) && allDigits(parts[0]) && allDigits(parts[1]) {
		rev := ""
		if len(parts) == 3 {
			rev = parts[2]
		}
		l.set(LabelDriverMajor, parts[0])
		l.set(LabelDriverMinor, parts[1])
		l.set(LabelDriverRevision, rev)
		l.set(LabelDriverFull, inv.DriverVersion)
		if !omitDeprecated {
			l.set(LabelDeprecatedDriverMajor, parts[0])
			l.set(LabelDeprecatedDriverMinor, parts[1])
			l.set(LabelDeprecatedDriverRev, rev)
		}
	}
	if parts := strings.Split(inv.CUDADriverVersion, "."); len(parts) >= 2 && allDigits(parts[0]) && allDigits(parts[1]) {
		major, _ := strconv.Atoi(parts[0])
		minor, _ := strconv.Atoi(parts[1])
		l.setInt(LabelRuntimeMajor, major)
		l.setInt(LabelRuntimeMinor, minor)
		l.set(LabelRuntimeFull, strconv.Itoa(major)+"."+strconv.Itoa(minor))
		if !omitDeprecated {
			l.setInt(LabelDeprecatedRuntimeMajor, major)
			l.setInt(LabelDeprecatedRuntimeMinor, minor)
		}
	}
}

// gpuLabels adds R.product, R.count, R.memory, R.family and R.compute.* for
// count whole GPUs of g's model.
func (l *labelSet) gpuLabels(resource string, g *discovery.GPU, count int) {
	l.set(resourceKey(resource, SuffixProduct), productName(false, g.Product))
	l.setInt(resourceKey(resource, SuffixCount), count)
	if g.MemoryMiB > 0 {
		l.set(resourceKey(resource, SuffixMemory), strconv.FormatUint(g.MemoryMiB, 10))
	}
	if g.ComputeMajor > 0 {
		// Discovery always names the family (its table maps compute
		// capabilities, "undefined" for unknown ones).
		if g.Family != "" {
			l.set(resourceKey(resource, SuffixFamily), g.Family)
		}
		l.setInt(resourceKey(resource, SuffixComputeMajor), g.ComputeMajor)
		l.setInt(resourceKey(resource, SuffixComputeMinor), g.ComputeMinor)
	}
}

// resource adds the labels of one Plan resource: featureplug's own for a
// resource of another name, gpu-feature-discovery's single-strategy labels
// for MIG devices served as nvidia.com/gpu. Whole GPUs served as
// nvidia.com/gpu keep the node-level model labels (see nodeSharing).
func (l *labelSet) resource(idx deviceIndex, r *plan.Resource) {
	if len(r.Devices) == 0 {
		return
	}
	replicas, strategy := r.Sharing.Label()
	shared := replicas > 1
	gpu, mig := idx.representative(r.Devices)
	if r.Name == GPUResource && mig == nil {
		return
	}

	switch {
	case mig != nil:
		l.set(resourceKey(r.Name, SuffixProduct), productName(shared, gpu.Product, "MIG", migProfileName(mig.Profile)))
		l.migLabels(r.Name, mig)
	case gpu != nil:
		l.gpuLabels(r.Name, gpu, len(r.Devices))
		if shared {
			l.set(resourceKey(r.Name, SuffixProduct), productName(shared, gpu.Product))
		}
	}
	l.setInt(resourceKey(r.Name, SuffixCount), len(r.Devices))
	l.setInt(resourceKey(r.Name, SuffixReplicas), replicas)
	l.set(resourceKey(r.Name, SuffixSharingStrategy), strategy)
}

// migLabels adds gpu-feature-discovery's MIG attribute labels.
func (l *labelSet) migLabels(resource string, m *discovery.MIGDevice) {
	l.set(resourceKey(resource, SuffixMemory), strconv.FormatUint(m.MemoryMiB, 10))
	l.setInt(resourceKey(resource, SuffixMultiprocessors), m.Multiprocessors)
	l.setInt(resourceKey(resource, SuffixSlicesGI), m.GISlices)
	l.setInt(resourceKey(resource, SuffixSlicesCI), m.CISlices)
	l.setInt(resourceKey(resource, SuffixEnginesCopy), m.Engines.Copy)
	l.setInt(resourceKey(resource, SuffixEnginesDecoder), m.Engines.Decoder)
	l.setInt(resourceKey(resource, SuffixEnginesEncoder), m.Engines.Encoder)
	l.setInt(resourceKey(resource, SuffixEnginesJPEG), m.Engines.JPEG)
	l.setInt(resourceKey(resource, SuffixEnginesOFA), m.Engines.OFA)
}

// resourceKey is the label key <resource>.<suffix>.
func resourceKey(resource, suffix string) string { return resource + "." + suffix }

// productName joins the sanitized, non-empty parts with '-' and appends
// -SHARED when shared: "NVIDIA A100-SXM4-40GB", "MIG", "1g.5gb" gives
// NVIDIA-A100-SXM4-40GB-MIG-1g.5gb.
func productName(shared bool, parts ...string) string {
	var kept []string
	for _, p := range parts {
		if s := sanitizeWords(p); s != "" {
			kept = append(kept, s)
		}
	}
	if len(kept) == 0 {
		return ""
	}
	if shared {
		kept = append(kept, sharedSuffix)
	}
	return strings.Join(kept, "-")
}

// noneLabel is the sharing-strategy label of an unshared resource.
func noneLabel() string {
	_, label := plan.Sharing{}.Label()
	return label
}

// nodeModel returns the first GPU of the node's most common product and how
// many GPUs have that product. Ties go to the product of the lowest index.
func nodeModel(inv *discovery.Inventory) (*discovery.GPU, int) {
	counts := make(map[string]int, 1)
	for i := range inv.GPUs {
		counts[inv.GPUs[i].Product]++
	}
	best := &inv.GPUs[0]
	for i := range inv.GPUs {
		if g := &inv.GPUs[i]; counts[g.Product] > counts[best.Product] {
			best = g
		}
	}
	return best, counts[best.Product]
}

// mpsCapable reports what gpu-feature-discovery labels as mps.capable: a
// resource's sharing strategy runs the MPS daemon (plan.StrategySpec.Daemon)
// and no GPU has MIG enabled.
func mpsCapable(inv *discovery.Inventory, p *plan.Plan) bool {
	if p == nil || anyGPU(inv, func(g *discovery.GPU) bool { return g.MIGEnabled }) {
		return false
	}
	for _, r := range p.Resources {
		if spec, _ := r.Sharing.Spec(); spec.Daemon {
			return true
		}
	}
	return false
}

func anyGPU(inv *discovery.Inventory, pred func(*discovery.GPU) bool) bool {
	for i := range inv.GPUs {
		if pred(&inv.GPUs[i]) {
			return true
		}
	}
	return false
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// deviceIndex finds the GPUs and MIG devices of an Inventory by UUID.
type deviceIndex struct {
	gpus map[string]*discovery.GPU
	migs map[string]*discovery.MIGDevice
}

func newDeviceIndex(inv *discovery.Inventory) deviceIndex {
	idx := deviceIndex{
		gpus: make(map[string]*discovery.GPU, len(inv.GPUs)),
		migs: make(map[string]*discovery.MIGDevice, inv.MIGDeviceCount()),
	}
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		idx.gpus[g.UUID] = g
		for j := range g.MIGDevices {
			idx.migs[g.MIGDevices[j].UUID] = &g.MIGDevices[j]
		}
	}
	return idx
}

// representative returns the device that describes a resource: the first of
// the most common (product, MIG profile) among the devices the Inventory
// knows. mig is nil for whole GPUs; both are nil when no device is known.
func (idx deviceIndex) representative(devices []plan.Device) (*discovery.GPU, *discovery.MIGDevice) {
	type kind struct{ product, profile string }
	type known struct {
		gpu  *discovery.GPU
		mig  *discovery.MIGDevice
		kind kind
	}
	list := make([]known, 0, len(devices))
	counts := make(map[kind]int, 1)
	for _, d := range devices {
		g, ok := idx.gpus[d.GPUUUID]
		if !ok {
			continue
		}
		k := known{gpu: g, kind: kind{product: g.Product}}
		if d.Kind == plan.DeviceMIG {
			if k.mig, ok = idx.migs[d.ID]; !ok {
				continue
			}
			k.kind.profile = k.mig.Profile
		}
		counts[k.kind]++
		list = append(list, k)
	}
	var best *known
	for i := range list {
		if best == nil || counts[list[i].kind] > counts[best.kind] {
			best = &list[i]
		}
	}
	if best == nil {
		return nil, nil
	}
	return best.gpu, best.mig
}
