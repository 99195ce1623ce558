package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/plan"
	"github.com/featureplug/featureplug/rules/published"
)

// clusterRules is a rules file read for the cluster commands, with the
// digest the agents record for it (labeler.AnnotationRulesDigest).
type clusterRules struct {
	rs     *rules.RuleSet
	digest string
	// where names it for people: a path, a builtin, or the ConfigMap.
	where string
}

// loadClusterRules reads rules: a builtin name or a path when nameOrPath is
// set, otherwise the agents' ConfigMap as the flags name it.
func loadClusterRules(ctx context.Context, r clusterReader, f *clusterFlags, nameOrPath string) (*clusterRules, error) {
	if nameOrPath != "" {
		return loadRulesFile(nameOrPath)
	}
	cr, err := loadConfigMapRules(ctx, r, f)
	if err != nil {
		return nil, fmt.Errorf("%w (give a rules file with --rules, or the ConfigMap with --namespace and --configmap)", err)
	}
	return cr, nil
}

// loadRulesFile reads a rules file: a builtin name or a path.
func loadRulesFile(nameOrPath string) (*clusterRules, error) {
	if slices.Contains(rules.BuiltinNames(), nameOrPath) {
		rs, err := rules.Load(nameOrPath)
		if err != nil {
			return nil, err
		}
		return &clusterRules{rs: rs, digest: rs.Source(), where: rs.Source()}, nil
	}
	data, err := readRulesFile(nameOrPath)
	if err != nil {
		return nil, err
	}
	rs, err := rules.Parse(nameOrPath, data)
	if err != nil {
		return nil, err
	}
	return &clusterRules{rs: rs, digest: plan.RulesDigest(data), where: nameOrPath}, nil
}

// loadConfigMapRules reads the agents' rules from their ConfigMap, as the
// flags name it.
func loadConfigMapRules(ctx context.Context, r clusterReader, f *clusterFlags) (*clusterRules, error) {
	cm, err := r.ConfigMap(ctx, f.namespace, f.configMap)
	if err != nil {
		return nil, fmt.Errorf("the agents' rules: %w", err)
	}
	return configMapRules(cm, f)
}

// configMapRules reads the rules file the agents' ConfigMap holds.
func configMapRules(cm *corev1.ConfigMap, f *clusterFlags) (*clusterRules, error) {
	data, ok := cm.Data[f.configMapKey]
	if !ok {
		return nil, fmt.Errorf("the agents' rules: ConfigMap %s/%s has no key %q (--configmap-key)", cm.Namespace, cm.Name, f.configMapKey)
	}
	where := fmt.Sprintf("configmap %s/%s %s", cm.Namespace, cm.Name, f.configMapKey)
	rs, err := rules.Parse(where, []byte(data))
	if err != nil {
		return nil, err
	}
	return &clusterRules{rs: rs, digest: plan.RulesDigest([]byte(data)), where: where}, nil
}

// readRulesFile reads a rules file, refusing one larger than the agent
// accepts. A file that cannot be read gets rules.Load's error (not found,
// a misspelt builtin).
func readRulesFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		_, lerr := rules.Load(path)
		return nil, cmp.Or(lerr, err)
	}
	defer func() { _ = f.Close() }() // read-only
	data, err := io.ReadAll(io.LimitReader(f, rules.MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading rules file %s: %w", path, err)
	}
	return data, nil
}

// clusterNode is one node's rule inputs as the cluster holds them.
type clusterNode struct {
	name   string
	labels map[string]string
	// feature is featureplug's NodeFeature of the node; nil when it
	// publishes none.
	feature *nfdv1alpha1.NodeFeature

	// rebuilt and rebuildErr cache rebuild's result.
	rebuilt    *published.Node
	rebuildErr error
}

// rebuild reads the node's inputs back from its features, once.
func (n *clusterNode) rebuild() (*published.Node, error) {
	if n.rebuilt == nil && n.rebuildErr == nil {
		n.rebuilt, n.rebuildErr = published.Rebuild(&n.feature.Spec.Features)
	}
	return n.rebuilt, n.rebuildErr
}

// pickNodeFeature returns the NodeFeature featureplug writes for node among
// those listed for it: the one with featureplug's name, in namespace when
// several have it.
func pickNodeFeature(node, namespace string, nfs []nfdv1alpha1.NodeFeature) *nfdv1alpha1.NodeFeature {
	var found *nfdv1alpha1.NodeFeature
	for i := range nfs {
		nf := &nfs[i]
		if nf.Labels[labeler.NodeNameLabel] != node || nf.Name != labeler.NodeFeatureName(node) {
			continue
		}
		if found == nil || nf.Namespace == namespace {
			found = nf
		}
	}
	return found
}

// nodePlan is the plan rules make of a node's published inputs.
type nodePlan struct {
	plan *plan.Plan
	err  error
	// unreadable is set when the node's features could not be read at
	// all (err says why): no plan was tried.
	unreadable bool
	// notes say what the cluster cannot tell (see published.Rebuild).
	notes []string
}

// planNode makes the plan of rs on a node's published features and
// labels. The plan has no link matrix: topology is not published.
func planNode(rs *rules.RuleSet, n *clusterNode) nodePlan {
	if n.feature == nil {
		return nodePlan{unreadable: true, err: fmt.Errorf("node %s: no featureplug NodeFeature (%s): the agent has not published its features",
			n.name, labeler.NodeFeatureName(n.name))}
	}
	rebuilt, err := n.rebuild()
	if err != nil {
		return nodePlan{unreadable: true, err: fmt.Errorf("node %s: NodeFeature %s/%s: %w", n.name, n.feature.Namespace, n.feature.Name, err)}
	}
	p, err := rs.Plan(rebuilt.Inventory, n.labels)
	if p != nil {
		p.Links = nil
	}
	return nodePlan{plan: p, err: err, notes: rebuilt.Gaps}
}

// explainNode explains a rules file (a path or builtin; "" reads the
// agents' ConfigMap) for one node of the cluster, as `rules explain` on the
// node would, in format; what the cluster cannot tell goes to errOut as
// notes.
func explainNode(ctx context.Context, out, errOut io.Writer, r clusterReader, f *clusterFlags, node, rulesFile, format string) error {
	cr, err := loadClusterRules(ctx, r, f, rulesFile)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	n, err := r.Node(ctx, node)
	if err != nil {
		return err
	}
	nfs, err := r.NodeFeatures(ctx, node)
	if err != nil {
		return err
	}
	cn := &clusterNode{name: node, labels: n.Labels, feature: pickNodeFeature(node, f.namespace, nfs)}
	np := planNode(cr.rs, cn)
	if np.unreadable {
		return &exitError{code: 1, err: np.err}
	}
	note := func(format string, args ...any) { fmt.Fprintf(errOut, "note: "+format+"\n", args...) }
	for _, g := range np.notes {
		note("%s", g)
	}
	// The link matrix of a node with several GPUs is in the plan's JSON
	// and YAML only; node labels matter only to rules that select nodes.
	if rebuilt, _ := cn.rebuild(); format != "table" && len(rebuilt.Inventory.GPUs) > 1 {
		note("%s", published.TopologyNote)
	}
	if cr.rs.UsesNodeLabels() {
		note("node selectors see the Node's labels; labels given to the agent itself (--node-labels) are not visible here")
	}
	if digest := cn.feature.Annotations[labeler.AnnotationRulesDigest]; digest == "" {
		note("the node's agent records no rules digest (%s): which rules it runs is unknown", labeler.AnnotationRulesDigest)
	} else if digest != cr.digest {
		note("the node's agent runs other rules (%s) than these (%s %s): it serves %s",
			digest, cr.where, cr.digest, recordedServed(cn.feature.Annotations))
	}
	if np.err != nil {
		return &exitError{code: 1, err: fmt.Errorf("the rules do not apply to node %s:\n%w", node, np.err)}
	}
	printProblems(errOut, "", np.plan.Problems)
	if err := np.plan.CheckServes(); err != nil { // what the node's agent refuses on a reload
		fmt.Fprintf(errOut, "warning: %v\n", err)
	}
	unavailable := nodeMPSUnavailable(np.plan, cn) // rules_check.go
	if cn.feature.Annotations[labeler.AnnotationMPSControl] == "" {
		for _, res := range np.plan.Resources {
			if needsDaemon(res.Sharing) {
				note("%s needs the node's MPS control daemon: whether it is up cannot be known from the cluster", res.Name)
			}
		}
	}
	return printExplanation(out, errOut, format, cr.rs, np.plan, unavailable)
}

// recordedServed says what a NodeFeature's resources annotation records,
// for people: "example.com/a100 (4 devices), nvidia.com/gpu (8 devices,
// through dra)".
func recordedServed(annotations map[string]string) string {
	value, ok := annotations[labeler.AnnotationResources]
	if !ok {
		return "what, it does not record"
	}
	s, err := labeler.ParseServed(value)
	if err != nil {
		return strconv.Quote(value)
	}
	if len(s.Resources) == 0 {
		return "nothing"
	}
	parts := make([]string, len(s.Resources))
	for i := range s.Resources {
		r := newDiffResource(&s.Resources[i], s.CountsOnly)
		parts[i] = s.Resources[i].Name + " (" + r.describe() + ")"
	}
	return strings.Join(parts, ", ")
}
