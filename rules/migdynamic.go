package rules

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/discovery/migplace"
	"github.com/featureplug/featureplug/rules/plan"
)

// A devices: gpu rule with a mig section partitions the GPUs it matches on
// demand:
//
//	- name: h100-dynamic
//	  devices: gpu
//	  matchFeatures: [...]
//	  resource: 'nvidia.com/mig-{{ .profile }}'   # per profile, over the would-be MIG device's attributes
//	  mig:
//	    partition: dynamic
//	    profiles: [1g.10gb, 2g.20gb, 3g.40gb]     # optional: default every profile the GPU has
//	    wholeGPU: nvidia.com/gpu                  # optional: the whole GPU is offered too, as this resource
//
// Such a rule claims MIG-capable GPUs whatever their MIG mode; their
// resources are served through DRA only (plan.DynamicGPU), so serve:
// device-plugin is an error, and an absent serve means dra. The MIG devices
// of a GPU it claims are not claimed by other rules: they were created for
// claims (or, if not, keep the GPU from being offered; the sink serving the
// GPU tells them apart).

// PartitionDynamic is the one value of mig.partition.
const PartitionDynamic = "dynamic"

// migSpec is a rule's mig section as written.
type migSpec struct {
	// Partition is "dynamic": MIG devices are created on demand.
	Partition string `json:"partition"`
	// Profiles are the profiles offered; empty: every profile of the GPU.
	Profiles []string `json:"profiles,omitempty"`
	// WholeGPU is the resource (a literal name or a template over the
	// GPU's attributes) the whole GPU is offered as; empty: it is not.
	WholeGPU string `json:"wholeGPU,omitempty"`
}

// dynamicRule is a rule's compiled mig section.
type dynamicRule struct {
	profiles  []string // nil: every profile of the GPU
	written   []int    // per profile, its index in mig.profiles
	wholeGPU  string
	wholeTmpl *template.Template // nil for a literal name
}

// Reasons a dynamic rule skips a device.
const (
	missNotMIGCapable = "mig.partition: dynamic claims MIG-capable GPUs (this GPU is not)"
)

// profileNameRE is the form of a MIG profile name a dynamic rule may
// offer: a GPU instance profile whose compute instance fills it, as
// go-nvlib names them ("1g.10gb", "1g.10gb+me", "7g.141gb"), with the
// suffixes newer drivers add ("+gfx", "-me", "+me.all").
var profileNameRE = regexp.MustCompile(`^[1-9]g\.[0-9]+gb([+-][a-z]+(\.[a-z]+)?)?$`)

// compileMIG validates a rule's mig section.
func (c *checker) compileMIG(r *rule, s *ruleSpec) {
	if s.MIG == nil {
		return
	}
	m := s.MIG
	at := path{"mig"}
	if s.Devices == plan.DeviceMIG {
		c.ruleError(r, at, "", "only a devices: gpu rule partitions GPUs (a devices: mig rule claims MIG devices that exist); say devices: gpu or remove mig")
		return
	}
	switch m.Partition {
	case PartitionDynamic:
	case "":
		c.ruleError(r, at.with("partition"), "", `required: "dynamic" (static MIG devices are claimed by devices: mig rules)`)
		return
	default:
		c.ruleError(r, at.with("partition"), strconv.Quote(m.Partition), `must be "dynamic" (static MIG devices are claimed by devices: mig rules)`)
		return
	}
	d := &dynamicRule{wholeGPU: m.WholeGPU}
	seen := map[string]int{}
	for i, p := range m.Profiles {
		field := at.with("profiles", i)
		if first, dup := seen[p]; dup {
			c.ruleError(r, field, strconv.Quote(p), fmt.Sprintf("given twice (first as mig.profiles[%d])", first))
			continue
		}
		seen[p] = i
		if !profileNameRE.MatchString(p) {
			c.ruleError(r, field, strconv.Quote(p), "is not a MIG profile name"+profileHint(p))
			continue
		}
		d.profiles = append(d.profiles, p)
		d.written = append(d.written, i)
	}
	if m.Profiles != nil && len(m.Profiles) == 0 {
		c.ruleError(r, at.with("profiles"), "[]", "lists no profile; remove it to offer every profile of the GPU")
	}
	if s.Sharing != nil {
		c.ruleError(r, path{"sharing"}, "", "a GPU partitioned on demand does not share its MIG devices; remove sharing")
	}
	switch r.serve {
	case plan.ServeDevicePlugin:
		c.ruleError(r, path{"serve"}, strconv.Quote(string(r.serve)),
			"mig.partition: dynamic is served through DRA only (a device plugin must advertise devices before any pod asks, and these MIG devices are created for a claim); remove serve or say serve: dra")
	case "":
		r.serve = plan.ServeDRA
	}
	c.compileWholeGPU(r, d)
	r.dynamic = d
}

// profileHint suggests the form of a misspelt profile name.
func profileHint(p string) string {
	for _, sep := range []string{".me", "-me", "_me", " me", "me"} {
		if base, ok := strings.CutSuffix(p, sep); ok && profileNameRE.MatchString(base) && !strings.HasSuffix(base, "+") {
			return fmt.Sprintf("; did you mean %q?", base+"+me")
		}
	}
	if strings.Contains(p, "c.") {
		return " (featureplug creates compute instances that fill their GPU instance: name the GPU instance profile, e.g. 3g.40gb)"
	}
	return " (e.g. 1g.10gb, 1g.10gb+me, 3g.40gb)"
}

// compileWholeGPU validates mig.wholeGPU: a literal resource name, or a
// template tried on a sample GPU.
func (c *checker) compileWholeGPU(r *rule, d *dynamicRule) {
	field := path{"mig", "wholeGPU"}
	switch {
	case d.wholeGPU == "":
		return
	case !isTemplate(d.wholeGPU):
		if err := plan.ValidateResourceName(d.wholeGPU); err != nil {
			c.ruleError(r, field, strconv.Quote(d.wholeGPU), err.Error())
		}
		if !isTemplate(r.resource) && r.resource == d.wholeGPU {
			c.ruleError(r, field, strconv.Quote(d.wholeGPU), "is also the resource of the rule's MIG profiles; a resource is either whole GPUs or MIG devices")
		}
	default:
		t, err := parseTemplate(r.name+"/wholeGPU", d.wholeGPU)
		if err != nil {
			c.ruleError(r, field, strconv.Quote(d.wholeGPU), "invalid template: "+err.Error())
			return
		}
		if _, err := executeTemplate(t, sampleAttributes(c.sample, plan.DeviceGPU)); err != nil {
			c.ruleError(r, field, strconv.Quote(d.wholeGPU), "template fails on a sample gpu device: "+err.Error())
			return
		}
		d.wholeTmpl = t
	}
}

// templateKind is the kind of device a rule's resource template is
// rendered on: a MIG device for a dynamic rule (one per offered profile).
func (r *rule) templateKind() plan.DeviceKind {
	if r.dynamic != nil {
		return plan.DeviceMIG
	}
	return r.devices
}

// NeedsMIGGeometry reports whether discovery must read the MIG geometry
// and placements (discovery.ReadMIGGeometry) for the rules: a rule
// partitions GPUs on demand, or the file names DRA devices as NVIDIA's
// driver does (dra.compatibility: nvidia), whose MIG device names hold
// the placement.
func (rs *RuleSet) NeedsMIGGeometry() bool {
	if rs.draCompat == draattr.NVIDIA {
		return true
	}
	for _, r := range rs.rules {
		if r.dynamic != nil {
			return true
		}
	}
	return false
}

// dynamicClaim is a GPU a dynamic rule claimed, for its MIG devices'
// decisions.
type dynamicClaim struct {
	rule      *rule
	resources map[string]string // profile name -> resource
}

// claimDynamic gives a MIG-capable GPU to a dynamic rule: the offered
// profiles, their resources and the whole GPU's, recorded in pl.dynamic.
// It returns a problem (the GPU is left out) when the GPU cannot be
// partitioned on demand.
func (pl *planner) claimDynamic(r *rule, t *target, desc string) *Error {
	g := t.gpu
	d := r.dynamic
	geo := g.MIGGeometry
	if geo == nil {
		switch {
		case migplace.ModeChangeNeedsReset(g.ComputeMajor) && g.MIGModePending:
			return pl.dynamicProblem(r, "mig", fmt.Sprintf("%s: enabling MIG mode waits for a GPU reset (a MIG mode change on %s needs one); reset the GPU when it is idle", desc, g.Product))
		case migplace.ModeChangeNeedsReset(g.ComputeMajor) && !g.MIGEnabled:
			return pl.dynamicProblem(r, "mig", fmt.Sprintf("%s: MIG mode is disabled, and changing it on %s needs a GPU reset, which featureplug does not do; enable it once (nvidia-smi -i %d -mig 1, then reset the GPU)", desc, g.Product, g.Index))
		default:
			return pl.dynamicProblem(r, "mig", desc+": its MIG geometry is not known (the devices were read without discovery.ReadMIGGeometry, or from published node features, which do not carry it)")
		}
	}
	dg := plan.DynamicGPU{
		UUID: g.UUID, Index: g.Index, Product: g.Product, NUMANode: g.NUMANode, MemoryMiB: g.MemoryMiB,
		Rule: r.name, MIGEnabled: g.MIGEnabled, ModeChangeNeedsReset: geo.ModeChangeNeedsReset,
		Capacity: migplace.Capacity(geo.Profiles),
	}
	resources := map[string]string{}
	var names []string
	for _, p := range geo.Profiles {
		if d.profiles != nil && !slices.Contains(d.profiles, p.Name) {
			continue
		}
		ci, ok := p.FullComputeInstance()
		if !ok {
			continue
		}
		name := r.resource
		if r.tmpl != nil {
			attrs := discovery.MIGAttributes(g, wouldBe(g, &p))
			out, err := executeTemplate(r.tmpl, attrs)
			if err != nil {
				return pl.problem(r, fmt.Sprintf("template fails on %s MIG profile %s: %v", desc, p.Name, err))
			}
			if err := plan.ValidateResourceName(out); err != nil {
				return pl.problem(r, fmt.Sprintf("template gives %q for %s MIG profile %s: %v", out, desc, p.Name, err))
			}
			name = out
		}
		dg.Profiles = append(dg.Profiles, plan.DynamicProfile{Profile: p, Resource: name, ComputeInstanceProfile: ci})
		resources[p.Name] = name
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if len(dg.Profiles) == 0 {
		return pl.dynamicProblem(r, "mig.profiles", fmt.Sprintf("%s has none of the profiles %s (it has %s)", desc, strings.Join(d.profiles, ", "), strings.Join(geo.ProfileNames(), ", ")))
	}
	if d.wholeGPU != "" {
		whole := d.wholeGPU
		if d.wholeTmpl != nil {
			out, err := executeTemplate(d.wholeTmpl, t.attrs)
			if err != nil {
				return pl.dynamicProblem(r, "mig.wholeGPU", fmt.Sprintf("template fails on %s: %v", desc, err))
			}
			if err := plan.ValidateResourceName(out); err != nil {
				return pl.dynamicProblem(r, "mig.wholeGPU", fmt.Sprintf("template gives %q for %s: %v", out, desc, err))
			}
			whole = out
		}
		switch {
		case slices.Contains(names, whole):
			return pl.dynamicProblem(r, "mig.wholeGPU", fmt.Sprintf("%q is also the resource of a MIG profile of %s; a resource is either whole GPUs or MIG devices", whole, desc))
		case geo.ModeChangeNeedsReset && g.MIGEnabled:
			largest := geo.Profiles[len(geo.Profiles)-1].Name
			dg.WholeGPUWithheld = fmt.Sprintf("MIG mode is enabled and changing it on %s needs a GPU reset; offer the whole-GPU profile %s instead", g.Product, largest)
		default:
			dg.WholeGPU = whole
			names = append(names, whole)
		}
	}
	for _, name := range names {
		if !pl.dynamicResource(r, name, desc) {
			return nil
		}
	}
	for _, m := range g.MIGDevices {
		if m.Placement == nil || m.GPUInstanceProfileID == nil {
			continue
		}
		dg.Existing = append(dg.Existing, plan.ExistingMIG{
			UUID: m.UUID, Profile: m.Profile, ProfileID: *m.GPUInstanceProfileID, Placement: *m.Placement,
			Whole: m.CISlices == 0 || m.CISlices == m.GISlices,
		})
	}
	slices.SortStableFunc(dg.Existing, func(a, b plan.ExistingMIG) int { return a.Placement.Start - b.Placement.Start })
	pl.dynamic = append(pl.dynamic, dg)
	pl.dynamicParents[g.UUID] = &dynamicClaim{rule: r, resources: resources}
	return nil
}

// wouldBe is the MIG device an instance of profile p on g would be, for
// the rule's resource template.
func wouldBe(g *discovery.GPU, p *migplace.Profile) *discovery.MIGDevice {
	return &discovery.MIGDevice{
		ParentIndex: g.Index, ParentUUID: g.UUID, Profile: p.Name, MemoryMiB: p.MemoryMiB,
		Multiprocessors: p.Multiprocessors, GISlices: p.ComputeSlices, CISlices: p.ComputeSlices, Engines: p.Engines,
	}
}

// dynamicProblem is a device problem on a field of a rule's mig section.
func (pl *planner) dynamicProblem(r *rule, field, msg string) *Error {
	return &Error{Source: pl.rs.source, Line: r.line, Rule: r.index, RuleName: r.name, Field: field, Msg: msg}
}

// dynamicResource registers a resource a dynamic rule gives, checking
// that the rules giving the same name agree on sharing and serve; it
// reports whether they do (the plan fails otherwise).
func (pl *planner) dynamicResource(r *rule, name, desc string) bool {
	c, ok := pl.claims[name]
	if !ok {
		pl.claims[name] = &claim{rule: r, sharing: r.sharing, dynamic: true}
		pl.order = append(pl.order, name)
		return true
	}
	if !c.sharing.Same(r.sharing) {
		pl.fail(r, "mig", "", fmt.Sprintf("resource %q of %s is also given by rules[%d] %q with sharing %s; a resource of a GPU partitioned on demand is not shared",
			name, desc, c.rule.index, c.rule.name, c.sharing.String()))
		return false
	}
	if !pl.sameServe(c, r, name, desc) {
		return false
	}
	c.dynamic = true
	return true
}

// decideDynamicMIG decides a MIG device of a GPU a dynamic rule claimed:
// it belongs to the GPU's partitioning, not to other rules.
func (pl *planner) decideDynamicMIG(t *target, d *plan.Decision) bool {
	if t.mig == nil {
		return false
	}
	dc, ok := pl.dynamicParents[t.gpu.UUID]
	if !ok {
		return false
	}
	d.Rule = dc.rule.name
	d.Dynamic = true
	d.Resource = dc.resources[t.mig.Profile]
	return true
}
