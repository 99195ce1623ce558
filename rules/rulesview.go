package rules

import (
	"maps"

	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// RuleView is a read-only copy of one loaded rule, for packages that
// translate rules into another form (rules/draclass compiles them into
// DRA DeviceClasses). It shares nothing with the RuleSet.
type RuleView struct {
	// Index is the rule's position in the file (rules[Index]).
	Index int
	// Name is the rule's name.
	Name string
	// Line is the line of the rule in its file, 0 when unknown.
	Line int
	// Devices is the kind of device the rule claims.
	Devices plan.DeviceKind
	// MatchFeatures and MatchAny are the rule's NFD matchers, as written.
	MatchFeatures nfdv1alpha1.FeatureMatcher
	MatchAny      []nfdv1alpha1.MatchAnyElem
	// NodeSelector is the rule's node selector in label-selector syntax,
	// "" when it selects every node.
	NodeSelector string
	// Resource is the literal resource name, or the template text when
	// Template is set.
	Resource string
	// Template is set when Resource is a template.
	Template bool
	// TemplateInputs are the attributes of the device's own feature
	// instance the template reads, when TemplateInputsKnown: two devices
	// that agree on them get the same name.
	TemplateInputs      []string
	TemplateInputsKnown bool
	// Sharing is the rule's normalized sharing.
	Sharing plan.Sharing
	// Serve is the API the rule chose, "" when it left it to the agent.
	Serve plan.Serve
	// Dynamic is set on a rule that partitions the GPUs it matches on
	// demand (mig.partition: dynamic): its resource names are those of
	// the plans' DynamicMIG, one per offered profile and the whole GPU.
	Dynamic bool
}

// Views returns a view of every rule, in order.
func (rs *RuleSet) Views() []RuleView {
	out := make([]RuleView, len(rs.rules))
	for i, r := range rs.rules {
		nfd := r.nfd.DeepCopy()
		v := RuleView{
			Index:         r.index,
			Name:          r.name,
			Line:          r.line,
			Devices:       r.devices,
			MatchFeatures: nfd.MatchFeatures,
			MatchAny:      nfd.MatchAny,
			Resource:      r.resource,
			Template:      r.tmpl != nil,
			Sharing:       r.sharing,
			Serve:         r.serve,
			Dynamic:       r.dynamic != nil,
		}
		if r.sharing.MPS != nil {
			mps := *r.sharing.MPS
			v.Sharing.MPS = &mps
		}
		if r.selector != nil {
			v.NodeSelector = r.selector.String()
		}
		if v.Template {
			v.TemplateInputs = append([]string(nil), r.tmplInputs...)
			v.TemplateInputsKnown = r.tmplMemoize
		}
		out[i] = v
	}
	return out
}

// RuleMatch is one device a rule matches, and the resource name the rule
// gives it.
type RuleMatch struct {
	// Rule is the rule's index.
	Rule int
	// Kind is the device's kind.
	Kind plan.DeviceKind
	// Device is the device ID (GPU or MIG UUID, a VFIO device's PCI
	// address).
	Device string
	// Name is the resource name the rule gives the device; "" when its
	// template fails on the device or gives an invalid name (Problem
	// says which).
	Name    string
	Problem string
	// Attributes are the device's own feature instance (nvidia.gpu for a
	// GPU, nvidia.mig for a MIG device, nvidia.vfio for a VFIO device):
	// what a template reads.
	Attributes map[string]string
}

// Matches calls visit for every device of inv and every rule that
// matches it, in inventory and rule order, as if every node selector
// selected the node and no earlier rule claimed the device (as CheckNodes
// tries them). A devices: gpu rule does not match a GPU in MIG mode.
func (rs *RuleSet) Matches(inv *discovery.Inventory, visit func(RuleMatch)) {
	pl := newPlanner(rs, make([]string, len(rs.rules)))
	visitTargets(inv, func(t *target) {
		id := t.id()
		for _, r := range rs.rules {
			if r.devices != t.kind || (t.kind == plan.DeviceGPU && t.gpu.MIGEnabled) || !pl.evaluate(r, t).match {
				continue
			}
			m := RuleMatch{Rule: r.index, Kind: t.kind, Device: id, Name: r.resource, Attributes: maps.Clone(t.attrs)}
			if r.tmpl != nil {
				out := pl.render(r, t)
				switch {
				case out.err != nil:
					m.Name, m.Problem = "", "template fails: "+out.err.Error()
				case out.invalid != nil:
					m.Name, m.Problem = "", out.invalid.Error()
				default:
					m.Name = out.name
				}
			}
			visit(m)
		}
	})
}
