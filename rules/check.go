package rules

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// A rules file is judged in one of two ways, and both try only what the
// agent would try:
//
//   - on a node (CheckOn): the plan Plan makes of the node's devices and
//     labels, which is the plan the agent would serve, and every reason the
//     agent would refuse it or leave devices out of it;
//   - on no node in particular (CheckNodes, `rules check` without a node):
//     every rule on every device of every catalog node, as if its node
//     selector selected the node and no earlier rule claimed the device, the
//     caps on the largest node each product makes, and the plans of the
//     bundled nodes under every node-label set the rules' selectors ask for.
//     What passes there is served in full on any node the catalog can make,
//     but for two verdicts that depend on the node alone and only CheckOn
//     can tell: a plan that serves nothing on a node the rules do not aim
//     at, and the single strategy refusing a node whose MIG devices are not
//     uniform.

// CheckOn plans rs on one node exactly as the agent does, with Plan and the
// node's labels, and returns the plan with every reason the agent would
// refuse it or leave devices out of it, each an *Error carrying the
// agent's own message:
//
//   - the errors of Plan (caps on device IDs counted on the node's real
//     devices, one resource with two sharing settings or two serves, ...),
//     for which the agent keeps its last good plan;
//   - each device left out because its rule's template fails or gives an
//     invalid name, or because the single strategy refuses the node
//     (plan.Problem), which the agent does not serve;
//   - a plan that serves none of the node's devices while the file does not
//     say serveNothing (plan.Plan.CheckServes), which would withdraw every
//     resource of an agent serving some.
//
// The plan is nil only when Plan failed. node names the node in errors
// that are about the node as a whole.
func (rs *RuleSet) CheckOn(node string, inv *discovery.Inventory, nodeLabels map[string]string) (*plan.Plan, error) {
	p, pl, err := rs.plan(inv, nodeLabels)
	if err != nil {
		return nil, err
	}
	errs := make([]error, 0, len(p.Problems)+1)
	for _, e := range pl.problemErrs {
		errs = append(errs, e)
	}
	// The other problems are the ones of the plan as a whole (the single
	// strategy refusing a node): one error per message, with its count.
	var other []string
	count := make(map[string]int)
	for _, pr := range p.Problems[len(pl.problemErrs):] {
		if count[pr.Message] == 0 {
			other = append(other, pr.Message)
		}
		count[pr.Message]++
	}
	for _, msg := range other {
		errs = append(errs, &Error{Source: rs.source, Rule: -1, Msg: fmt.Sprintf("on %s: %s (%d devices left out)", node, msg, count[msg])})
	}
	if err := p.CheckServes(); err != nil {
		errs = append(errs, &Error{Source: rs.source, Rule: -1, Msg: "on " + node + ": " + err.Error()})
	}
	return p, errors.Join(errs...)
}

// CheckNode is a node CheckNodes tries a rules file on.
type CheckNode struct {
	// Name names the node in errors, e.g. "fake node dgx-a100".
	Name string
	// Inventory is the node's devices.
	Inventory *discovery.Inventory
	// Synthetic marks an inventory made to hold one device of each kind a
	// product can have rather than the shape of a real node: resource
	// names are checked on it, and the caps on device IDs only on the
	// largest node it stands for (Largest).
	Synthetic bool
	// Largest, on a Synthetic node, describes the largest node its
	// devices' products make; nil leaves the caps unchecked there.
	Largest *LargestNode
}

// LargestNode is the largest node of one product that a Synthetic node's
// devices stand for: GPUs GPUs of the product, each whole or with as many
// MIG devices as one GPU holds. CheckNodes counts the device IDs a rule
// would advertise there, so that the caps hold on any node the catalog
// can make.
type LargestNode struct {
	// GPUs is how many GPUs the node holds.
	GPUs int
	// PerGPU is, per MIG device UUID of the synthetic inventory, how many
	// MIG devices like it (same profile, same compute instance size) one
	// GPU can hold; absent counts one.
	PerGPU map[string]int
}

// CheckNodes tries every rule on every device of every node, as if every
// node selector selected the node and no earlier rule claimed the device,
// and returns every problem, each an *Error naming the rule, the field,
// the node and device (product, MIG profile) and the offending value:
//
//   - a template that fails on a device or gives it an invalid resource
//     name (at run time that device would be left out);
//   - a resource that would get more device IDs than MaxDevicesPerResource,
//     or a node more than MaxDevicesPerNode, if every rule claimed every
//     device it matches: on nodes that are not Synthetic as they are, and
//     on the largest node of each product of the Synthetic ones (at run
//     time that plan would be refused and the last good plan kept);
//   - on nodes that are not Synthetic, a plan that cannot be made, with no
//     node labels and with the labels each node selector (and all of them
//     together) selects.
//
// A problem found on several devices or nodes is reported once, on the
// first.
func (rs *RuleSet) CheckNodes(nodes []CheckNode) error {
	c := &checkRun{rs: rs, seen: make(map[string]bool), largest: make(map[largestKey]*largestTally), dynamic: make(map[int]*dynamicTally)}
	for _, n := range nodes {
		c.node(n)
	}
	if len(c.errs) == 0 {
		c.mixed(nodes)
	}
	c.largestCaps()
	c.dynamicProfiles() // migdynamic_check.go
	return errors.Join(c.errs...)
}

// checkRun is the state of one CheckNodes.
type checkRun struct {
	rs   *RuleSet
	errs []error
	seen map[string]bool
	// largest tallies the Synthetic nodes' devices per product and kind,
	// for the caps on the largest nodes; largestOrder is its keys in the
	// order first seen.
	largest      map[largestKey]*largestTally
	largestOrder []largestKey
	// dynamic tallies, per dynamic rule (by index), the catalog GPUs it
	// matched and their profiles (migdynamic_check.go).
	dynamic map[int]*dynamicTally
}

// add records a problem once; key identifies it ("": its text).
func (c *checkRun) add(key string, e *Error) {
	if key == "" {
		key = e.Error()
	}
	if !c.seen[key] {
		c.seen[key] = true
		c.errs = append(c.errs, e)
	}
}

// given is what the rules matching one device give it under one resource
// name: the first rule giving the name, and the most replicas any of them
// gives.
type given struct {
	rule    *rule
	sharing plan.Sharing
}

// nameCount is a resource name with the devices its rules would give it on
// one node.
type nameCount struct {
	given
	devices int
}

// node is CheckNodes on one node.
func (c *checkRun) node(n CheckNode) {
	rs := c.rs
	pl := newPlanner(rs, make([]string, len(rs.rules)))
	perName := make(map[string]*nameCount)
	var order []string
	total := 0
	names := make(map[string]given)
	visitTargets(n.Inventory, func(t *target) {
		desc := checkDescription(t)
		clear(names)
		most := 0
		for _, r := range rs.rules {
			if r.dynamic != nil {
				c.dynamicOn(n, pl, r, t) // migdynamic_check.go
				continue
			}
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
					c.add(fmt.Sprintf("%d\x00fails\x00%v", r.index, out.err),
						rs.checkError(r, fmt.Sprintf("template fails on %s, %s: %v", n.Name, desc, out.err)))
					continue
				case out.invalid != nil:
					c.add(fmt.Sprintf("%d\x00invalid\x00%s", r.index, out.name),
						rs.checkError(r, fmt.Sprintf("template gives %q on %s, %s: %v", out.name, n.Name, desc, out.invalid)))
					continue
				}
				name = out.name
			}
			g, ok := names[name]
			if !ok {
				g.rule = r
			}
			if !ok || r.sharing.DeviceReplicas() > g.sharing.DeviceReplicas() {
				g.sharing = r.sharing
			}
			names[name] = g
			most = max(most, r.sharing.DeviceReplicas())
		}
		if n.Synthetic {
			if n.Largest != nil {
				c.tally(n.Largest, t, names, most)
			}
			return
		}
		for _, name := range slices.Sorted(maps.Keys(names)) {
			nc, ok := perName[name]
			if !ok {
				nc = &nameCount{given: names[name]}
				perName[name] = nc
				order = append(order, name)
			}
			nc.merge(names[name])
			nc.devices++
		}
		total += most
	})
	if n.Synthetic {
		return
	}
	capped := false
	for _, name := range order {
		nc := perName[name]
		if c.resourceCap(name, nc.given, nc.devices, "on "+n.Name) {
			capped = true
		}
	}
	if total > plan.MaxDevicesPerNode {
		capped = true
		c.add("caps\x00node", &Error{Source: rs.source, Rule: -1, Msg: fmt.Sprintf("on %s, if every rule claimed every device it matches: %d device IDs, over the cap of %d per node (plan.MaxDevicesPerNode)",
			n.Name, total, plan.MaxDevicesPerNode)})
	}
	if capped {
		return // Plan would repeat the cap in other words
	}
	for _, nodeLabels := range rs.labelSets() {
		if _, err := rs.Plan(n.Inventory, nodeLabels); err != nil {
			on := n.Name
			if len(nodeLabels) > 0 {
				on += " with node labels " + labels.Set(nodeLabels).String()
			}
			for _, e := range splitJoined(err) {
				c.add("", withNode(e, on))
			}
		}
	}
}

// mixed plans, under each label set the nodes are planned with, one node
// holding the devices of every node checked: a real node may mix products
// and MIG layouts (the catalog's nodes each hold one), and rules that give
// one resource two sharings or two serves on devices of two catalog nodes
// refuse the plan of a node that has both. One error per rule and field.
func (c *checkRun) mixed(nodes []CheckNode) {
	rs := c.rs
	for _, nodeLabels := range rs.labelSets() {
		pl := newPlanner(rs, rs.nodeMisses(labels.Set(nodeLabels)))
		for _, n := range nodes {
			visitTargets(n.Inventory, func(t *target) { pl.decide(t) })
		}
		for _, err := range pl.errs {
			var e *Error
			if !errors.As(err, &e) || (e.Field != "sharing" && e.Field != "serve") {
				continue
			}
			on := "a node holding devices of several catalog nodes"
			if len(nodeLabels) > 0 {
				on += " with node labels " + labels.Set(nodeLabels).String()
			}
			c.add(fmt.Sprintf("mixed\x00%d\x00%s", e.Rule, e.Field), withNode(e, on))
		}
	}
}

// merge takes in what another device's rules give the same name: the
// first rule stays, the most replicas win.
func (nc *nameCount) merge(g given) {
	if g.rule.index < nc.rule.index {
		nc.rule = g.rule
	}
	if g.sharing.DeviceReplicas() > nc.sharing.DeviceReplicas() {
		nc.sharing = g.sharing
	}
}

// resourceCap checks that a name given devices devices with g's sharing
// stays within the caps of one resource, reporting it on g's rule once per
// name; it reports whether the name is over.
func (c *checkRun) resourceCap(name string, g given, devices int, on string) bool {
	res := plan.Resource{Name: name, Sharing: g.sharing, Devices: make([]plan.Device, devices)}
	err := plan.CheckResourceCaps(&res)
	if err == nil {
		return false
	}
	c.add("caps\x00"+name, &Error{Source: c.rs.source, Line: g.rule.line, Rule: g.rule.index, RuleName: g.rule.name,
		Msg: fmt.Sprintf("%s, if every rule claimed every device it matches: %v", on, err)})
	return true
}

// largestKey is one product and device kind of the Synthetic nodes: a GPU
// of the largest node is either whole or holds MIG devices.
type largestKey struct {
	product string
	mig     bool
}

// largestTally counts, for one product and kind, what the largest node
// would hold.
type largestTally struct {
	gpus int
	// perGPU is the most devices of the kind one GPU holds.
	perGPU int
	// names are the resource names the rules give devices of the kind, with
	// how many of the name's devices one GPU can hold.
	names     map[string]*nameCount
	nameOrder []string
	// ids is how many device IDs one GPU's devices can take if every rule
	// claimed every device it matches; mostReplicas is the most any device
	// takes.
	ids, mostReplicas int
}

// tally adds one device of a Synthetic node, with the names its rules give
// it and the most replicas any of them does, to its product's largest node.
func (c *checkRun) tally(ln *LargestNode, t *target, names map[string]given, most int) {
	k := largestKey{product: t.gpu.Product, mig: t.mig != nil}
	lt, ok := c.largest[k]
	if !ok {
		lt = &largestTally{names: make(map[string]*nameCount)}
		c.largest[k] = lt
		c.largestOrder = append(c.largestOrder, k)
	}
	lt.gpus = max(lt.gpus, ln.GPUs)
	per := 1
	if t.mig != nil {
		if n, ok := ln.PerGPU[t.mig.UUID]; ok && n > 0 {
			per = n
		}
	}
	lt.perGPU = max(lt.perGPU, per)
	for _, name := range slices.Sorted(maps.Keys(names)) {
		nc, ok := lt.names[name]
		if !ok {
			nc = &nameCount{given: names[name]}
			lt.names[name] = nc
			lt.nameOrder = append(lt.nameOrder, name)
		}
		nc.merge(names[name])
		nc.devices += per
	}
	lt.ids += per * most
	lt.mostReplicas = max(lt.mostReplicas, most)
}

// largestCaps checks the caps on the largest node of every product of the
// Synthetic nodes. One GPU holds at most perGPU devices of a kind, so a
// name holds on one GPU the fewer of perGPU and the devices like those its
// rules match that fit; a node of gpus GPUs holds gpus times that.
func (c *checkRun) largestCaps() {
	for _, k := range c.largestOrder {
		lt := c.largest[k]
		on := fmt.Sprintf("on the largest node of %s (%d GPUs", k.product, lt.gpus)
		if k.mig {
			on += fmt.Sprintf(", %d MIG devices each", lt.perGPU)
		}
		on += ")"
		for _, name := range lt.nameOrder {
			nc := lt.names[name]
			c.resourceCap(name, nc.given, lt.gpus*min(lt.perGPU, nc.devices), on)
		}
		if total := lt.gpus * min(lt.ids, lt.perGPU*lt.mostReplicas); total > plan.MaxDevicesPerNode {
			c.add("caps\x00node", &Error{Source: c.rs.source, Rule: -1, Msg: fmt.Sprintf("%s, if every rule claimed every device it matches: %d device IDs, over the cap of %d per node (plan.MaxDevicesPerNode)",
				on, total, plan.MaxDevicesPerNode)})
		}
	}
}

// labelSets returns the node-label sets CheckNodes plans the bundled nodes
// with: none, then for each distinct node selector labels it selects, then
// labels that select as many of them at once as can be (in rule order), so
// that rules which only meet on a labelled node are planned together.
func (rs *RuleSet) labelSets() []map[string]string {
	out := []map[string]string{nil}
	seen := map[string]bool{"": true}
	addSet := func(set map[string]string) {
		key := labels.Set(set).String()
		if !seen[key] {
			seen[key] = true
			out = append(out, set)
		}
	}
	all := map[string]string{}
	var chosen []labels.Selector
	for _, r := range rs.rules {
		if r.selector == nil {
			continue
		}
		set, ok := selectedLabels(r.selector)
		if !ok {
			continue
		}
		addSet(set)
		merged := maps.Clone(all)
		maps.Copy(merged, set)
		fits := r.selector.Matches(labels.Set(merged))
		for _, s := range chosen {
			fits = fits && s.Matches(labels.Set(merged))
		}
		if fits {
			all, chosen = merged, append(chosen, r.selector)
		}
	}
	if len(chosen) > 1 {
		addSet(all)
	}
	return out
}

// selectedLabels returns labels a selector selects, built from its
// requirements (a key it requires gets a value it allows; a key it
// forbids is left out), and whether they do.
func selectedLabels(sel labels.Selector) (map[string]string, bool) {
	reqs, _ := sel.Requirements()
	set := make(map[string]string, len(reqs))
	for _, req := range reqs {
		switch req.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			if vals := req.ValuesUnsorted(); len(vals) > 0 {
				set[req.Key()] = vals[0]
			}
		case selection.Exists:
			if _, ok := set[req.Key()]; !ok {
				set[req.Key()] = "true"
			}
		}
	}
	return set, sel.Matches(labels.Set(set))
}

// splitJoined returns the errors an errors.Join holds, or err alone.
func splitJoined(err error) []error {
	var list interface{ Unwrap() []error }
	if errors.As(err, &list) {
		return list.Unwrap()
	}
	return []error{err}
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
