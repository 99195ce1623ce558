package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
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
	classes    []resourcev1.DeviceClass
	// err, when set, is every request's error.
	err error
}

func (r *clusterFakeReader) Nodes(_ context.Context, selector string) ([]corev1.Node, error) {
	if r.err != nil {
		return nil, r.err
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, err
	}
	var out []corev1.Node
	for _, n := range r.nodes {
		// The kubelet labels every Node with its hostname.
		l := labels.Set{"kubernetes.io/hostname": n.Name}
		maps.Copy(l, n.Labels)
		if sel.Matches(l) {
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
	if r.err != nil {
		return nil, r.err
	}
	var out []nfdv1alpha1.NodeFeature
	for _, nf := range r.features {
		if node == "" || nf.Labels[labeler.NodeNameLabel] == node {
			out = append(out, nf)
		}
	}
	return out, nil
}

func (r *clusterFakeReader) ConfigMap(_ context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	if r.err != nil {
		return nil, r.err
	}
	for i := range r.configMaps {
		if r.configMaps[i].Namespace == namespace && r.configMaps[i].Name == name {
			return &r.configMaps[i], nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
}

func (r *clusterFakeReader) DeviceClasses(context.Context) ([]resourcev1.DeviceClass, error) {
	return r.classes, r.err
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
					// The note applies where the local plan has links
					// the cluster's lacks; no other note applies here.
					noted := strings.Contains(errOut.String(), "note: GPU links (topology) are not published")
					if want := format != "table" && n != "workstation"; noted != want {
						t.Errorf("note about topology on stderr: %v, want %v:\n%s", noted, want, errOut.String())
					}
					if strings.Contains(errOut.String(), "node selectors") {
						t.Errorf("a note about node selectors for rules without any:\n%s", errOut.String())
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
	// Rules that select nodes: the note about which labels they see applies.
	errOut.Reset()
	if err := explainNode(context.Background(), &out, &errOut, r, f, "ws", filepath.Join("..", "..", "rules", "testdata", "pools.yaml"), "table"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut.String(), "note: node selectors see the Node's labels") {
		t.Errorf("no note about node selectors for rules with some:\n%s", errOut.String())
	}
	err := explainNode(context.Background(), &out, &errOut, r, f, "bare", "", "table")
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "no featureplug NodeFeature") {
		t.Errorf("node without features: %v", err)
	}
}
