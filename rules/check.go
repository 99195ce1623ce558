package rules

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// CheckNode is a node CheckNodes tries a rules file on.
type CheckNode struct {
	// Name names the node in errors, e.g. "fake node dgx-a100".
	Name string
	// Inventory is the node's devices.
	Inventory *discovery.Inventory
	// Synthetic marks an inventory made to hold every device a product can
	// have rather than the shape of a real node: only resource names are
	// checked on it, not the caps on device IDs.
	Synthetic bool
}

// CheckNodes tries every rule on every device of every node, as if every
// node selector selected the node and no earlier rule claimed the device,
// and returns every problem, each an *Error naming the rule, the field,
// the node and device (product, MIG profile) and the offending value:
//
//   - a template that fails on a device or gives it an invalid resource
//     name (at run time that device would be left out);
//   - on nodes that are not Synthetic, a plan that cannot be made without
//     node labels, and a rule that would give one resource more device IDs
//     than MaxDevicesPerResource, or the node more than MaxDevicesPerNode,
//     if its node selector selected the node (at run time that plan would
//     be refused and the last good plan kept).
//
// A problem found on several devices is reported once, on the first.
func (rs *RuleSet) CheckNodes(nodes []CheckNode) error {
	var errs []error
	seen := make(map[string]bool)
	add := func(key string, e *Error) {
		if key == "" {
			key = e.Error()
		}
		if !seen[key] {
			seen[key] = true
			errs = append(errs, e)
		}
	}
	for _, n := range nodes {
		rs.checkNode(n, add)
	}
	return errors.Join(errs...)
}

// checkNode is CheckNodes on one node.
func (rs *RuleSet) checkNode(n CheckNode, add func(key string, e *Error)) {
	pl := newPlanner(rs, make([]string, len(rs.rules)))
	// perName counts, per rule and resource name, the devices the rule
	// would give it; perDevice is, per device, the most replicas any
	// matching rule would give it.
	type ruleName struct {
		rule int
		name string
	}
	perName := make(map[ruleName]int)
	var order []ruleName
	total := 0
	visitTargets(n.Inventory, func(t *target) {
		desc := checkDescription(t)
		most := 0
		for _, r := range rs.rules {
			if r.devices != t.kind || (t.kind == plan.DeviceGPU && t.gpu.MIGEnabled) {
				continue
			}
			if !pl.evaluate(r, t).match {
				continue
			}
			name := r.resource
			if r.tmpl != nil {
				out := pl.render(r, t)
				switch {
				case out.err != nil:
					add(fmt.Sprintf("%d\x00fails\x00%v", r.index, out.err),
						rs.checkError(r, fmt.Sprintf("template fails on %s, %s: %v", n.Name, desc, out.err)))
					continue
				case out.invalid != nil:
					add(fmt.Sprintf("%d\x00invalid\x00%s", r.index, out.name),
						rs.checkError(r, fmt.Sprintf("template gives %q on %s, %s: %v", out.name, n.Name, desc, out.invalid)))
					continue
				}
				name = out.name
			}
			k := ruleName{r.index, name}
			if _, ok := perName[k]; !ok {
				order = append(order, k)
			}
			perName[k]++
			most = max(most, r.sharing.DeviceReplicas())
		}
		total += most
	})
	if n.Synthetic {
		return
	}
	capped := false
	for _, k := range order {
		r := rs.rules[k.rule]
		res := plan.Resource{Name: k.name, Sharing: r.sharing, Devices: make([]plan.Device, perName[k])}
		if err := plan.CheckResourceCaps(&res); err != nil {
			capped = true
			add("", &Error{Source: rs.source, Line: r.line, Rule: r.index, RuleName: r.name,
				Msg: fmt.Sprintf("on %s, if the rule claimed every device it matches: %v", n.Name, err)})
		}
	}
	if total > plan.MaxDevicesPerNode {
		capped = true
		add("", &Error{Source: rs.source, Rule: -1, Msg: fmt.Sprintf("on %s, if every rule claimed every device it matches: %d device IDs, over the cap of %d per node (plan.MaxDevicesPerNode)",
			n.Name, total, plan.MaxDevicesPerNode)})
	}
	if capped {
		return // Plan would repeat the cap in other words
	}
	if _, err := rs.Plan(n.Inventory, nil); err != nil {
		var list interface{ Unwrap() []error }
		if errors.As(err, &list) {
			for _, e := range list.Unwrap() {
				add("", withNode(e, n.Name))
			}
		} else {
			add("", withNode(err, n.Name))
		}
	}
}

// withNode says on which node a plan error happened.
func withNode(err error, node string) *Error {
	var e *Error
	if errors.As(err, &e) {
		c := *e
		c.Msg = "on " + node + ": " + c.Msg
		return &c
	}
	return &Error{Rule: -1, Msg: "on " + node + ": " + err.Error()}
}

// checkError is a CheckNodes problem with a rule's resource template.
func (rs *RuleSet) checkError(r *rule, msg string) *Error {
	return &Error{Source: rs.source, Line: r.resourceLine, Rule: r.index, RuleName: r.name,
		Field: "resource", Value: strconv.Quote(r.resource), Msg: msg}
}

// checkDescription names a device by what makes it differ for rules: its
// product and, for a MIG device, its profile.
func checkDescription(t *target) string {
	if t.vfio != nil {
		return t.vfio.Product + " on vfio-pci"
	}
	if t.mig != nil {
		return fmt.Sprintf("%s MIG %s", t.gpu.Product, t.mig.Profile)
	}
	return t.gpu.Product
}
