package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/labeler"
)

// clusterFakeReader is a clusterReader over objects in memory.
type clusterFakeReader struct {
	nodes      []corev1.Node
	features   []nfdv1alpha1.NodeFeature
	configMaps []corev1.ConfigMap
}

func (r *clusterFakeReader) Nodes(_ context.Context, selector string) ([]corev1.Node, error) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, err
	}
	var out []corev1.Node
	for _, n := range r.nodes {
		if sel.Matches(labels.Set(n.Labels)) {
			out = append(out, n)
		}
	}
	return out, nil
}

func (r *clusterFakeReader) Node(_ context.Context, name string) (*corev1.Node, error) {
	for i := range r.nodes {
		if r.nodes[i].Name == name {
			return &r.nodes[i], nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, name)
}

func (r *clusterFakeReader) NodeFeatures(_ context.Context, node string) ([]nfdv1alpha1.NodeFeature, error) {
	var out []nfdv1alpha1.NodeFeature
	for _, nf := range r.features {
		if node == "" || nf.Labels[labeler.NodeNameLabel] == node {
			out = append(out, nf)
		}
	}
	return out, nil
}

func (r *clusterFakeReader) ConfigMap(_ context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	for i := range r.configMaps {
		if r.configMaps[i].Namespace == namespace && r.configMaps[i].Name == name {
			return &r.configMaps[i], nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
}

// clusterTestNode adds a Node and its NodeFeature made from a bundled
// fake node, with the given rules digest annotation ("" for none).
func (r *clusterFakeReader) add(t testing.TB, name string, inv *discovery.Inventory, nodeLabels map[string]string, digest string) {
	t.Helper()
	r.nodes = append(r.nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: nodeLabels}})
	nf := nfdv1alpha1.NodeFeature{
		ObjectMeta: metav1.ObjectMeta{
			Name: labeler.NodeFeatureName(name), Namespace: defaultRulesNamespace,
			Labels: map[string]string{labeler.NodeNameLabel: name, labeler.ManagedByLabel: labeler.ManagedByValue},
		},
		Spec: nfdv1alpha1.NodeFeatureSpec{Features: *discovery.Features(inv)},
	}
	if digest != "" {
		nf.Annotations = map[string]string{labeler.AnnotationRulesDigest: digest}
	}
	r.features = append(r.features, nf)
}

func explainTestInventory(t testing.TB, fakeNode string) *discovery.Inventory {
	t.Helper()
	inv, err := discoverInventory(context.Background(), sourceFlags{fakeNode: fakeNode})
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

var explainEditRules = filepath.Join("..", "..", "test", "e2e", "testdata", "explain-edit.yaml")

// TestRulesExplainNodeMatchesLocal checks that `rules explain --node`
// prints exactly what `rules explain --fake-node` prints on the node, in
// every format, JSON aside from the link matrix, which is not published.
func TestRulesExplainNodeMatchesLocal(t *testing.T) {
	r := &clusterFakeReader{}
	for _, n := range []string{"dgx-a100", "dgx-h100", "workstation"} {
		r.add(t, "node-"+n, explainTestInventory(t, n), map[string]string{"pool": "inference"}, "")
	}
	f := &clusterFlags{namespace: defaultRulesNamespace}
	for _, rulesFile := range []string{"mixed", explainEditRules} {
		for _, n := range []string{"dgx-a100", "dgx-h100", "workstation"} {
			for _, format := range []string{"table", "yaml", "json"} {
				t.Run(fmt.Sprintf("%s/%s/%s", filepath.Base(rulesFile), n, format), func(t *testing.T) {
					want, _, err := runRules(t, "explain", "--rules", rulesFile, "--fake-node", n, "--node-labels", "pool=inference", "-o", format)
					if err != nil {
						t.Fatal(err)
					}
					var out, errOut bytes.Buffer
					if err := explainNode(context.Background(), &out, &errOut, r, f, "node-"+n, rulesFile, format); err != nil {
						t.Fatal(err)
					}
					got := out.String()
					if format == "json" {
						want, got = explainWithoutLinks(t, want), explainWithoutLinks(t, got)
					}
					if format == "yaml" {
						if strings.Contains(got, "links:") || n != "workstation" && !strings.Contains(want, "links:") {
							t.Errorf("want links only in the local explanation")
						}
						return // YAML: the same fields (JSON compares them); links are the difference
					}
					if got != want {
						t.Errorf("--node output differs from the node's:\n--- node\n%s\n--- cluster\n%s", want, got)
					}
					if !strings.Contains(errOut.String(), "note: GPU links (topology) are not published") {
						t.Errorf("no note about topology on stderr:\n%s", errOut.String())
					}
				})
			}
		}
	}
}

// explainWithoutLinks drops the link matrix from a JSON explanation.
func explainWithoutLinks(t *testing.T, s string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("%v:\n%s", err, s)
	}
	delete(m, "links")
	out, _ := json.MarshalIndent(m, "", "  ")
	return string(out)
}

// TestRulesExplainNodeFromConfigMap checks the rules come from the agents'
// ConfigMap without --rules, and that a node without features or running
// other rules is said plainly.
func TestRulesExplainNodeFromConfigMap(t *testing.T) {
	r := &clusterFakeReader{configMaps: []corev1.ConfigMap{{
		ObjectMeta: metav1.ObjectMeta{Namespace: defaultRulesNamespace, Name: defaultRulesConfigMap},
		Data:       map[string]string{defaultRulesKey: "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n- name: all\n  devices: gpu\n  resource: example.com/any\n"},
	}}}
	r.add(t, "ws", explainTestInventory(t, "workstation"), nil, "sha256:0123456789abcdef")
	r.nodes = append(r.nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bare"}})
	f := &clusterFlags{namespace: defaultRulesNamespace, configMap: defaultRulesConfigMap, configMapKey: defaultRulesKey}
	var out, errOut bytes.Buffer
	if err := explainNode(context.Background(), &out, &errOut, r, f, "ws", "", "table"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Rules: configmap featureplug/featureplug-rules rules.yaml", "example.com/any  0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(errOut.String(), "note: the node's agent runs other rules (sha256:0123456789abcdef)") {
		t.Errorf("no note about the node's other rules:\n%s", errOut.String())
	}
	err := explainNode(context.Background(), &out, &errOut, r, f, "bare", "", "table")
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "no featureplug NodeFeature") {
		t.Errorf("node without features: %v", err)
	}
}

// TestRulesDiff checks the per-node outcome of a hand-written edit of the
// "mixed" rules on three kinds of node, and that an edit leaving a kind of
// node without resources fails.
func TestRulesDiff(t *testing.T) {
	r := &clusterFakeReader{}
	a100 := explainTestInventory(t, "dgx-a100")
	cur, err := loadClusterRules(context.Background(), r, &clusterFlags{}, "mixed")
	if err != nil {
		t.Fatal(err)
	}
	r.add(t, "a100-1", a100, nil, cur.digest)
	r.add(t, "a100-2", a100, nil, cur.digest)
	r.add(t, "h100", explainTestInventory(t, "dgx-h100"), nil, "sha256:00000000000000ff")
	r.add(t, "ws", explainTestInventory(t, "workstation"), nil, "")
	r.nodes = append(r.nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu"}})

	f := &clusterFlags{namespace: defaultRulesNamespace}
	next, err := loadClusterRules(context.Background(), r, f, explainEditRules)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := clusterNodes(context.Background(), r, f, "")
	if err != nil {
		t.Fatal(err)
	}
	rep := diffNodes(cur, next, nodes)
	ts := "time-slicing x2"
	want := []diffGroup{
		{Nodes: []string{"a100-1", "a100-2"}, diffOutcome: diffOutcome{
			Runs: runsCurrent,
			Changes: []resourceChange{
				{Resource: "example.com/a100-40gb", ToDevices: 4, ToSharing: "none"},
				{Resource: "nvidia.com/gpu", FromDevices: 4, FromSharing: "none"},
				{Resource: "nvidia.com/mig-1g.5gb", FromDevices: 6, FromSharing: "none"},
			},
			Unclaimed: []string{
				"GPU 0 MIG 2 (1g.5gb): was nvidia.com/mig-1g.5gb", "GPU 0 MIG 3 (1g.5gb): was nvidia.com/mig-1g.5gb",
				"GPU 1 MIG 2 (1g.5gb): was nvidia.com/mig-1g.5gb", "GPU 1 MIG 3 (1g.5gb): was nvidia.com/mig-1g.5gb",
				"GPU 2 MIG 3 (1g.5gb): was nvidia.com/mig-1g.5gb", "GPU 3 MIG 3 (1g.5gb): was nvidia.com/mig-1g.5gb",
			},
		}},
		{Nodes: []string{"cpu"}, diffOutcome: diffOutcome{Runs: runsUnknown,
			Notes: []string{"node cpu: no featureplug NodeFeature (featureplug-cpu): the agent has not published its features"}}},
		{Nodes: []string{"h100"}, diffOutcome: diffOutcome{Runs: runsOther, Digest: "sha256:00000000000000ff",
			Changes: []resourceChange{{Resource: "nvidia.com/gpu", FromDevices: 8, ToDevices: 8, FromSharing: "none", ToSharing: ts}}}},
		{Nodes: []string{"ws"}, diffOutcome: diffOutcome{Runs: runsUnknown,
			Changes: []resourceChange{{Resource: "nvidia.com/gpu", FromDevices: 1, ToDevices: 1, FromSharing: "none", ToSharing: ts}}}},
	}
	if !reflect.DeepEqual(rep.Groups, want) {
		got, _ := json.MarshalIndent(rep.Groups, "", "  ")
		t.Errorf("groups:\n%s", got)
	}
	if rep.Failed {
		t.Error("the edit fails the diff")
	}
	var b bytes.Buffer
	if err := writeDiff(&b, rep); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"5 nodes, 4 outcomes; 0 would lose every resource, 0 would hit an error",
		"a100-1, a100-2 (2)\n  runs      current rules\n  + example.com/a100-40gb: 0 -> 4 devices\n  - nvidia.com/gpu: 4 -> 0 devices\n",
		"  no resource  GPU 0 MIG 2 (1g.5gb): was nvidia.com/mig-1g.5gb\n",
		"h100 (1)\n  runs      other rules (sha256:00000000000000ff)\n  ~ nvidia.com/gpu: 8 -> 8 devices, sharing none -> time-slicing x2\n",
	} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("table lacks %q:\n%s", line, b.String())
		}
	}

	broken, err := loadClusterRules(context.Background(), r, f, filepath.Join("..", "..", "test", "e2e", "testdata", "explain-break.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rep = diffNodes(cur, broken, nodes)
	if !rep.Failed {
		t.Error("an edit that leaves the workstation without resources does not fail")
	}
	for _, g := range rep.Groups {
		if g.LosesAll != (g.Nodes[0] == "ws") {
			t.Errorf("group %v: losesAll %v", g.Nodes, g.LosesAll)
		}
	}
}

// BenchmarkRulesDiff1000 runs `rules diff` over 1,000 generated nodes
// (NodeFeatures of the bundled fake nodes, each with its own UUIDs), from
// the listed objects to the report.
func BenchmarkRulesDiff1000(b *testing.B) {
	kinds := []string{"dgx-a100", "dgx-h100", "workstation", "h100-nvl", "hgx-b200", "l40s-pcie", "a100-80gb-mixed", "h200-mig"}
	invs := make([]*discovery.Inventory, len(kinds))
	for i, k := range kinds {
		invs[i] = explainTestInventory(b, k)
	}
	r := &clusterFakeReader{}
	for i := range 1000 {
		inv := *invs[i%len(invs)]
		inv.GPUs = append([]discovery.GPU(nil), inv.GPUs...)
		for g := range inv.GPUs {
			gpu := &inv.GPUs[g]
			gpu.UUID = fmt.Sprintf("GPU-%08d-%04d", i, g)
			gpu.MIGDevices = append([]discovery.MIGDevice(nil), gpu.MIGDevices...)
			for m := range gpu.MIGDevices {
				gpu.MIGDevices[m].ParentUUID = gpu.UUID
				gpu.MIGDevices[m].UUID = fmt.Sprintf("MIG-%08d-%04d-%02d", i, g, m)
			}
		}
		r.add(b, fmt.Sprintf("node-%04d", i), &inv, map[string]string{"pool": "p" + fmt.Sprint(i%3)}, "")
	}
	f := &clusterFlags{namespace: defaultRulesNamespace}
	cur, err := loadClusterRules(context.Background(), r, f, "mixed")
	if err != nil {
		b.Fatal(err)
	}
	next, err := loadClusterRules(context.Background(), r, f, explainEditRules)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		nodes, err := clusterNodes(context.Background(), r, f, "")
		if err != nil {
			b.Fatal(err)
		}
		rep := diffNodes(cur, next, nodes)
		if rep.Nodes != 1000 {
			b.Fatalf("%d nodes", rep.Nodes)
		}
		if err := writeDiff(&bytes.Buffer{}, rep); err != nil {
			b.Fatal(err)
		}
	}
}
