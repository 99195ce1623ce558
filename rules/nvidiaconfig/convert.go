package nvidiaconfig

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Resource names NVIDIA's plugin advertises.
const (
	gpuResource     = "nvidia.com/gpu"
	migPrefix       = "nvidia.com/mig-"
	sharedSuffix    = ".shared"
	mixedMIGPattern = `nvidia.com/mig-{{ .profile | replace "+" "." }}`
)

// Options tune Convert.
type Options struct {
	// Default names the config for nodes without the
	// nvidia.com/device-plugin.config label (NVIDIA's config.default).
	// When empty and there is exactly one config, that config is the
	// default; with several, such nodes get NVIDIA's built-in defaults
	// (migStrategy none, nothing shared), with a warning.
	Default string
	// Env holds NVIDIA's device-plugin environment variables the configs
	// ran with, by name: EnvDisableHealthChecks and EnvEnableHealthChecks
	// become the rules file's health section (health.go); others are an
	// error.
	Env map[string]string
}

// Result is a conversion's output.
type Result struct {
	// Rules is a featureplug ResourceRules file (YAML) whose comments point
	// every rule at the file, config and field it comes from.
	Rules []byte
	// Warnings are what the configs ask for that the rules cannot give,
	// each saying what to do.
	Warnings []string
	// Settings are the configs' flags that featureplug's agent applies
	// itself (the same for every config: one agent serves every node).
	Settings []Setting
	// Refused are what the configs ask for that featureplug cannot give
	// and whose loss would change what containers get.
	Refused []string
}

// Convert turns NVIDIA device-plugin configs into one rules file. One
// config without a name gives rules without node selectors; named configs
// give rules that select nodes by the nvidia.com/device-plugin.config label.
// Problems that stop the conversion are returned together, each an *Error.
func Convert(cfgs []*Config, opts Options) (*Result, error) {
	if len(cfgs) == 0 {
		return nil, errors.New("no NVIDIA device-plugin config given")
	}
	var errs []error
	names := map[string]*Config{}
	for _, c := range cfgs {
		if len(cfgs) > 1 && c.Name == "" {
			errs = append(errs, &Error{File: c.File, Msg: "a config among several needs a name (a ConfigMap data key or a file named after the config)"})
			continue
		}
		if first, dup := names[c.Name]; dup && c.Name != "" {
			errs = append(errs, &Error{File: c.File, Config: c.Name, Msg: "config name already given by " + first.File})
		}
		names[c.Name] = c
	}
	def, hasDef := opts.Default, opts.Default != ""
	if hasDef {
		if _, ok := names[def]; !ok {
			errs = append(errs, &Error{File: cfgs[0].File, Msg: fmt.Sprintf("default config %q is not among the configs (%s)", def, strings.Join(sortedNames(cfgs), ", "))})
		}
	} else if len(cfgs) == 1 {
		def, hasDef = cfgs[0].Name, true
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	w := &writer{}
	res := &Result{}
	settings, err := mergeSettings(cfgs)
	if err != nil {
		return nil, err
	}
	res.Settings = settings
	for _, c := range cfgs {
		res.Refused = append(res.Refused, c.refused...)
	}
	w.header(cfgs, def, settings)
	named := len(cfgs) > 1 || cfgs[0].Name != ""
	all := sortedNames(cfgs)
	for _, c := range cfgs {
		res.Warnings = append(res.Warnings, c.warnings...)
		sel := selector{}
		switch {
		case !named || len(cfgs) == 1:
		case c.Name == def:
			sel = selector{op: "NotIn", values: without(all, def)}
		default:
			sel = selector{op: "In", values: []string{c.Name}}
		}
		cv := &converter{cfg: c, w: w, sel: sel, named: named}
		if err := cv.convert(); err != nil {
			errs = append(errs, err)
		}
		res.Warnings = append(res.Warnings, cv.warnings...)
	}
	if !hasDef {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s: no default config: nodes without the %s label get NVIDIA's built-in defaults "+
			"(every whole GPU as nvidia.com/gpu, nothing shared); choose one with --default-config NAME (NVIDIA's config.default)", cfgs[0].File, NodeLabel))
		w.comment("Nodes without the " + NodeLabel + " label (no default config was given): NVIDIA's built-in defaults,")
		w.comment("migStrategy none and nothing shared.")
		w.rule(ruleOut{name: "default-gpu", devices: "gpu", sel: selector{op: "NotIn", values: all}, resource: gpuResource})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	warnings, err := w.healthChecks(opts.Env)
	if err != nil {
		return nil, err
	}
	res.Warnings = append(res.Warnings, warnings...)
	res.Rules = []byte(w.b.String())
	return res, nil
}

// sortedNames returns the configs' names, sorted.
func sortedNames(cfgs []*Config) []string {
	out := make([]string, 0, len(cfgs))
	for _, c := range cfgs {
		out = append(out, c.Name)
	}
	slices.Sort(out)
	return out
}

// without returns list without s.
func without(list []string, s string) []string {
	return slices.DeleteFunc(slices.Clone(list), func(e string) bool { return e == s })
}

// selector is a rule's node selector on NodeLabel; op "" is none.
type selector struct {
	op     string
	values []string
}

// share is one shared resource of a config, with where it came from.
type share struct {
	rep   *Replicated
	res   Resource
	index int
	name  string // the name it is advertised under
	used  bool
}

// origin says where the share came from, for comments.
func (s *share) origin() string {
	o := fmt.Sprintf("%s.resources[%d] (name %s, replicas %d)", s.rep.Field, s.index, s.res.Name, s.res.Replicas)
	if s.name != s.res.Name {
		o += fmt.Sprintf(", %s.renameByDefault", s.rep.Field)
	}
	return o
}

// converter converts one config.
type converter struct {
	cfg      *Config
	w        *writer
	sel      selector
	named    bool
	shares   map[string]*share // by the name shared
	order    []*share
	mps      bool
	warnings []string
	errs     []error
}

func (cv *converter) warn(field, value, msg string) {
	cv.warnings = append(cv.warnings, where(cv.cfg.File, cv.cfg.Name, field)+msg+have(value))
}

func (cv *converter) fail(field, value, msg string) {
	cv.errs = append(cv.errs, &Error{File: cv.cfg.File, Config: cv.cfg.Name, Field: field, Value: value, Msg: msg})
}

// ruleName prefixes the config's name to a rule name.
func (cv *converter) ruleName(s string) string {
	if cv.cfg.Name == "" {
		return s
	}
	return cv.cfg.Name + "-" + s
}

// convert writes the config's rules.
func (cv *converter) convert() error {
	c := cv.cfg
	rep := c.TimeSlicing
	if c.MPS != nil {
		rep, cv.mps = c.MPS, true
		if c.TimeSlicing != nil {
			cv.warn("sharing.timeSlicing", "", "ignored: sharing.mps is set too, and NVIDIA's plugin then shares with MPS only; remove one of them")
		}
	}
	cv.shares = map[string]*share{}
	if rep != nil {
		cv.collect(rep)
	}
	if len(cv.errs) > 0 {
		return errors.Join(cv.errs...)
	}

	what := "config " + strconv.Quote(c.Name)
	if c.Name == "" {
		what = "the config"
	}
	if c.Origin != "" {
		what += " (" + c.Origin + ")"
	}
	cv.w.blank()
	cv.w.comment(fmt.Sprintf("From %s, %s: flags.migStrategy %s.", c.File, what, c.MIGStrategy))
	switch {
	case cv.sel.op == "In":
		cv.w.comment(fmt.Sprintf("For nodes labelled %s=%s.", NodeLabel, c.Name))
	case cv.sel.op == "NotIn" && len(cv.sel.values) > 0:
		cv.w.comment(fmt.Sprintf("The default config: for nodes without the %s label, or labelled %s.", NodeLabel, c.Name))
	case cv.sel.op == "NotIn":
		cv.w.comment("The default config: for every node.")
	}

	gpu := cv.shareOf(gpuResource)
	gpuRule := ruleOut{name: cv.ruleName("gpu"), devices: "gpu", sel: cv.sel, resource: gpuResource}
	gpuRule.origin = "whole GPUs, as nvidia.com/gpu"
	if c.MIGStrategy == MIGStrategyNone {
		gpuRule.origin += " (a GPU in MIG mode is not advertised: featureplug cannot hand it out whole, which NVIDIA's plugin does under migStrategy none)"
	}
	gpuRule.apply(gpu, cv.mps)
	cv.w.rule(gpuRule)

	switch c.MIGStrategy {
	case MIGStrategySingle:
		if gpu != nil && cv.mps {
			cv.warn(gpu.rep.Field+fmt.Sprintf(".resources[%d]", gpu.index), gpu.res.Name,
				"MIG devices are not advertised: MPS cannot share a MIG device (NVIDIA's plugin does not serve them either); use time-slicing, or a node without MIG")
			break
		}
		r := ruleOut{name: cv.ruleName("mig"), devices: "mig", sel: cv.sel, resource: gpuResource,
			origin: "MIG devices, as nvidia.com/gpu (migStrategy single)"}
		r.apply(gpu, false)
		cv.w.rule(r)
	case MIGStrategyMixed:
		for _, s := range cv.order {
			if !strings.HasPrefix(s.res.Name, migPrefix) {
				continue
			}
			s.used = true
			profile := strings.TrimPrefix(s.res.Name, migPrefix)
			r := ruleOut{name: cv.ruleName("mig-" + profile), devices: "mig", sel: cv.sel, resource: s.res.Name,
				profiles: profileNames(profile), origin: "MIG " + profile + " devices (migStrategy mixed)"}
			r.apply(s, false)
			cv.w.rule(r)
		}
		cv.w.rule(ruleOut{name: cv.ruleName("mig"), devices: "mig", sel: cv.sel, resource: mixedMIGPattern,
			origin: "every other MIG device, as nvidia.com/mig-<profile> (migStrategy mixed)"})
	}
	for _, s := range cv.order {
		if s.used {
			continue
		}
		field := fmt.Sprintf("%s.resources[%d].name", s.rep.Field, s.index)
		switch {
		case strings.HasPrefix(s.res.Name, migPrefix) && cv.mps && c.MIGStrategy == MIGStrategyMixed:
			// reported by collect
		case strings.HasPrefix(s.res.Name, migPrefix):
			cv.warn(field, strconv.Quote(s.res.Name), "no effect: with migStrategy "+c.MIGStrategy+" no device is advertised under that name (MIG devices are "+
				map[string]string{MIGStrategyNone: "not advertised", MIGStrategySingle: "nvidia.com/gpu"}[c.MIGStrategy]+")")
		default:
			cv.warn(field, strconv.Quote(s.res.Name), "no effect: NVIDIA's plugin advertises only nvidia.com/gpu and nvidia.com/mig-<profile>, so nothing is shared under that name")
		}
	}
	return nil
}

// shareOf returns the share of a name and marks it used; nil when the
// name is not shared.
func (cv *converter) shareOf(name string) *share {
	s := cv.shares[name]
	if s != nil {
		s.used = true
	}
	return s
}

// collect reads the shared resources of the active sharing, as NVIDIA's
// plugin applies them.
func (cv *converter) collect(rep *Replicated) {
	if cv.mps && rep.FailRequestsGreaterThanOne != nil && !*rep.FailRequestsGreaterThanOne {
		cv.warn(rep.Field+".failRequestsGreaterThanOne", "false",
			"ignored: featureplug always refuses requests for more than one MPS replica (each replica's limits are per container); nothing to do")
	}
	for i, r := range rep.Resources {
		f := fmt.Sprintf("%s.resources[%d]", rep.Field, i)
		if first, dup := cv.shares[r.Name]; dup {
			cv.fail(f+".name", strconv.Quote(r.Name), fmt.Sprintf("already shared by %s.resources[%d]", rep.Field, first.index))
			continue
		}
		name := r.Name
		if rep.RenameByDefault {
			name = r.Name + sharedSuffix
		}
		if r.Rename != "" && r.Rename != name {
			cv.warn(f+".rename", strconv.Quote(r.Rename), fmt.Sprintf("ignored, as NVIDIA's plugin ignores it (advertised as %s); "+
				"to advertise the devices as %s with featureplug, edit the resource of the rule this entry gives", name, r.Rename))
		}
		if r.Devices != "all" {
			cv.warn(f+".devices", r.Devices, "ignored, as NVIDIA's plugin ignores it (every device of the resource is shared); "+
				"to share only some devices with featureplug, give them a rule of their own, matching nvidia.gpu index or uuid, with its own resource name")
		}
		if cv.mps && strings.HasPrefix(r.Name, migPrefix) {
			cv.fail(f+".name", strconv.Quote(r.Name), "MPS cannot share MIG devices (NVIDIA's plugin refuses it too); share them with sharing.timeSlicing")
			continue
		}
		s := &share{rep: rep, res: r, index: i, name: name}
		cv.shares[r.Name] = s
		cv.order = append(cv.order, s)
	}
}

// profileNames returns the MIG profiles a mixed-strategy resource name
// stands for: NVIDIA writes a "+" of a profile as ".", so mig-1g.10gb.me
// is profile 1g.10gb+me.
func profileNames(name string) []string {
	out := []string{name}
	if i := strings.Index(name, "gb."); i >= 0 {
		out = append(out, name[:i+2]+"+"+name[i+3:])
	}
	return out
}

// ruleOut is one rule to write.
type ruleOut struct {
	name, devices string
	sel           selector
	profiles      []string
	resource      string
	origin        string
	sharing       *share
	mps           bool
	failGT1       bool
}

// apply gives a rule the sharing of a share (nil: none).
func (r *ruleOut) apply(s *share, mps bool) {
	if s == nil {
		return
	}
	r.sharing, r.mps = s, mps
	r.resource = s.name
	r.failGT1 = mps || s.rep.FailRequestsGreaterThanOne != nil && *s.rep.FailRequestsGreaterThanOne
}

// writer writes the rules file.
type writer struct {
	b strings.Builder
}

func (w *writer) comment(s string) { w.b.WriteString("# " + s + "\n") }

func (w *writer) blank() { w.b.WriteString("\n") }

func (w *writer) line(indent int, s string) {
	w.b.WriteString(strings.Repeat("  ", indent) + s + "\n")
}

// header writes the file's head.
func (w *writer) header(cfgs []*Config, def string, settings []Setting) {
	w.comment("Converted by `featureplug rules import` from NVIDIA device-plugin configs:")
	for _, c := range cfgs {
		s := "  " + c.File
		if c.Origin != "" {
			s += ", " + c.Origin
		}
		if c.Name != "" {
			s += ": config " + strconv.Quote(c.Name)
			if c.Name == def && len(cfgs) > 1 {
				s += " (the default)"
			}
		}
		w.comment(s)
	}
	if len(settings) > 0 {
		w.comment("A rules file cannot carry these flags of the configs; run the agent with them")
		w.comment("(featureplug run --rules with the config itself applies them):")
		for _, s := range settings {
			w.comment(fmt.Sprintf("  %s   (%s %s)", s, s.Field, s.Written))
		}
	}
	w.comment("Each rule's comment names the field it comes from. Check it, on a fake node")
	w.comment("like the nodes it is for (or on the node itself, without --fake-node), with:")
	explain := "  featureplug rules explain --rules FILE --fake-node dgx-h100"
	if len(cfgs) > 1 || cfgs[0].Name != "" {
		explain += " --node-labels " + NodeLabel + "=NAME"
	}
	w.comment(explain)
	w.line(0, "apiVersion: featureplug.io/v1alpha1")
	w.line(0, "kind: ResourceRules")
	w.line(0, "rules:")
}

// rule writes one rule.
func (w *writer) rule(r ruleOut) {
	w.comment(r.origin)
	if r.sharing != nil {
		w.comment("  shared by " + r.sharing.origin())
	}
	w.line(0, "- name: "+quote(r.name))
	w.line(1, "devices: "+r.devices)
	if r.sel.op != "" {
		w.line(1, "nodeSelector:")
		w.line(2, "matchExpressions:")
		vals := make([]string, len(r.sel.values))
		for i, v := range r.sel.values {
			vals[i] = quote(v)
		}
		w.line(2, fmt.Sprintf("- {key: %s, operator: %s, values: [%s]}", NodeLabel, r.sel.op, strings.Join(vals, ", ")))
	}
	if len(r.profiles) > 0 {
		vals := make([]string, len(r.profiles))
		for i, v := range r.profiles {
			vals[i] = quote(v)
		}
		w.line(1, "matchFeatures:")
		w.line(1, "- feature: nvidia.mig")
		w.line(2, "matchExpressions:")
		w.line(3, fmt.Sprintf("profile: {op: In, value: [%s]}", strings.Join(vals, ", ")))
	}
	w.line(1, "resource: "+quote(r.resource))
	if r.sharing == nil {
		return
	}
	strategy := "time-slicing"
	if r.mps {
		strategy = "mps"
	}
	w.line(1, "sharing:")
	w.line(2, "strategy: "+strategy)
	w.line(2, "replicas: "+strconv.Itoa(r.sharing.res.Replicas))
	if r.failGT1 {
		w.line(2, "failRequestsGreaterThanOne: true")
	}
}

// quote writes a string as a YAML scalar: plain when that is safe,
// single-quoted otherwise.
func quote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-./_") == "" &&
		!strings.ContainsAny(s[:1], "-.0123456789") && s != "true" && s != "false" && s != "null" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
