package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/rules/plan"
)

// What a node runs, by the rules digest its agent records.
const (
	runsCurrent = "current" // the rules the diff compares against
	runsNew     = "new"     // already the proposed rules
	runsUnknown = "unknown" // no digest recorded
	runsOther   = "other"   // another (older) rules file: see diffOutcome.Digest
)

// diffReport is what `featureplug rules diff` prints (-o json).
type diffReport struct {
	// Rules and RulesDigest are the proposed rules.
	Rules       string `json:"rules"`
	RulesDigest string `json:"rulesDigest"`
	// Current and CurrentDigest are the rules compared against.
	Current       string `json:"current"`
	CurrentDigest string `json:"currentDigest"`
	// Nodes is the number of nodes evaluated.
	Nodes int `json:"nodes"`
	// Failed is set when some node would lose every resource, or hit an
	// error (the rules cannot plan it, or leave devices out): the command
	// then exits non-zero.
	Failed bool `json:"failed"`
	// Groups gather the nodes with identical outcomes, ordered by their
	// first node's name.
	Groups []diffGroup `json:"groups"`
}

// diffGroup is a set of nodes with the same outcome.
type diffGroup struct {
	// Nodes are sorted by name.
	Nodes []string `json:"nodes"`
	diffOutcome
}

// diffOutcome is what the proposed rules change on one node. It names
// devices by description ("GPU 4 NVIDIA A100-SXM4-40GB"), never by UUID,
// so that nodes of one kind share an outcome.
type diffOutcome struct {
	// Runs says which rules the node's agent runs by its recorded digest:
	// current, new, other (Digest says which) or unknown.
	Runs   string `json:"runs"`
	Digest string `json:"digest,omitempty"`
	// Changes are the resources that appear, disappear, or change device
	// count or sharing, by name.
	Changes []resourceChange `json:"changes,omitempty"`
	// Unclaimed are devices that have a resource now and would get none.
	Unclaimed []string `json:"unclaimed,omitempty"`
	// Problems are devices the proposed rules claim but leave out (their
	// template fails or gives an invalid name).
	Problems []string `json:"problems,omitempty"`
	// Error is why the proposed rules cannot plan the node at all.
	Error string `json:"error,omitempty"`
	// LosesAll is set when the node serves resources now and would serve
	// none.
	LosesAll bool `json:"losesAll,omitempty"`
	// Notes say what the cluster cannot tell about the node (no features
	// published, features that do not read back exactly, current rules
	// that cannot plan it).
	Notes []string `json:"notes,omitempty"`
}

// resourceChange is one resource whose devices or sharing change.
type resourceChange struct {
	Resource    string `json:"resource"`
	FromDevices int    `json:"fromDevices"`
	ToDevices   int    `json:"toDevices"`
	FromSharing string `json:"fromSharing,omitempty"`
	ToSharing   string `json:"toSharing,omitempty"`
}

// failed reports whether the outcome must fail the command.
func (o *diffOutcome) failed() bool {
	return o.LosesAll || o.Error != "" || len(o.Problems) > 0
}

// diffNodes evaluates the current and the proposed rules on every node
// and groups the nodes by outcome.
func diffNodes(cur, next *clusterRules, nodes []clusterNode) *diffReport {
	rep := &diffReport{Rules: next.where, RulesDigest: next.digest, Current: cur.where, CurrentDigest: cur.digest, Nodes: len(nodes)}
	groups := map[string]*diffGroup{}
	for i := range nodes {
		n := &nodes[i]
		o := diffNode(cur, next, n)
		rep.Failed = rep.Failed || o.failed()
		key, _ := json.Marshal(o) // deterministic: a struct of slices
		g, ok := groups[string(key)]
		if !ok {
			g = &diffGroup{diffOutcome: o}
			groups[string(key)] = g
		}
		g.Nodes = append(g.Nodes, n.name)
	}
	for _, g := range groups {
		slices.Sort(g.Nodes)
		rep.Groups = append(rep.Groups, *g)
	}
	slices.SortFunc(rep.Groups, func(a, b diffGroup) int { return strings.Compare(a.Nodes[0], b.Nodes[0]) })
	return rep
}

// diffNode is the outcome of the proposed rules on one node.
func diffNode(cur, next *clusterRules, n *clusterNode) diffOutcome {
	var o diffOutcome
	var d string
	if n.feature != nil {
		d = n.feature.Annotations[labeler.AnnotationRulesDigest]
	}
	switch d {
	case "":
		o.Runs = runsUnknown
	case cur.digest:
		o.Runs = runsCurrent
	case next.digest:
		o.Runs = runsNew
	default:
		o.Runs, o.Digest = runsOther, d
	}
	before := planNode(cur.rs, n)
	if before.unreadable {
		o.Notes = append(o.Notes, before.err.Error())
		return o
	}
	o.Notes = append(o.Notes, before.notes...)
	if before.err != nil {
		o.Notes = append(o.Notes, "the current rules cannot plan this node: "+before.err.Error())
		before.plan = &plan.Plan{}
	}
	after := planNode(next.rs, n)
	if after.err != nil {
		o.Error = after.err.Error()
		o.LosesAll = len(before.plan.Resources) > 0
		return o
	}
	o.Changes = resourceChanges(before.plan, after.plan)
	o.Unclaimed = unclaimed(before.plan, after.plan)
	for _, p := range after.plan.Problems {
		o.Problems = append(o.Problems, p.Description+": "+p.Message)
	}
	o.LosesAll = len(before.plan.Resources) > 0 && len(after.plan.Resources) == 0
	return o
}

// resourceChanges lists the resources of after that differ from before.
func resourceChanges(before, after *plan.Plan) []resourceChange {
	index := func(p *plan.Plan) map[string]*plan.Resource {
		m := make(map[string]*plan.Resource, len(p.Resources))
		for i := range p.Resources {
			m[p.Resources[i].Name] = &p.Resources[i]
		}
		return m
	}
	b, a := index(before), index(after)
	names := slices.Sorted(maps.Keys(b))
	for n := range a {
		if _, ok := b[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var out []resourceChange
	for _, name := range names {
		c := resourceChange{Resource: name}
		if r := b[name]; r != nil {
			c.FromDevices, c.FromSharing = len(r.Devices), r.Sharing.String()
		}
		if r := a[name]; r != nil {
			c.ToDevices, c.ToSharing = len(r.Devices), r.Sharing.String()
		}
		if c.FromDevices == c.ToDevices && c.FromSharing == c.ToSharing {
			continue
		}
		out = append(out, c)
	}
	return out
}

// unclaimed lists the devices that have a resource in before and none in
// after: "GPU 4 NVIDIA A100-SXM4-40GB: was nvidia.com/gpu".
func unclaimed(before, after *plan.Plan) []string {
	now := make(map[string]string, len(after.Decisions))
	for _, d := range after.Decisions {
		now[d.Device] = d.Resource
	}
	var out []string
	for _, d := range before.Decisions {
		if d.Resource != "" && now[d.Device] == "" {
			out = append(out, d.Description+": was "+d.Resource)
		}
	}
	return out
}

// clusterNodes reads the nodes a selector selects, with their NodeFeatures.
func clusterNodes(ctx context.Context, r clusterReader, f *clusterFlags, selector string) ([]clusterNode, error) {
	nodes, err := r.Nodes(ctx, selector)
	if err != nil {
		return nil, err
	}
	nfs, err := r.NodeFeatures(ctx, "")
	if err != nil {
		return nil, err
	}
	return joinNodeFeatures(nodes, nfs, f.namespace), nil
}

// joinNodeFeatures pairs every Node with featureplug's NodeFeature of it.
func joinNodeFeatures(nodes []corev1.Node, nfs []nfdv1alpha1.NodeFeature, namespace string) []clusterNode {
	byNode := make(map[string][]nfdv1alpha1.NodeFeature, len(nfs))
	for _, nf := range nfs {
		node := nf.Labels[labeler.NodeNameLabel]
		byNode[node] = append(byNode[node], nf)
	}
	out := make([]clusterNode, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		out = append(out, clusterNode{name: n.Name, labels: n.Labels, feature: pickNodeFeature(n.Name, namespace, byNode[n.Name])})
	}
	return out
}

// writeDiff prints a diff report for people.
func writeDiff(w io.Writer, rep *diffReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Rules:   %s (%s)\nAgainst: %s (%s)\n", rep.Rules, rep.RulesDigest, rep.Current, rep.CurrentDigest)
	lose, errs := 0, 0
	for _, g := range rep.Groups {
		if g.LosesAll {
			lose += len(g.Nodes)
		}
		if g.Error != "" || len(g.Problems) > 0 {
			errs += len(g.Nodes)
		}
	}
	fmt.Fprintf(&b, "%d nodes, %d outcomes; %d would lose every resource, %d would hit an error\n", rep.Nodes, len(rep.Groups), lose, errs)
	for _, g := range rep.Groups {
		fmt.Fprintf(&b, "\n%s (%d)\n", strings.Join(g.Nodes, ", "), len(g.Nodes))
		switch g.Runs {
		case runsOther:
			fmt.Fprintf(&b, "  runs      other rules (%s)\n", g.Digest)
		default:
			fmt.Fprintf(&b, "  runs      %s rules\n", g.Runs)
		}
		for _, n := range g.Notes {
			fmt.Fprintf(&b, "  note      %s\n", n)
		}
		if g.Error != "" {
			fmt.Fprintf(&b, "  error     %s\n", strings.ReplaceAll(g.Error, "\n", "\n            "))
		}
		for _, c := range g.Changes {
			fmt.Fprintf(&b, "  %s\n", c.String())
		}
		for _, u := range g.Unclaimed {
			fmt.Fprintf(&b, "  no resource  %s\n", u)
		}
		for _, p := range g.Problems {
			fmt.Fprintf(&b, "  problem   %s\n", p)
		}
		if g.LosesAll {
			b.WriteString("  LOSES EVERY RESOURCE\n")
		}
		if len(g.Changes) == 0 && len(g.Unclaimed) == 0 && len(g.Problems) == 0 && g.Error == "" && len(g.Notes) == 0 {
			b.WriteString("  no change\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// String formats a change: "+ name: 0 -> 4 devices",
// "- name: 4 -> 0 devices", "~ name: 4 -> 2 devices, sharing A -> B".
func (c resourceChange) String() string {
	sign := "~"
	switch {
	case c.FromDevices == 0 && c.FromSharing == "":
		sign = "+"
	case c.ToDevices == 0 && c.ToSharing == "":
		sign = "-"
	}
	s := fmt.Sprintf("%s %s: %d -> %d devices", sign, c.Resource, c.FromDevices, c.ToDevices)
	if sign == "~" && c.FromSharing != c.ToSharing {
		s += ", sharing " + c.FromSharing + " -> " + c.ToSharing
	}
	return s
}
