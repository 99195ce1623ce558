package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	nfdclient "sigs.k8s.io/node-feature-discovery/api/generated/clientset/versioned"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/test/harness"
)

// diffScaleNodes is the size of TestRulesDiff1000Nodes' cluster.
const diffScaleNodes = 1000

// diffScaleKinds are the bundled fake nodes its nodes are made of, in turn.
var diffScaleKinds = []string{"dgx-a100", "dgx-h100", "workstation", "h100-nvl", "hgx-b200", "l40s-pcie", "a100-80gb-mixed", "h200-mig"}

// TestRulesDiff1000Nodes runs `rules diff` against a real API server
// holding 1,000 GPU Nodes of eight kinds, each with the NodeFeature its
// agent would publish under the builtin "mixed" rules (features of the
// bundled fake node with UUIDs of its own, and the annotations), and 100
// Nodes without an agent. It logs how long the command takes (the goal is
// under 2 s; docs/performance.md) and checks that the table fits on one
// screen.
func TestRulesDiff1000Nodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver and creates 1,100 Nodes")
	}
	api := harness.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := api.CreateNamespace(ctx, agentNamespace); err != nil {
		t.Fatal(err)
	}
	templates := make([]*nfdv1alpha1.NodeFeature, len(diffScaleKinds))
	for i, kind := range diffScaleKinds {
		templates[i] = diffScaleTemplate(t, kind)
	}
	// The test's own clients, at a rate that creates 2,200 objects in
	// seconds.
	cfg := rest.CopyConfig(api.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nfd, err := nfdclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, diffScaleNodes+100)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				name := fmt.Sprintf("scale-%04d", i)
				if i >= diffScaleNodes {
					name = fmt.Sprintf("cpu-%04d", i)
				}
				if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
					Labels: map[string]string{"pool": fmt.Sprintf("p%d", i%3)}}}, metav1.CreateOptions{}); err != nil {
					errs <- err
					continue
				}
				if i >= diffScaleNodes {
					continue
				}
				nf := diffScaleNodeFeature(templates[i%len(templates)], name, i)
				if _, err := nfd.NfdV1alpha1().NodeFeatures(agentNamespace).Create(ctx, nf, metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range diffScaleNodes + 100 {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("created %d Nodes and %d NodeFeatures in %s", diffScaleNodes+100, diffScaleNodes, time.Since(start).Round(time.Millisecond))

	edit := filepath.Join(build.root, "test", "e2e", "testdata", "explain-edit.yaml")
	var times []string
	var out string
	for range 3 {
		begin := time.Now()
		out = explainRun(t, 1, "rules", "diff", "--rules", edit, "--kubeconfig", api.KubeconfigPath)
		times = append(times, time.Since(begin).Round(time.Millisecond).String())
	}
	t.Logf("rules diff over %d nodes (%d without an agent): %s (three runs, wall time of the process)", diffScaleNodes+100, 100, strings.Join(times, ", "))
	t.Logf("the table:\n%s", out)
	if n := strings.Count(out, "\n"); n > 60 {
		t.Errorf("%d lines for %d nodes of %d kinds, want one screen:\n%s", n, diffScaleNodes, len(diffScaleKinds), out)
	}
	for _, want := range []string{fmt.Sprintf("%d nodes: %d compared in ", diffScaleNodes+100, diffScaleNodes), "Without an agent (100 nodes): cpu-1000, cpu-1001, cpu-1002, cpu-1003 and 96 more\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	rep := runDiff(t, 1, "--rules", edit, "--kubeconfig", api.KubeconfigPath)
	grouped := 0
	for _, g := range rep.Groups {
		grouped += len(g.Nodes)
	}
	if rep.Nodes != diffScaleNodes+100 || grouped != diffScaleNodes || len(rep.WithoutAgent) != 100 {
		t.Errorf("report: %d nodes, %d in groups, %d without an agent", rep.Nodes, grouped, len(rep.WithoutAgent))
	}
}

// diffScaleTemplate is the NodeFeature an agent publishes for a bundled
// fake node with the builtin "mixed" rules: its features (`featureplug
// discover`) and annotations (the plan of `featureplug rules explain`).
func diffScaleTemplate(t *testing.T, kind string) *nfdv1alpha1.NodeFeature {
	t.Helper()
	var discovered struct {
		Features *nfdv1alpha1.Features `json:"features"`
	}
	if out := explainRun(t, 0, "discover", "--fake-node", kind, "-o", "json"); json.Unmarshal([]byte(out), &discovered) != nil || discovered.Features == nil {
		t.Fatalf("discover --fake-node %s -o json: no features:\n%s", kind, out)
	}
	// What the plan serves, as the agent records it (all through device
	// plugins: the builtin rules do not choose).
	var p struct {
		Resources []struct {
			Name    string `json:"name"`
			Devices []struct {
				Index string `json:"index"`
			} `json:"devices"`
		} `json:"resources"`
	}
	if out := explainRun(t, 0, "rules", "explain", "--rules", "mixed", "--fake-node", kind, "-o", "json"); json.Unmarshal([]byte(out), &p) != nil {
		t.Fatalf("rules explain --fake-node %s -o json: not a plan:\n%s", kind, out)
	}
	served := explainServedValue{DefaultServe: "device-plugin", Resources: make([]explainServedResource, len(p.Resources))}
	for i, r := range p.Resources {
		sr := &served.Resources[i]
		sr.Name, sr.Count, sr.Serve = r.Name, len(r.Devices), "device-plugin"
		for _, d := range r.Devices {
			sr.Devices = append(sr.Devices, d.Index)
		}
	}
	value, err := json.Marshal(served)
	if err != nil {
		t.Fatal(err)
	}
	return &nfdv1alpha1.NodeFeature{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			explainDigestAnnotation:    "builtin:mixed",
			explainResourcesAnnotation: string(value),
		}},
		Spec: nfdv1alpha1.NodeFeatureSpec{Features: *discovered.Features},
	}
}

// diffScaleNodeFeature is template for node, its devices given UUIDs of
// their own (n numbers the node).
func diffScaleNodeFeature(template *nfdv1alpha1.NodeFeature, node string, n int) *nfdv1alpha1.NodeFeature {
	nf := template.DeepCopy()
	nf.Name, nf.Namespace = nodeFeatureName(node), agentNamespace
	nf.Labels = map[string]string{nfdv1alpha1.NodeFeatureObjNodeNameLabel: node, "app.kubernetes.io/managed-by": "featureplug"}
	uuids := map[string]string{}
	renamed := func(uuid string) string {
		if _, ok := uuids[uuid]; !ok {
			prefix, _, _ := strings.Cut(uuid, "-")
			uuids[uuid] = fmt.Sprintf("%s-%08d-%04d", prefix, n, len(uuids))
		}
		return uuids[uuid]
	}
	for _, feature := range []string{"nvidia.gpu", "nvidia.mig"} {
		for _, e := range nf.Spec.Features.Instances[feature].Elements {
			for _, k := range []string{"uuid", "parent.uuid"} {
				if v, ok := e.Attributes[k]; ok {
					e.Attributes[k] = renamed(v)
				}
			}
		}
	}
	return nf
}
