package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/rules/plan"
)

// What a node runs, by the rules digest its agent records.
const (
	runsProposed  = "proposed"  // already the proposed rules
	runsCurrent   = "current"   // the rules of --current
	runsConfigMap = "configmap" // the agents' ConfigMap (when --current is not given)
	runsOther     = "other"     // other rules: see diffOutcome.Digest
	runsUnknown   = "unknown"   // no digest recorded
)

// Operations of a change.
const (
	opAdded          = "added"           // the resource appears on the node
	opRemoved        = "removed"         // the resource disappears from the node
	opCountUp        = "count-up"        // more devices
	opCountDown      = "count-down"      // fewer devices
	opSharingChanged = "sharing-changed" // another sharing (strategy, replicas, limits)
	opServeChanged   = "serve-changed"   // another kubelet API (device-plugin, dra)

	opClassAdded   = "deviceclass-added"   // a DRA resource gets a DeviceClass
	opClassRemoved = "deviceclass-removed" // a DeviceClass selects for a resource no longer served through DRA
	opClassChanged = "deviceclass-changed" // the class selects other devices
)

// diffReport is what `featureplug rules diff` prints (-o json).
type diffReport struct {
	// ExitCode is the process's exit code and Status its name: pass,
	// blocked, invalid, incomplete.
	ExitCode int    `json:"exitCode"`
	Status   string `json:"status"`
	// Error says why the command fails (exit code other than 0).
	Error string `json:"error,omitempty"`

	// Rules and RulesDigest are the proposed rules.
	Rules       string `json:"rules,omitempty"`
	RulesDigest string `json:"rulesDigest,omitempty"`
	// Baseline is what the proposed rules are compared with: "served"
	// (what each node serves) or "rules" (Current).
	Baseline string `json:"baseline,omitempty"`
	// Current and CurrentDigest are the rules compared with, when
	// Baseline is "rules".
	Current       string `json:"current,omitempty"`
	CurrentDigest string `json:"currentDigest,omitempty"`
	// ConfigMap is the agents' ConfigMap, as read.
	ConfigMap *diffConfigMap `json:"configMap,omitempty"`
	// Policy is the gate's policy.
	Policy diffPolicy `json:"policy"`
	// Selector is the node selector ("" for every node).
	Selector string `json:"selector,omitempty"`

	// Nodes is the number of nodes selected; BlockedNodes of those the
	// policy blocks on.
	Nodes        int `json:"nodes"`
	BlockedNodes int `json:"blockedNodes"`
	// Warnings are those of the proposed rules file.
	Warnings []string `json:"warnings,omitempty"`
	// Groups gather the nodes with identical outcomes, ordered by their
	// first node's name.
	Groups []diffGroup `json:"groups"`
	// DeviceClasses are the changes of the DeviceClasses of resources
	// served through DRA, cluster-wide.
	DeviceClasses []diffClassChange `json:"deviceClasses,omitempty"`
	// WithoutAgent are the selected nodes without featureplug's
	// NodeFeature: nodes without an agent (no GPU, or not yet deployed).
	WithoutAgent []string `json:"withoutAgent,omitempty"`
	// Incomplete are the nodes that could not be compared, by reason.
	Incomplete []diffIncomplete `json:"incomplete,omitempty"`

	// compared is set once nodes were compared (the table is printed).
	compared bool
}

// diffConfigMap is the agents' ConfigMap as the diff read it.
type diffConfigMap struct {
	Name   string `json:"name"`
	Key    string `json:"key"`
	Digest string `json:"digest,omitempty"`
	// Error says why it could not be read (the diff goes on without it
	// unless it is the baseline).
	Error string `json:"error,omitempty"`
}

// diffGroup is a set of nodes with the same outcome.
type diffGroup struct {
	// Nodes are sorted by name.
	Nodes []string `json:"nodes"`
	diffOutcome
}

// diffOutcome is what the proposed rules change on one node. Devices are
// named by index and description, so that nodes of one kind share an
// outcome; their UUIDs are listed per node.
type diffOutcome struct {
	// Runs says which rules the node's agent runs by its recorded digest
	// (runs* constants); Digest is the digest for "other".
	Runs   string `json:"runs"`
	Digest string `json:"digest,omitempty"`
	// Blocked is set when the policy blocks on the node.
	Blocked bool `json:"blocked,omitempty"`
	// Changes are the changes of the node's resources, by resource name,
	// then in the order of the op constants.
	Changes []diffChange `json:"changes,omitempty"`
	// Unclaimed are the devices that serve a resource now and would get
	// none.
	Unclaimed []diffDevice `json:"unclaimed,omitempty"`
	// Problems are devices the proposed rules claim but leave out (their
	// template fails or gives an invalid name): they block.
	Problems []diffDevice `json:"problems,omitempty"`
	// Error is why the proposed rules cannot plan the node at all (the
	// agent would refuse them and keep its plan): it blocks.
	Error string `json:"error,omitempty"`
	// Warnings say what makes the comparison less than exact.
	Warnings []string `json:"warnings,omitempty"`
}

// diffChange is one change of one resource on a node.
type diffChange struct {
	// Op is one of the op constants.
	Op       string `json:"op"`
	Resource string `json:"resource"`
	// From and To are the resource before and after; nil where it does
	// not exist.
	From *diffResource `json:"from,omitempty"`
	To   *diffResource `json:"to,omitempty"`
	// Loss is set when the change takes capacity away from pods; the
	// policy then lets it pass (Allowed) or blocks on it (Blocking).
	Loss     bool `json:"loss,omitempty"`
	Allowed  bool `json:"allowed,omitempty"`
	Blocking bool `json:"blocking,omitempty"`
	// Reason says why the change is a loss when the counts do not.
	Reason string `json:"reason,omitempty"`
}

// diffResource is one resource of a node. Sharing, Serve and Capacity
// are empty when the node's agent does not record them (an earlier
// release recorded device counts only).
type diffResource struct {
	Devices int `json:"devices"`
	// Capacity is what the resource advertises: devices times replicas.
	Capacity int        `json:"capacity,omitempty"`
	Sharing  string     `json:"sharing,omitempty"`
	Serve    plan.Serve `json:"serve,omitempty"`
}

// newDiffResource describes a served resource; countsOnly leaves out what
// an older annotation does not record.
func newDiffResource(r *labeler.ServedResource, countsOnly bool) *diffResource {
	if r == nil {
		return nil
	}
	d := &diffResource{Devices: r.Count}
	if !countsOnly {
		d.Capacity, d.Sharing, d.Serve = r.Capacity(), r.Sharing.String(), r.Serve
	}
	return d
}

// diffDevice is a device of a group's nodes.
type diffDevice struct {
	// Index is the device's index ("3", or "3:1" for MIG device 1 of GPU 3).
	Index string          `json:"index"`
	Kind  plan.DeviceKind `json:"kind"`
	// Profile is the MIG profile of a MIG device.
	Profile     string `json:"profile,omitempty"`
	Description string `json:"description"`
	// Was is the resource the device serves now (Unclaimed).
	Was string `json:"was,omitempty"`
	// Rule, Resource and Message say what is wrong (Problems).
	Rule     string `json:"rule,omitempty"`
	Resource string `json:"resource,omitempty"`
	Message  string `json:"message,omitempty"`
	// UUIDs are the device's UUID on each node of the group.
	UUIDs map[string]string `json:"uuids"`
}

// diffIncomplete are nodes that could not be compared for one reason.
type diffIncomplete struct {
	Reason string   `json:"reason"`
	Nodes  []string `json:"nodes"`
}

// diffClassChange is one DeviceClass change.
type diffClassChange struct {
	Op       string `json:"op"`
	Resource string `json:"resource"`
	// Class is the DeviceClass's name.
	Class string `json:"class"`
	// From and To are the CEL selectors before and after ("" for none).
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
}

// nodeOutcome is one node's outcome with what is the node's own: the
// UUIDs of its Unclaimed, then Problems devices.
type nodeOutcome struct {
	name  string
	o     diffOutcome
	uuids []string
}

// blocked reports whether the policy blocks on the outcome.
func (o *diffOutcome) blocked(p *diffPolicy) bool {
	if o.Error != "" || len(o.Problems) > 0 || (p.FailOnWarning && len(o.Warnings) > 0) {
		return true
	}
	return slices.ContainsFunc(o.Changes, func(c diffChange) bool { return c.Blocking })
}

// group gathers node outcomes with identical outcomes (UUIDs aside) into
// rep.Groups.
func (rep *diffReport) group(outcomes []nodeOutcome) {
	groups := map[string]*diffGroup{}
	var order []*diffGroup
	for _, n := range outcomes {
		key, _ := json.Marshal(n.o) // deterministic: structs and slices; UUIDs are not set yet
		g, ok := groups[string(key)]
		if !ok {
			g = &diffGroup{diffOutcome: n.o}
			g.Unclaimed, g.Problems = slices.Clone(n.o.Unclaimed), slices.Clone(n.o.Problems)
			for _, devs := range [][]diffDevice{g.Unclaimed, g.Problems} {
				for i := range devs {
					devs[i].UUIDs = map[string]string{}
				}
			}
			groups[string(key)] = g
			order = append(order, g)
		}
		g.Nodes = append(g.Nodes, n.name)
		i := 0
		for _, devs := range [][]diffDevice{g.Unclaimed, g.Problems} {
			for j := range devs {
				devs[j].UUIDs[n.name] = n.uuids[i]
				i++
			}
		}
	}
	rep.Groups = make([]diffGroup, 0, len(order))
	for _, g := range order {
		slices.Sort(g.Nodes)
		if g.Blocked {
			rep.BlockedNodes += len(g.Nodes)
		}
		rep.Groups = append(rep.Groups, *g)
	}
	slices.SortFunc(rep.Groups, func(a, b diffGroup) int { return strings.Compare(a.Nodes[0], b.Nodes[0]) })
}

// incomplete records a node that could not be compared.
func (rep *diffReport) incomplete(node, reason string) {
	for i := range rep.Incomplete {
		if rep.Incomplete[i].Reason == reason {
			rep.Incomplete[i].Nodes = append(rep.Incomplete[i].Nodes, node)
			return
		}
	}
	rep.Incomplete = append(rep.Incomplete, diffIncomplete{Reason: reason, Nodes: []string{node}})
}

// finish sets the exit code, status and error of the report from the
// run's error and the outcomes, and returns the error to exit with.
func (rep *diffReport) finish(err error) error {
	if rep.Groups == nil {
		rep.Groups = []diffGroup{}
	}
	if err == nil {
		err = rep.verdict()
	}
	rep.ExitCode = diffExitPass
	if err != nil {
		rep.ExitCode = diffExitBlocked
		var ee *exitError
		if errors.As(err, &ee) {
			rep.ExitCode = ee.code
		}
		rep.Error = err.Error()
	}
	rep.Status = diffStatus[rep.ExitCode]
	return err
}

// verdict is the error the outcomes call for: blocked, or incomplete.
func (rep *diffReport) verdict() error {
	var why []string
	losses := map[string]bool{}
	lossNodes, errNodes, warnNodes := 0, 0, 0
	for _, g := range rep.Groups {
		if !g.Blocked {
			continue
		}
		lost := false
		for _, c := range g.Changes {
			if c.Blocking {
				losses[c.Resource], lost = true, true
			}
		}
		switch {
		case lost:
			lossNodes += len(g.Nodes)
		case g.Error != "" || len(g.Problems) > 0:
			errNodes += len(g.Nodes)
		default:
			warnNodes += len(g.Nodes)
		}
	}
	if lossNodes > 0 {
		why = append(why, fmt.Sprintf("%s would lose resources (%s); --allow-loss or --allow-loss-of RESOURCE lets a loss pass",
			plural(lossNodes, "node"), strings.Join(slices.Sorted(maps.Keys(losses)), ", ")))
	}
	if errNodes > 0 {
		why = append(why, fmt.Sprintf("the rules fail on %s", plural(errNodes, "node")))
	}
	if warnNodes > 0 {
		why = append(why, fmt.Sprintf("%s with warnings (--fail-on-warning)", plural(warnNodes, "node")))
	}
	if rep.Policy.FailOnWarning && len(rep.Warnings) > 0 {
		why = append(why, fmt.Sprintf("the rules file has %s (--fail-on-warning)", plural(len(rep.Warnings), "warning")))
	}
	if len(why) > 0 {
		return fmt.Errorf("rules diff: blocked: %s", strings.Join(why, "; "))
	}
	if n := rep.incompleteNodes(); n > 0 {
		return &exitError{code: diffExitIncomplete, err: fmt.Errorf("rules diff: incomplete: %s cannot be compared: %s",
			plural(n, "node"), rep.Incomplete[0].Reason)}
	}
	return nil
}

// incompleteNodes is the number of nodes that could not be compared.
func (rep *diffReport) incompleteNodes() int {
	n := 0
	for _, in := range rep.Incomplete {
		n += len(in.Nodes)
	}
	return n
}

// plural formats a count with its noun: "1 node", "2 nodes".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
