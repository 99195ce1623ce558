package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/rules/plan"
)

// diffRun is one `rules diff`: the rules it compares and its policy.
type diffRun struct {
	// next are the proposed rules.
	next *clusterRules
	// cur are the rules compared with; nil compares with what each node
	// serves.
	cur *clusterRules
	// configMap are the agents' ConfigMap's rules when cur is nil and
	// they could be read, to name the nodes that run them.
	configMap *clusterRules
	policy    diffPolicy
}

// newReport starts the report of a run.
func (d *diffRun) newReport(f *diffFlags) *diffReport {
	rep := &diffReport{Rules: d.next.where, RulesDigest: d.next.digest, Baseline: "served", Policy: f.policy, Selector: f.selector}
	rep.Warnings = d.next.rs.Warnings()
	if d.cur != nil {
		rep.Baseline, rep.Current, rep.CurrentDigest = "rules", d.cur.where, d.cur.digest
	}
	return rep
}

// nodeSides is one node's baseline and proposed resources.
type nodeSides struct {
	name         string
	runs, digest string
	// before is the baseline; after what the proposed rules serve
	// (empty when afterErr is set).
	before, after labeler.Served
	afterPlan     *plan.Plan
	afterErr      error
	// devices are the node's devices by index.
	devices  map[string]nodeDevice
	warnings []string
}

// nodeDevice is what the diff says of a device.
type nodeDevice struct {
	uuid, profile, description string
	kind                       plan.DeviceKind
}

// compare diffs every node into the report.
func (d *diffRun) compare(ctx context.Context, r clusterReader, nodes []clusterNode, rep *diffReport) error {
	rep.Nodes = len(nodes)
	sides := make([]*nodeSides, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		if n.feature == nil {
			rep.WithoutAgent = append(rep.WithoutAgent, n.name)
			continue
		}
		s, reason := d.sides(n)
		if reason != "" {
			rep.incomplete(n.name, reason)
			continue
		}
		sides = append(sides, s)
	}
	classes, err := d.readClasses(ctx, r, sides)
	if err != nil {
		return err
	}
	rep.DeviceClasses = classes.changes()
	outcomes := make([]nodeOutcome, len(sides))
	for i, s := range sides {
		outcomes[i] = d.outcome(s, classes)
	}
	rep.group(outcomes)
	rep.compared = true
	return nil
}

// sides reads a node's baseline and plans the proposed rules on it; a
// node that cannot be compared gets a reason instead (without its name,
// so that nodes with the same reason are told together).
func (d *diffRun) sides(n *clusterNode) (*nodeSides, string) {
	s := &nodeSides{name: n.name}
	ann := n.feature.Annotations
	s.runs, s.digest = d.runs(ann[labeler.AnnotationRulesDigest])
	rebuilt, err := n.rebuild()
	if err != nil {
		return nil, fmt.Sprintf("its NodeFeature's features cannot be read back: %v", err)
	}
	for _, g := range rebuilt.Gaps {
		s.warnings = append(s.warnings, "features: "+g)
	}
	value, recorded := ann[labeler.AnnotationResources]
	served, servedErr := labeler.ParseServed(value)
	def := plan.ServeDevicePlugin
	if recorded && servedErr == nil && served.DefaultServe != "" {
		def = served.DefaultServe
	}
	var curPlan *plan.Plan
	if d.cur == nil {
		switch {
		case !recorded:
			return nil, fmt.Sprintf("its NodeFeature records nothing served (annotation %s): the agent has no plan yet", labeler.AnnotationResources)
		case servedErr != nil:
			return nil, servedErr.Error()
		}
		s.before = served
		if served.CountsOnly {
			s.warnings = append(s.warnings, fmt.Sprintf("its agent records device counts only (%s of an earlier release): sharing, serving API and devices are not compared",
				labeler.AnnotationResources))
		}
	} else {
		curPlan, err = d.cur.rs.Plan(rebuilt.Inventory, n.labels)
		if err != nil {
			s.warnings = append(s.warnings, "the current rules cannot plan this node: "+err.Error())
			curPlan = &plan.Plan{}
		}
		s.before = labeler.NewServed(curPlan, def)
	}
	s.afterPlan, s.afterErr = d.next.rs.Plan(rebuilt.Inventory, n.labels)
	if s.afterErr == nil {
		s.after = labeler.NewServed(s.afterPlan, def)
	}
	if (!recorded || servedErr != nil || served.DefaultServe == "") && !s.before.CountsOnly &&
		(usesDefaultServe(curPlan) || usesDefaultServe(s.afterPlan)) {
		s.warnings = append(s.warnings, fmt.Sprintf("its agent does not record its --serve: resources whose rules do not choose are taken as served through %s", def))
	}
	s.devices = inventoryDevices(rebuilt.Inventory, s.afterPlan, curPlan)
	for i, w := range s.warnings {
		s.warnings[i] = s.withoutUUIDs(w)
	}
	return s, ""
}

// withoutUUIDs drops the node's device UUIDs, as messages write them
// ("GPU 0 NVIDIA H100 (GPU-...)"), from a message about the node, so that
// nodes of one kind with the same message share an outcome; -o json lists
// the UUIDs.
func (s *nodeSides) withoutUUIDs(msg string) string {
	for _, d := range s.devices {
		msg = strings.ReplaceAll(msg, " ("+d.uuid+")", "")
	}
	return msg
}

// runs names the rules a node runs by the digest its agent records.
func (d *diffRun) runs(digest string) (runs, other string) {
	switch {
	case digest == "":
		return runsUnknown, ""
	case digest == d.next.digest:
		return runsProposed, ""
	case d.cur != nil && digest == d.cur.digest:
		return runsCurrent, ""
	case d.cur == nil && d.configMap != nil && digest == d.configMap.digest:
		return runsConfigMap, ""
	}
	return runsOther, digest
}

// usesDefaultServe reports whether a plan has a resource whose rules do
// not choose its API.
func usesDefaultServe(p *plan.Plan) bool {
	return p != nil && slices.ContainsFunc(p.Resources, func(r plan.Resource) bool { return r.Serve == "" })
}

// inventoryDevices indexes a node's devices by plan.Device.Index, with
// the descriptions the plans give them.
func inventoryDevices(inv *discovery.Inventory, plans ...*plan.Plan) map[string]nodeDevice {
	desc := map[string]string{}
	for _, p := range plans {
		if p == nil {
			continue
		}
		for _, dec := range p.Decisions {
			if _, ok := desc[dec.Device]; !ok {
				desc[dec.Device] = dec.Description
			}
		}
	}
	described := func(uuid, fallback string) string {
		if s, ok := desc[uuid]; ok {
			return s
		}
		return fallback
	}
	out := make(map[string]nodeDevice, len(inv.GPUs))
	for _, g := range inv.GPUs {
		gi := strconv.Itoa(g.Index)
		out[gi] = nodeDevice{uuid: g.UUID, kind: plan.DeviceGPU, description: described(g.UUID, "GPU "+gi+" "+g.Product)}
		for _, m := range g.MIGDevices {
			mi := gi + ":" + strconv.Itoa(m.Index)
			out[mi] = nodeDevice{uuid: m.UUID, kind: plan.DeviceMIG, profile: m.Profile,
				description: described(m.UUID, fmt.Sprintf("GPU %d MIG %d (%s)", g.Index, m.Index, m.Profile))}
		}
	}
	return out
}

// outcome compares a node's sides under the policy.
func (d *diffRun) outcome(s *nodeSides, classes *diffClasses) nodeOutcome {
	n := nodeOutcome{name: s.name, o: diffOutcome{Runs: s.runs, Digest: s.digest, Warnings: s.warnings}}
	o := &n.o
	if s.afterErr != nil {
		o.Error = s.withoutUUIDs(s.afterErr.Error())
		o.Blocked = true
		return n
	}
	o.Changes = d.changes(s, classes, &o.Warnings)
	if !s.before.CountsOnly {
		now := map[string]string{}
		for _, r := range s.after.Resources {
			for _, idx := range r.Devices {
				now[idx] = r.Name
			}
		}
		for _, r := range s.before.Resources {
			for _, idx := range r.Devices {
				if now[idx] != "" {
					continue
				}
				dev, ok := s.devices[idx]
				if !ok {
					o.Warnings = append(o.Warnings, fmt.Sprintf("%s device %s is not among the published features", r.Name, idx))
					continue
				}
				o.Unclaimed = append(o.Unclaimed, diffDevice{Index: idx, Kind: dev.kind, Profile: dev.profile, Description: dev.description, Was: r.Name})
				n.uuids = append(n.uuids, dev.uuid)
			}
		}
	}
	byUUID := map[string]string{}
	for idx, dev := range s.devices {
		byUUID[dev.uuid] = idx
	}
	for _, p := range s.afterPlan.Problems {
		idx := byUUID[p.Device]
		dev := s.devices[idx]
		o.Problems = append(o.Problems, diffDevice{Index: idx, Kind: dev.kind, Profile: dev.profile, Description: p.Description,
			Rule: p.Rule, Resource: p.Resource, Message: s.withoutUUIDs(p.Message)})
		n.uuids = append(n.uuids, p.Device)
	}
	o.Blocked = o.blocked(&d.policy)
	return n
}

// changes lists the changes of a node's resources, typed, with the losses
// marked by the policy. What the proposed rules serve through DRA without a
// DeviceClass to serve it adds a warning.
func (d *diffRun) changes(s *nodeSides, classes *diffClasses, warnings *[]string) []diffChange {
	names := map[string]bool{}
	for _, r := range s.before.Resources {
		names[r.Name] = true
	}
	for _, r := range s.after.Resources {
		names[r.Name] = true
	}
	countsOnly := s.before.CountsOnly
	var out []diffChange
	add := func(op, name string, b, a *labeler.ServedResource, loss bool, reason string) {
		c := diffChange{Op: op, Resource: name, From: newDiffResource(b, countsOnly), To: newDiffResource(a, countsOnly), Loss: loss, Reason: reason}
		if loss {
			c.Allowed = d.policy.lossAllowed(name)
			c.Blocking = !c.Allowed
		}
		out = append(out, c)
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		b, had := s.before.Resource(name)
		a, has := s.after.Resource(name)
		unserved := has && a.Serve == plan.ServeDRA && !classes.serves(name)
		switch {
		case !had:
			add(opAdded, name, nil, a, false, "")
			if unserved {
				*warnings = append(*warnings, classes.unservedWarning(name))
			}
			continue
		case !has:
			add(opRemoved, name, b, nil, true, "")
			continue
		}
		countDown := a.Count < b.Count
		switch {
		case countDown:
			add(opCountDown, name, b, a, true, "")
		case a.Count > b.Count:
			add(opCountUp, name, b, a, false, "")
		}
		if countsOnly {
			continue
		}
		if !a.Sharing.Same(b.Sharing) {
			shrinks := !countDown && a.Capacity() < b.Capacity()
			reason := ""
			if shrinks {
				reason = fmt.Sprintf("capacity %d -> %d", b.Capacity(), a.Capacity())
			}
			add(opSharingChanged, name, b, a, shrinks, reason)
		}
		if a.Serve != b.Serve {
			reason := ""
			if unserved {
				reason = classes.unservedReason(name)
			}
			add(opServeChanged, name, b, a, unserved, reason)
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
