package rules

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/labels"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
	"sigs.k8s.io/node-feature-discovery/pkg/apis/nfd/nodefeaturerule"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// Reasons a rule skips a device because of its kind.
const (
	missWantsMIG   = "devices: mig (device is a gpu)"
	missWantsGPU   = "devices: gpu (device is a mig device)"
	missMIGEnabled = "devices: gpu claims only GPUs with MIG disabled (MIG is enabled)"
)

// target is one device being decided, with the features its rules see.
type target struct {
	kind     plan.DeviceKind
	gpu      *discovery.GPU        // nil for a VFIO device
	mig      *discovery.MIGDevice  // nil for a whole GPU
	vfio     *discovery.VFIODevice // set for a VFIO device (vfio.go)
	attrs    map[string]string     // the device's own attributes
	features *nfdv1alpha1.Features
}

// Plan decides, for every device of the inventory, which rule claims it and
// which resource it becomes; nodeLabels are the node's labels, which rules'
// node selectors select on.
//
// Each device is matched on its own features: the node-level features
// (nvidia.driver, nvidia.capabilities) and exactly one instance of its own
// feature, nvidia.gpu for a whole GPU, nvidia.mig for a MIG device (whose
// parent GPU is then also the only nvidia.gpu instance) or nvidia.vfio for
// a GPU bound to vfio-pci (whose resource goes to Plan.VFIO, vfio.go). The rules are tried
// in order with NFD's evaluator; the first that matches claims the device.
//
// A device whose rule's template fails or gives an invalid resource name
// is left out and recorded in Plan.Problems (and its Decision); the rest of
// the plan stands. Plan fails, returning every problem, when one resource
// would get two sharing settings, when a GPU and one of its MIG devices are
// both claimed, or when the plan would advertise more device IDs than the
// caps allow (MaxDevicesPerResource, MaxDevicesPerNode); callers then keep
// their last good plan.
func (rs *RuleSet) Plan(inv *discovery.Inventory, nodeLabels map[string]string) (*plan.Plan, error) {
	p, _, err := rs.plan(inv, nodeLabels)
	return p, err
}

// plan is Plan, returning the planner too: CheckOn reads the problems
// there as errors.
func (rs *RuleSet) plan(inv *discovery.Inventory, nodeLabels map[string]string) (*plan.Plan, *planner, error) {
	node := labels.Set(nodeLabels)
	nodeMiss := rs.nodeMisses(node)
	pl := newPlanner(rs, nodeMiss)
	plan := &plan.Plan{
		Decisions:    make([]plan.Decision, 0, len(inv.GPUs)+inv.MIGDeviceCount()+len(inv.VFIO)),
		Links:        cloneLinks(inv.Links),
		ServeNothing: rs.serveNothing,
		// The DRA sink names devices as the file's dra section says.
		DRACompatibility: string(rs.draCompat),
	}
	visitTargets(inv, func(t *target) {
		plan.Decisions = append(plan.Decisions, pl.decide(t))
	})
	pl.checkParents()
	if len(pl.errs) > 0 {
		return nil, nil, errors.Join(pl.errs...)
	}
	all := pl.resources()
	if err := pl.checkCaps(all); err != nil {
		return nil, nil, err
	}
	plan.Resources, plan.VFIO = splitVFIO(all) // vfio.go
	plan.Problems = pl.problems
	plan.DynamicMIG = pl.dynamic // migdynamic.go
	for i := range plan.Decisions {
		d := &plan.Decisions[i]
		if d.Resource != "" {
			r, _ := resourceOf(plan, d.Resource)
			s := r.Sharing
			d.Sharing = &s
			d.Serve = r.Serve
		}
	}
	// NVIDIA's MIG strategy for this node, and "single" refusing a node
	// whose MIG devices are not uniform (single.go).
	var singleResource string
	plan.MIGStrategy, singleResource = rs.migStrategy(nodeMiss)
	applySingle(inv, plan, singleResource)
	plan.Health, plan.HealthSource = rs.healthFor(node) // health.go
	return plan, pl, nil
}

// nodeMisses says, per rule, why its node selector does not select a node
// with labels node ("" when it does).
func (rs *RuleSet) nodeMisses(node labels.Set) []string {
	nodeMiss := make([]string, len(rs.rules))
	for i, r := range rs.rules {
		if r.selector != nil && !r.selector.Matches(node) {
			nodeMiss[i] = r.nodeMiss
		}
	}
	return nodeMiss
}

// newPlanner returns the state of one Plan (or check) with rs.
func newPlanner(rs *RuleSet, nodeMiss []string) *planner {
	return &planner{
		rs:       rs,
		nodeMiss: nodeMiss,
		claims:   make(map[string]*claim),
		memo:     make([]map[string]verdict, len(rs.rules)),
		names:    make([]map[string]rendered, len(rs.rules)),

		dynamicParents: make(map[string]*dynamicClaim),
	}
}

// visitTargets calls visit for every device of the inventory, in inventory
// order (each GPU, then its MIG devices; the VFIO devices last), with the
// features its rules see: the node-level features and exactly one
// instance of its own feature (a MIG device also sees its parent as the
// one nvidia.gpu instance).
func visitTargets(inv *discovery.Inventory, visit func(*target)) {
	feats := discovery.Features(inv)
	gpuInst := feats.Instances[discovery.FeatureGPU].Elements
	migInst := feats.Instances[discovery.FeatureMIG].Elements
	// One target and one Features value, reused for every device: visit
	// must not keep them (a func value's argument escapes to the heap, so
	// a target per device would cost an allocation each).
	t := new(target)
	f := new(nfdv1alpha1.Features)
	m := 0
	for gi := range inv.GPUs {
		g := &inv.GPUs[gi]
		gpuAttrs := instanceFor(gpuInst, gi, g.UUID, func() map[string]string { return discovery.GPUAttributes(inv, g) })
		gpuSet := nfdv1alpha1.InstanceFeatureSet{Elements: []nfdv1alpha1.InstanceFeature{{Attributes: gpuAttrs}}}
		*f = nfdv1alpha1.Features{
			Flags:      feats.Flags,
			Attributes: feats.Attributes,
			Instances:  map[string]nfdv1alpha1.InstanceFeatureSet{discovery.FeatureGPU: gpuSet},
		}
		*t = target{kind: plan.DeviceGPU, gpu: g, attrs: gpuAttrs, features: f}
		visit(t)
		for mi := range g.MIGDevices {
			d := &g.MIGDevices[mi]
			migAttrs := instanceFor(migInst, m, d.UUID, func() map[string]string { return discovery.MIGAttributes(g, d) })
			m++
			*f = nfdv1alpha1.Features{
				Flags:      feats.Flags,
				Attributes: feats.Attributes,
				Instances: map[string]nfdv1alpha1.InstanceFeatureSet{
					discovery.FeatureGPU: gpuSet,
					discovery.FeatureMIG: {Elements: []nfdv1alpha1.InstanceFeature{{Attributes: migAttrs}}},
				},
			}
			*t = target{kind: plan.DeviceMIG, gpu: g, mig: d, attrs: migAttrs, features: f}
			visit(t)
		}
	}
	visitVFIO(inv, feats, t, f, visit)
}

// instanceFor returns the attributes of element i of a feature's instances
// when it is the device with the given UUID (discovery.Features orders them
// as the inventory), and otherwise computes them.
func instanceFor(elems []nfdv1alpha1.InstanceFeature, i int, uuid string, compute func() map[string]string) map[string]string {
	if i < len(elems) && elems[i].Attributes[discovery.AttrUUID] == uuid {
		return elems[i].Attributes
	}
	return compute()
}

// cloneLinks copies a link matrix, so that the plan shares nothing with the
// inventory.
func cloneLinks(m discovery.LinkMatrix) discovery.LinkMatrix {
	if m == nil {
		return nil
	}
	out := make(discovery.LinkMatrix, len(m))
	for i := range m {
		out[i] = slices.Clone(m[i])
	}
	return out
}

// planner holds the state of one Plan call.
type planner struct {
	rs       *RuleSet
	nodeMiss []string          // per rule: why it skips this node, "" when it does not
	claims   map[string]*claim // by resource name
	order    []string          // resource names in first-claim order
	errs     []error
	problems []plan.Problem // devices left out, in inventory order
	// problemErrs are the problems as errors, in the same order.
	problemErrs []*Error

	memo    []map[string]verdict  // per rule: verdicts by input values
	names   []map[string]rendered // per rule: template results by input values
	sig     []byte                // scratch space for input signatures
	skipped []plan.RuleMiss       // scratch space for the misses of one decision

	// dynamic are the GPUs dynamic rules claimed, in inventory order, and
	// dynamicParents the same by GPU UUID (migdynamic.go).
	dynamic        []plan.DynamicGPU
	dynamicParents map[string]*dynamicClaim
}

// verdict is the outcome of one rule on one set of inputs.
type verdict struct {
	match bool
	why   string // when not matched
}

// evaluate runs a rule's matchers on a device with NFD's evaluator, and
// explains a miss. Devices that agree on every input of the rule share one
// evaluation.
func (pl *planner) evaluate(r *rule, t *target) verdict {
	if !r.memoize {
		return evaluate(r, t.features)
	}
	pl.sig = pl.sig[:0]
	for _, in := range r.inputs {
		set := t.features.Instances[in.feature]
		v, ok := "", false
		if len(set.Elements) > 0 {
			v, ok = set.Elements[0].Attributes[in.key]
		}
		if ok {
			pl.sig = append(pl.sig, 1)
		} else {
			pl.sig = append(pl.sig, 0)
		}
		pl.sig = append(pl.sig, v...)
		pl.sig = append(pl.sig, 0)
	}
	if pl.memo[r.index] == nil {
		pl.memo[r.index] = make(map[string]verdict)
	} else if v, ok := pl.memo[r.index][string(pl.sig)]; ok {
		return v
	}
	v := evaluate(r, t.features)
	pl.memo[r.index][string(pl.sig)] = v
	return v
}

// rendered is a template's result for one device.
type rendered struct {
	name    string
	err     error // the template failed
	invalid error // the name is not a valid resource name
}

// render runs a rule's resource template on a device and validates the
// name. Devices that agree on every attribute the template reads share one
// run.
func (pl *planner) render(r *rule, t *target) rendered {
	run := func() rendered {
		name, err := executeTemplate(r.tmpl, t.attrs)
		if err != nil {
			return rendered{err: err}
		}
		return rendered{name: name, invalid: templateNameError(name)}
	}
	if !r.tmplMemoize {
		return run()
	}
	pl.sig = pl.sig[:0]
	for _, k := range r.tmplInputs {
		pl.sig = append(pl.sig, t.attrs[k]...)
		pl.sig = append(pl.sig, 0)
	}
	if pl.names[r.index] == nil {
		pl.names[r.index] = make(map[string]rendered)
	} else if v, ok := pl.names[r.index][string(pl.sig)]; ok {
		return v
	}
	v := run()
	pl.names[r.index][string(pl.sig)] = v
	return v
}

// evaluate runs a rule's matchers on a device's features.
func evaluate(r *rule, f *nfdv1alpha1.Features) verdict {
	out, err := nodefeaturerule.Execute(&r.nfd, f, true)
	switch {
	case err != nil:
		return verdict{why: "error: " + err.Error()}
	case out.MatchStatus == nil || !out.MatchStatus.IsMatch:
		return verdict{why: r.whyNot(f)}
	}
	return verdict{match: true}
}

// claim is a resource being assembled.
type claim struct {
	rule    *rule // the first rule that gave the resource
	sharing plan.Sharing
	devices []claimed
	minMem  uint64 // smallest device memory, for MPS defaults
	vfio    bool   // a resource of VFIO devices (vfio.go)
	// dynamic: a dynamic rule gives the resource (migdynamic.go).
	dynamic bool
}

// claimed is a device given to a resource, with what sorting and checking
// need.
type claimed struct {
	plan.Device
	mig  int // MIG index, -1 for a whole GPU
	rule *rule
}

// decide runs the rules on one device.
func (pl *planner) decide(t *target) plan.Decision {
	d := plan.Decision{Kind: t.kind, Description: describe(t), Device: t.id()}
	if pl.decideDynamicMIG(t, &d) { // migdynamic.go
		return d
	}
	skipped := pl.skipped[:0]
	defer func() { pl.skipped = skipped }()
	for i, r := range pl.rs.rules {
		if why := pl.nodeMiss[i]; why != "" {
			skipped = append(skipped, plan.RuleMiss{Rule: r.name, Reason: why})
			continue
		}
		if r.devices != t.kind {
			skipped = append(skipped, plan.RuleMiss{Rule: r.name, Reason: kindMiss(r.devices, t.kind)})
			continue
		}
		switch {
		case r.dynamic != nil && !t.gpu.MIGCapable:
			skipped = append(skipped, plan.RuleMiss{Rule: r.name, Reason: missNotMIGCapable})
			continue
		case r.dynamic == nil && t.kind == plan.DeviceGPU && t.gpu.MIGEnabled:
			skipped = append(skipped, plan.RuleMiss{Rule: r.name, Reason: missMIGEnabled})
			continue
		}
		if v := pl.evaluate(r, t); !v.match {
			skipped = append(skipped, plan.RuleMiss{Rule: r.name, Reason: v.why})
			continue
		}
		d.Rule = r.name
		if r.dynamic != nil {
			if problem := pl.claimDynamic(r, t, d.Description); problem != nil {
				d.Problem = problem.Error()
				pl.problems = append(pl.problems, plan.Problem{Device: d.Device, Description: d.Description, Rule: r.name, Message: d.Problem})
				pl.problemErrs = append(pl.problemErrs, problem)
			} else {
				d.Dynamic = true
			}
			break
		}
		name, problem, template := pl.claim(r, t, d.Description)
		if problem != nil {
			d.Problem = problem.Error()
			pl.problems = append(pl.problems, plan.Problem{Device: d.Device, Description: d.Description, Rule: r.name, Resource: name, Message: d.Problem, Template: template})
			pl.problemErrs = append(pl.problemErrs, problem)
			break
		}
		d.Resource = name
		break
	}
	if len(skipped) > 0 {
		d.Skipped = slices.Clone(skipped)
	}
	return d
}

// describe names a device for people: "GPU 0 NVIDIA A100-SXM4-40GB",
// "GPU 0 MIG 1 (3g.20gb)" or "VFIO NVIDIA L40S".
func describe(t *target) string {
	if t.vfio != nil {
		return describeVFIO(t.vfio)
	}
	if t.mig != nil {
		return fmt.Sprintf("GPU %d MIG %d (%s)", t.gpu.Index, t.mig.Index, t.mig.Profile)
	}
	return fmt.Sprintf("GPU %d %s", t.gpu.Index, t.gpu.Product)
}

// claim gives a device to the resource a rule names, and returns the name
// ("" after an error). When the rule's template fails or gives an invalid
// name, the device is not claimed, problem says why (name is then what
// the template gave, if anything) and template is true; a VFIO device
// that cannot be passed through is a problem of the node.
func (pl *planner) claim(r *rule, t *target, desc string) (name string, problem *Error, template bool) {
	name = r.resource
	if r.tmpl != nil {
		rendered := pl.render(r, t)
		if rendered.err != nil {
			return "", pl.problem(r, fmt.Sprintf("template fails on %s: %v", desc, rendered.err)), true
		}
		name = rendered.name
		if rendered.invalid != nil {
			return name, pl.problem(r, fmt.Sprintf("template gives %q for %s (%s): %v", name, desc, t.id(), rendered.invalid)), true
		}
	}
	if t.vfio != nil {
		name, problem = pl.claimVFIO(r, t, name, desc) // vfio.go
		return name, problem, false
	}
	// A devices: gpu rule only claims GPUs with MIG disabled, and a
	// WholeGPUOnly strategy (mps) is refused at load time for devices: mig,
	// so this holds by construction; it is checked again because serving
	// MPS on a MIG-enabled GPU would fail on the node.
	if spec, _ := r.sharing.Spec(); spec.WholeGPUOnly && (t.mig != nil || t.gpu.MIGEnabled) {
		pl.fail(r, "sharing.strategy", string(spec.Name), fmt.Sprintf("%s cannot share %s: MIG is enabled on its GPU", spec.Name, desc))
		return "", nil, false
	}
	// An MPS per-replica memory limit must fit the GPU it limits
	// (plan.Sharing.CheckDeviceMemory).
	if err := r.sharing.CheckDeviceMemory(t.memory()); err != nil {
		pl.fail(r, "sharing.mps.pinnedMemoryLimitMiB", strconv.FormatUint(r.sharing.MPS.PinnedMemoryLimitMiB, 10),
			fmt.Sprintf("%s (%s): %v", desc, t.gpu.UUID, err))
		return "", nil, false
	}
	c, ok := pl.claims[name]
	if !ok {
		c = &claim{rule: r, sharing: r.sharing, minMem: t.memory()}
		pl.claims[name] = c
		pl.order = append(pl.order, name)
	} else if !pl.sameKind(c, r, t, name, desc) { // vfio.go
		return "", nil, false
	} else if c.rule != r && !c.sharing.Same(r.sharing) {
		pl.fail(r, "sharing", r.sharing.String(), fmt.Sprintf("resource %q of %s is also given by rules[%d] %q with sharing %s; a resource has one sharing",
			name, desc, c.rule.index, c.rule.name, c.sharing.String()))
		return "", nil, false
	} else if !pl.sameServe(c, r, name, desc) { // serve.go
		return "", nil, false
	}
	c.minMem = min(c.minMem, t.memory())
	dev := claimed{mig: -1, rule: r, Device: plan.Device{
		ID:        t.gpu.UUID,
		Kind:      t.kind,
		GPUUUID:   t.gpu.UUID,
		GPUIndex:  t.gpu.Index,
		Index:     strconv.Itoa(t.gpu.Index),
		NUMANode:  t.gpu.NUMANode,
		MemoryMiB: t.gpu.MemoryMiB,
		Rule:      r.name,
	}}
	if t.mig != nil {
		dev.mig = t.mig.Index
		dev.ID = t.mig.UUID
		dev.Index += ":" + strconv.Itoa(t.mig.Index)
		dev.Profile = t.mig.Profile
		dev.MemoryMiB = t.mig.MemoryMiB
	}
	c.devices = append(c.devices, dev)
	return name, nil, false
}

// problem is a device problem on a rule's resource field.
func (pl *planner) problem(r *rule, msg string) *Error {
	return &Error{Source: pl.rs.source, Line: r.resourceLine, Rule: r.index, RuleName: r.name, Field: "resource", Value: strconv.Quote(r.resource), Msg: msg}
}

// checkCaps checks the assembled resources against MaxDevicesPerResource
// and MaxDevicesPerNode, with the same code as ValidatePlan, naming the
// rule that gave each resource.
func (pl *planner) checkCaps(resources []plan.Resource) error {
	var errs []error
	for i := range resources {
		r := &resources[i]
		if err := plan.CheckResourceCaps(r); err != nil {
			c := pl.claims[r.Name]
			errs = append(errs, &Error{Source: pl.rs.source, Line: c.rule.line, Rule: c.rule.index, RuleName: c.rule.name, Msg: err.Error()})
		}
	}
	if err := plan.CheckNodeCap(resources); err != nil {
		errs = append(errs, &Error{Source: pl.rs.source, Rule: -1, Msg: err.Error()})
	}
	return errors.Join(errs...)
}

// memory is the device's memory in MiB (0 for a VFIO device: NVML does
// not see it).
func (t *target) memory() uint64 {
	switch {
	case t.vfio != nil:
		return 0
	case t.mig != nil:
		return t.mig.MemoryMiB
	}
	return t.gpu.MemoryMiB
}

// fail records a plan-time error on a rule's field.
func (pl *planner) fail(r *rule, field, value, msg string) {
	line := r.line
	if field == "resource" {
		line = r.resourceLine
	}
	pl.errs = append(pl.errs, &Error{Source: pl.rs.source, Line: line, Rule: r.index, RuleName: r.name, Field: field, Value: value, Msg: msg})
}

// checkParents refuses plans that claim a GPU and one of its own MIG
// devices. A devices: gpu rule only claims GPUs with MIG disabled, and
// discovery lists MIG devices only for GPUs with MIG enabled, so this only
// happens with an inconsistent inventory; a device must never be handed out
// twice, so it is checked anyway.
func (pl *planner) checkParents() {
	whole := make(map[string]*claimed)
	seen := make(map[string]bool)
	for _, name := range pl.order {
		for i := range pl.claims[name].devices {
			d := &pl.claims[name].devices[i]
			if seen[d.ID] {
				pl.errs = append(pl.errs, &Error{Source: pl.rs.source, Rule: -1, Value: d.ID,
					Msg: fmt.Sprintf("device %s is in the inventory twice", d.Index)})
			}
			seen[d.ID] = true
			if d.Kind == plan.DeviceGPU {
				whole[d.GPUUUID] = d
			}
		}
	}
	for _, name := range pl.order {
		for _, d := range pl.claims[name].devices {
			if d.Kind != plan.DeviceMIG {
				continue
			}
			if g, ok := whole[d.GPUUUID]; ok {
				pl.fail(d.rule, "devices", "mig", fmt.Sprintf("MIG device %s (%s) is claimed while rule %q claims its whole GPU %s; a GPU and its own MIG devices cannot both be advertised",
					d.Index, d.Profile, g.Rule, g.Index))
			}
		}
	}
}

// resources assembles the claims into resources sorted by name, their
// devices sorted by GPU index then MIG index, with MPS defaults filled in.
func (pl *planner) resources() []plan.Resource {
	out := make([]plan.Resource, 0, len(pl.claims))
	for name, c := range pl.claims {
		s := c.sharing.WithDefaults(c.minMem)
		slices.SortFunc(c.devices, func(a, b claimed) int {
			return cmp.Or(cmp.Compare(a.GPUIndex, b.GPUIndex), cmp.Compare(a.mig, b.mig))
		})
		devs := make([]plan.Device, len(c.devices))
		for i := range c.devices {
			devs[i] = c.devices[i].Device
		}
		out = append(out, plan.Resource{Name: name, Sharing: s, Serve: c.rule.serve, Devices: devs, Dynamic: c.dynamic})
	}
	slices.SortFunc(out, func(a, b plan.Resource) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
