// Package draclass compiles a rules file into DRA DeviceClasses
// (resource.k8s.io/v1): one class per resource name the rules give, named
// after it in featureplug's domain (example.com/a100-80gb ->
// a100-80gb.example.com.featureplug.io, so that it never takes the name of
// another driver's class), with spec.extendedResourceName set to it, so
// that a pod asking for the extended resource is served from featureplug's
// ResourceSlices, and a CEL selector equivalent to the rules:
//
//   - a rule's NFD matchers (matchFeatures, matchAny) become CEL over the
//     device's attributes (discovery/draattr, whose Lookup says what each
//     NFD attribute reads on a device, so that selector and slice agree by
//     construction);
//   - `devices: gpu` becomes type == "gpu" (and MIG mode disabled),
//     `devices: mig` type == "mig";
//   - the first rule that matches a device claims it: a later rule's class
//     excludes what the earlier rules of its kind match;
//   - a templated resource name gives one class per name the template
//     produces on rules/catalog's nodes, constrained by the attributes the
//     template reads (profile == "1g.10gb").
//
// What CEL cannot express exactly — a node selector (a class sees devices,
// not nodes), matchName, a template that reads more than named attributes,
// an op a type has no CEL form for, an attribute a MIG device does not
// carry — is named in a warning (rule, field, value, why) and the classes
// it affects select on the resource attribute the DRA sink publishes
// instead: device.attributes["gpu.featureplug.io"].resource == "<name>",
// which is always right.
//
// With the rules file's dra.compatibility: nvidia, NVIDIA's DRA driver's
// classes gpu.nvidia.com and mig.nvidia.com are added, over the devices of
// both drivers (nvidia.go), and the rules' classes read the attributes as
// that schema names them. Clashes says which classes would take the name
// or extended resource of a class another driver installed.
package draclass

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/catalog"
	"github.com/featureplug/featureplug/rules/plan"
)

// Annotations and labels of the classes.
const (
	// LabelManagedBy marks the classes featureplug made.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// AnnotationRules lists the rules that give the resource.
	AnnotationRules = draattr.Domain + "/rules"
	// AnnotationSelector says how the selector was made: "compiled from
	// the rules" or why it selects on the resource attribute.
	AnnotationSelector = draattr.Domain + "/selector"
	// AnnotationNodeSelectors lists the rules' node selectors, which a
	// DeviceClass cannot express.
	AnnotationNodeSelectors = draattr.Domain + "/node-selectors"
)

// compiledNote is AnnotationSelector's value for a compiled selector.
const compiledNote = "compiled from the rules' match expressions"

// Class is one DeviceClass, and how it was made.
type Class struct {
	// Resource is the extended resource name.
	Resource string
	// Name is the DeviceClass name.
	Name string
	// Selector is the CEL selector.
	Selector string
	// Fallback says why Selector selects on the resource attribute; ""
	// when it is compiled from the rules.
	Fallback string
	// Rules are the names of the rules that give the resource.
	Rules []string
	// NodeSelectors are "<rule>: <selector>" of those rules that have one.
	NodeSelectors []string
	// Serve is what the rules chose for the resource, "" when they left
	// it to the agent's --serve.
	Serve plan.Serve
	// ExtendedResourceName is the class's spec.extendedResourceName: the
	// resource name, or "" when it has none (NVIDIA's MIG class, or a
	// rules class whose extended resource NVIDIA's GPU class serves).
	ExtendedResourceName string
	// VFIO is set for a class of GPUs passed through to virtual machines
	// (vfio.go): it selects on type and resource, and has no extended
	// resource.
	VFIO bool
	// NVIDIA is set for NVIDIA's DRA driver's classes, which NVIDIA
	// compatibility adds (nvidia.go); Resource is then the extended
	// resource it serves, if any.
	NVIDIA bool
	// Object is the DeviceClass.
	Object *resourceapi.DeviceClass
}

// Result is what Compile makes of a rule set.
type Result struct {
	// Classes are ordered by resource name.
	Classes []Class
	// Warnings name each expression or rule CEL cannot express (and the
	// resources that fell back because of it), and resources without a
	// class; each an *rules.Error naming rule, field and value.
	Warnings []*rules.Error
	// DevicePlugin lists the resources whose rules all say serve:
	// device-plugin: they get no class.
	DevicePlugin []string
}

// Class returns the class the rules give a resource name (not NVIDIA's).
func (r *Result) Class(resource string) (*Class, bool) {
	for i := range r.Classes {
		if r.Classes[i].Resource == resource && !r.Classes[i].NVIDIA {
			return &r.Classes[i], true
		}
	}
	return nil, false
}

// ClassDomain is the domain the classes of resource names are named in.
const ClassDomain = "featureplug.io"

// ClassName returns the DeviceClass name of a resource name: the name
// after the '/', then the domain, then ClassDomain, lowercase, '_' made
// '-' (example.com/a100-80gb -> a100-80gb.example.com.featureplug.io,
// nvidia.com/gpu -> gpu.nvidia.com.featureplug.io: never the name of
// NVIDIA's class gpu.nvidia.com). It fails when that is not a DNS
// subdomain.
func ClassName(resource string) (string, error) {
	domain, name, ok := strings.Cut(resource, "/")
	if !ok {
		return "", fmt.Errorf("resource name %q has no domain", resource)
	}
	out := strings.ReplaceAll(strings.ToLower(name+"."+domain+"."+ClassDomain), "_", "-")
	if errs := validation.IsDNS1123Subdomain(out); len(errs) > 0 {
		return "", fmt.Errorf("resource name %q makes class name %q, which is not a DNS subdomain: %s", resource, out, strings.Join(errs, "; "))
	}
	return out, nil
}

// compiler holds one Compile.
type compiler struct {
	source string
	schema *draattr.Schema
	views  []rules.RuleView
	// match is, per rule, its matchers as CEL (without the kind), or why
	// they have no CEL form.
	match    []node
	matchErr []*rules.Error
	warnings []*rules.Error
	warned   map[string]bool
}

// contribution is what one rule adds to one resource's class.
type contribution struct {
	rule     int
	cel      node
	fallback *rules.Error
	// vfio marks a rule of GPUs passed through to VMs (vfio.go).
	vfio bool
}

// Compile makes the classes of a rule set. The names templates give are
// those they give the devices of nodes (rules/catalog.Nodes is every
// device featureplug knows).
func Compile(rs *rules.RuleSet, nodes []rules.CheckNode) (*Result, error) {
	schema, err := draattr.For(rs.DRACompatibility())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rs.Source(), err)
	}
	c := &compiler{source: rs.Source(), schema: schema, views: rs.Views(), warned: map[string]bool{}}
	c.match = make([]node, len(c.views))
	c.matchErr = make([]*rules.Error, len(c.views))
	for i := range c.views {
		c.match[i], c.matchErr[i] = c.compileMatch(&c.views[i])
	}

	// Names and the input values that give them, per templated rule.
	type tuple = string
	names := make([]map[string]map[tuple][]string, len(c.views))
	var order []string // resource names in first-seen order
	seen := map[string]bool{}
	note := func(name string) {
		if !seen[name] {
			seen[name] = true
			order = append(order, name)
		}
	}
	for i, v := range c.views {
		if v.Dynamic {
			continue // dynamic rules below
		}
		if !v.Template {
			note(v.Resource)
			continue
		}
		names[i] = map[string]map[tuple][]string{}
	}
	// A name counts when some device reaches the rule that gives it: the
	// first matching rule without a node selector claims a device, the
	// ones with a node selector before it may (on nodes they select).
	var device string
	claimed := false
	for _, n := range nodes {
		rs.Matches(n.Inventory, func(m rules.RuleMatch) {
			if m.Device != device {
				device, claimed = m.Device, false
			}
			if claimed {
				return
			}
			v := &c.views[m.Rule]
			claimed = v.NodeSelector == ""
			if !v.Template || v.Dynamic || m.Name == "" {
				return
			}
			values := make([]string, len(v.TemplateInputs))
			for k, in := range v.TemplateInputs {
				values[k] = m.Attributes[in]
			}
			if names[m.Rule][m.Name] == nil {
				names[m.Rule][m.Name] = map[tuple][]string{}
			}
			names[m.Rule][m.Name][strings.Join(values, "\x00")] = values
			note(m.Name)
		})
	}

	contribs := c.dynamicContributions(rs, nodes, note) // dynamic.go
	for i := range c.views {
		v := &c.views[i]
		if v.Dynamic {
			continue
		}
		if v.Devices == plan.DeviceVFIO {
			c.addVFIOContributions(i, names[i], contribs) // vfio.go
			continue
		}
		claims, why := c.claims(i)
		if !v.Template {
			contribs[v.Resource] = append(contribs[v.Resource], contribution{rule: i, cel: claims, fallback: why})
			continue
		}
		if len(names[i]) == 0 {
			c.warn(&rules.Error{Source: c.source, Line: v.Line, Rule: v.Index, RuleName: v.Name, Field: "resource", Value: strconv.Quote(v.Resource),
				Msg: "the template gives no valid resource name on any device featureplug knows: no DeviceClass for it"})
			continue
		}
		for name, tuples := range names[i] {
			ct := contribution{rule: i, cel: claims, fallback: why}
			if why == nil {
				inputs, err := c.templateInputs(v, tuples)
				if err != nil {
					ct.fallback = err
				} else {
					ct.cel = and(claims, inputs)
				}
			}
			contribs[name] = append(contribs[name], ct)
		}
	}

	res := &Result{}
	slices.Sort(order)
	classNames := map[string]string{}
	for _, name := range order {
		cs := contribs[name]
		slices.SortFunc(cs, func(a, b contribution) int { return cmp.Compare(a.rule, b.rule) })
		cl, skip := c.class(name, cs)
		if skip {
			if !cs[0].vfio { // VFIO goes to device plugins unless a rule says dra
				res.DevicePlugin = append(res.DevicePlugin, name)
			}
			continue
		}
		className, err := ClassName(name)
		if err == nil {
			if other, dup := classNames[className]; dup {
				err = fmt.Errorf("resource name %q makes class name %q, as %q does", name, className, other)
			}
		}
		if err != nil {
			v := c.views[cs[0].rule]
			c.warn(&rules.Error{Source: c.source, Line: v.Line, Rule: v.Index, RuleName: v.Name, Field: "resource", Value: strconv.Quote(name),
				Msg: err.Error() + ": no DeviceClass for it"})
			continue
		}
		classNames[className] = name
		cl.Name = className
		if !cl.VFIO {
			cl.ExtendedResourceName = name
		}
		res.Classes = append(res.Classes, *cl)
	}
	if c.schema.Compatibility() == draattr.NVIDIA {
		c.addNVIDIAClasses(res) // nvidia.go
	}
	for i := range res.Classes {
		res.Classes[i].Object = object(&res.Classes[i])
	}
	res.Warnings = c.warnings
	return res, nil
}

// class assembles the class of one resource from the rules' contributions;
// skip is set when every rule serves it through the device plugin.
func (c *compiler) class(name string, cs []contribution) (cl *Class, skip bool) {
	cl = &Class{Resource: name}
	skip = true
	var conds []node
	var fallbacks []string
	ruleSeen := map[int]bool{}
	for _, ct := range cs {
		v := &c.views[ct.rule]
		if servedThroughDRA(v) { // vfio.go
			skip = false
		}
		if cl.Serve == "" {
			cl.Serve = v.Serve
		}
		if !ruleSeen[ct.rule] {
			ruleSeen[ct.rule] = true
			cl.Rules = append(cl.Rules, v.Name)
			if v.NodeSelector != "" {
				cl.NodeSelectors = append(cl.NodeSelectors, v.Name+": "+v.NodeSelector)
			}
		}
		if ct.fallback != nil {
			fallbacks = append(fallbacks, ct.fallback.Error())
			continue
		}
		conds = append(conds, ct.cel)
	}
	if skip {
		return nil, true
	}
	if cs[0].vfio {
		cl.VFIO, cl.Selector = true, vfioSelector(name) // vfio.go
		return cl, false
	}
	driver := equal(driverRef{}, strLit(draattr.Domain))
	cl.Selector = render(and(driver, or(conds...)))
	if len(cl.Selector) > resourceapi.CELSelectorExpressionMaxLength {
		fallbacks = append(fallbacks, fmt.Sprintf("the compiled selector is %d characters, over resource.k8s.io's %d", len(cl.Selector), resourceapi.CELSelectorExpressionMaxLength))
	}
	if len(fallbacks) > 0 {
		slices.Sort(fallbacks)
		cl.Fallback = strings.Join(slices.Compact(fallbacks), "; ")
		cl.Selector = render(and(driver, equal(attribute(draattr.AttrResource), strLit(name))))
	}
	return cl, false
}

// object makes the DeviceClass of a class.
func object(cl *Class) *resourceapi.DeviceClass {
	note := compiledNote
	switch {
	case cl.NVIDIA:
		note = nvidiaNote
	case cl.VFIO:
		note = vfioNote
	case cl.Fallback != "":
		note = "selects on the resource attribute: " + cl.Fallback
	}
	ann := map[string]string{
		AnnotationRules:    strings.Join(cl.Rules, ", "),
		AnnotationSelector: note,
	}
	if len(cl.NodeSelectors) > 0 {
		ann[AnnotationNodeSelectors] = strings.Join(cl.NodeSelectors, "; ") + " (a DeviceClass cannot select nodes)"
	}
	if len(cl.Rules) == 0 {
		delete(ann, AnnotationRules)
	}
	var extended *string
	if cl.ExtendedResourceName != "" {
		extended = ptr(cl.ExtendedResourceName)
	}
	return &resourceapi.DeviceClass{
		TypeMeta: metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        cl.Name,
			Labels:      map[string]string{LabelManagedBy: "featureplug"},
			Annotations: ann,
		},
		Spec: resourceapi.DeviceClassSpec{
			Selectors:            []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: cl.Selector}}},
			ExtendedResourceName: extended,
		},
	}
}

// warn records a warning once.
func (c *compiler) warn(e *rules.Error) {
	k := e.Error()
	if !c.warned[k] {
		c.warned[k] = true
		c.warnings = append(c.warnings, e)
	}
}

// claims returns the CEL condition under which rule i claims a device:
// its kind and matchers, and none of the earlier rules of its kind
// matching; or why it has none (which is also a warning).
func (c *compiler) claims(i int) (node, *rules.Error) {
	v := &c.views[i]
	if v.NodeSelector != "" {
		e := &rules.Error{Source: c.source, Line: v.Line, Rule: v.Index, RuleName: v.Name, Field: "nodeSelector", Value: strconv.Quote(v.NodeSelector),
			Msg: "a DeviceClass cannot select nodes, so whether the rule claims a device depends on what a class cannot see"}
		c.warn(e)
		return nil, e
	}
	if e := c.matchErr[i]; e != nil {
		return nil, e
	}
	// The earlier rules' matchers without their kind, which this rule
	// shares.
	conds := []node{c.kindCEL(v.Devices), c.match[i]}
	for j := range i {
		w := &c.views[j]
		if w.Devices != v.Devices {
			continue
		}
		if w.NodeSelector != "" {
			e := &rules.Error{Source: c.source, Line: v.Line, Rule: v.Index, RuleName: v.Name,
				Msg: fmt.Sprintf("earlier rules[%d] %q claims the same kind of device on the nodes its nodeSelector %q selects, which a DeviceClass cannot see", w.Index, w.Name, w.NodeSelector)}
			c.warn(e)
			return nil, e
		}
		if e := c.matchErr[j]; e != nil {
			e2 := &rules.Error{Source: c.source, Line: v.Line, Rule: v.Index, RuleName: v.Name,
				Msg: fmt.Sprintf("earlier rules[%d] %q claims the same kind of device first, and its match has no CEL form (%s: %s)", w.Index, w.Name, e.Field, e.Msg)}
			c.warn(e2)
			return nil, e2
		}
		conds = append(conds, not(c.match[j]))
	}
	return and(conds...), nil
}

// kindCEL is the condition of a rule's devices field: a gpu rule claims
// whole GPUs with MIG disabled, a mig rule MIG devices.
func (c *compiler) kindCEL(kind plan.DeviceKind) node {
	name, _ := c.schema.Published(string(kind), draattr.AttrType)
	typ := equal(attribute(name), strLit(kind))
	if kind == plan.DeviceGPU {
		f, _ := c.schema.Lookup(draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrMIGEnabled)
		return and(typ, not(value(f)))
	}
	return typ
}

// compileMatch compiles a rule's matchers (not its kind), or says (as a
// warning) why they have no CEL form.
func (c *compiler) compileMatch(v *rules.RuleView) (node, *rules.Error) {
	kind := string(v.Devices)
	fail := func(field string, value string, err error) *rules.Error {
		e := &rules.Error{Source: c.source, Line: v.Line, Rule: v.Index, RuleName: v.Name, Field: field, Value: value, Msg: "no CEL form: " + strings.TrimPrefix(err.Error(), errNoCEL.Error()+": ")}
		c.warn(e)
		return e
	}
	matcher := func(at string, m nfdv1alpha1.FeatureMatcher) (node, *rules.Error) {
		terms := make([]node, 0, len(m))
		for j := range m {
			term := &m[j]
			tp := fmt.Sprintf("%s[%d]", at, j)
			feature := strings.ToLower(term.Feature)
			if f, _ := c.schema.Lookup(kind, feature, ""); f.Absent {
				terms = append(terms, celFalse)
				continue
			}
			if term.MatchName != nil {
				return nil, fail(tp+".matchName", formatExpression(term.MatchName), noCEL("matchName matches attribute names, which a class does not list"))
			}
			if term.MatchExpressions == nil {
				continue
			}
			for _, key := range slices.Sorted(maps.Keys(*term.MatchExpressions)) {
				e := (*term.MatchExpressions)[key]
				ep := tp + ".matchExpressions." + key
				f, err := c.schema.Lookup(kind, feature, key)
				if err != nil {
					return nil, fail(ep, formatExpression(e), fmt.Errorf("%w: %v", errNoCEL, err))
				}
				cond, err := expression(f, e)
				if err != nil {
					return nil, fail(ep, formatExpression(e), err)
				}
				terms = append(terms, cond)
			}
		}
		return and(terms...), nil
	}
	all, err := matcher("matchFeatures", v.MatchFeatures)
	if err != nil {
		return nil, err
	}
	var anyOf node = celTrue
	if len(v.MatchAny) > 0 {
		elems := make([]node, 0, len(v.MatchAny))
		for j := range v.MatchAny {
			cond, err := matcher(fmt.Sprintf("matchAny[%d].matchFeatures", j), v.MatchAny[j].MatchFeatures)
			if err != nil {
				return nil, err
			}
			elems = append(elems, cond)
		}
		anyOf = or(elems...)
	}
	return and(all, anyOf), nil
}

// templateInputs returns the condition that a device's template inputs
// are one of the tuples that give a name.
func (c *compiler) templateInputs(v *rules.RuleView, tuples map[string][]string) (node, *rules.Error) {
	fail := func(msg string) *rules.Error {
		e := &rules.Error{Source: c.source, Line: v.Line, Rule: v.Index, RuleName: v.Name, Field: "resource", Value: strconv.Quote(v.Resource), Msg: msg}
		c.warn(e)
		return e
	}
	if !v.TemplateInputsKnown {
		return nil, fail("no CEL form: the template reads more than named attributes, so the names it gives cannot be traced back to attributes")
	}
	feature := discovery.FeatureGPU
	if v.Devices == plan.DeviceMIG {
		feature = discovery.FeatureMIG
	}
	forms := make([]draattr.Form, len(v.TemplateInputs))
	for k, in := range v.TemplateInputs {
		f, err := c.schema.Lookup(string(v.Devices), feature, in)
		if err != nil {
			return nil, fail("no CEL form: the template reads " + in + ": " + err.Error())
		}
		forms[k] = f
	}
	var alts []node
	for _, key := range slices.Sorted(maps.Keys(tuples)) {
		values := tuples[key]
		conds := make([]node, len(values))
		for k, val := range values {
			cond, err := expression(forms[k], &nfdv1alpha1.MatchExpression{Op: nfdv1alpha1.MatchIn, Value: []string{val}})
			if err != nil {
				return nil, fail(fmt.Sprintf("no CEL form: the template reads %s (%q): %v", v.TemplateInputs[k], val, err))
			}
			conds[k] = cond
		}
		alts = append(alts, and(conds...))
	}
	return or(alts...), nil
}

// formatExpression writes an expression as rules explanations do:
// "InRegexp [^NVIDIA H100]", "Gt 40000", "Ge 550 (version)".
func formatExpression(e *nfdv1alpha1.MatchExpression) string {
	var b strings.Builder
	b.WriteString(string(e.Op))
	switch {
	case len(e.Value) == 0:
	case len(e.Value) == 1 && (e.Op == nfdv1alpha1.MatchGt || e.Op == nfdv1alpha1.MatchGe || e.Op == nfdv1alpha1.MatchLt || e.Op == nfdv1alpha1.MatchLe):
		b.WriteString(" " + e.Value[0])
	default:
		b.WriteString(" [" + strings.Join(e.Value, ", ") + "]")
	}
	if e.Type != "" {
		b.WriteString(" (" + string(e.Type) + ")")
	}
	return b.String()
}

// CompileCatalog is Compile on every node of rules/catalog: every bundled
// fake node and every device of every catalog product.
func CompileCatalog(rs *rules.RuleSet) (*Result, error) {
	nodes, err := catalog.Nodes()
	if err != nil {
		return nil, fmt.Errorf("catalog nodes: %w", err)
	}
	return Compile(rs, nodes)
}
