package manifests

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
	"sigs.k8s.io/node-feature-discovery/pkg/apis/nfd/nodefeaturerule"
	"sigs.k8s.io/yaml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/rules"
)

// features discovers a bundled fake node and returns its NFD features, as
// the agent publishes them.
func features(t *testing.T, node string) (*discovery.Inventory, *nfdv1alpha1.Features) {
	t.Helper()
	n, err := fakenode.Named(node)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := discovery.Discover(n.NVML())
	if err != nil {
		t.Fatalf("discovering fake node %s: %v", node, err)
	}
	return inv, discovery.Features(inv)
}

// TestExampleNodeFeatureRule evaluates the example NodeFeatureRule with
// NFD's own evaluator, as nfd-master does, against the features of the
// bundled fake nodes.
func TestExampleNodeFeatureRule(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(manifestsDir(t), "examples", "nodefeaturerule-gpu.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var nfr nfdv1alpha1.NodeFeatureRule
	if err := yaml.UnmarshalStrict(data, &nfr); err != nil {
		t.Fatalf("examples/nodefeaturerule-gpu.yaml: %v", err)
	}
	const (
		a100   = "example.com/a100-node"
		nvlink = "example.com/nvlink"
		mig    = "example.com/mig-enabled"
	)
	for node, want := range map[string][]string{
		"dgx-a100":        {a100, nvlink, mig},
		"a100-80gb-mixed": {a100, nvlink, mig},
		"dgx-h100":        {nvlink},
		"h200-mig":        {nvlink, mig},
		"workstation":     nil,
	} {
		t.Run(node, func(t *testing.T) {
			_, f := features(t, node)
			got := map[string]string{}
			for i := range nfr.Spec.Rules {
				out, err := nodefeaturerule.Execute(&nfr.Spec.Rules[i], f, true)
				if err != nil {
					t.Fatalf("rule %q: %v", nfr.Spec.Rules[i].Name, err)
				}
				maps.Copy(got, out.Labels)
			}
			wantLabels := map[string]string{}
			for _, l := range want {
				wantLabels[l] = "true"
			}
			if !maps.Equal(got, wantLabels) {
				t.Errorf("labels %v, want %v", got, wantLabels)
			}
		})
	}
}

// TestExampleRules loads every shipped rules file (examples, the base's
// ConfigMap, the chart's default) and plans it on fake nodes: each must be
// valid and give the resources its comments promise.
func TestExampleRules(t *testing.T) {
	dir := manifestsDir(t)
	for _, tc := range []struct {
		file       string
		node       string
		nodeLabels map[string]string
		want       map[string]int // resource name -> devices
	}{
		{file: "base/rules.yaml", node: "dgx-a100", want: map[string]int{
			"nvidia.com/gpu": 4, "nvidia.com/mig-3g.20gb": 2, "nvidia.com/mig-2g.10gb": 8, "nvidia.com/mig-1g.5gb": 6}},
		{file: "helm/featureplug/files/rules.yaml", node: "workstation", want: map[string]int{"nvidia.com/gpu": 1}},
		{file: "examples/rules/per-model-time-slicing.yaml", node: "workstation",
			want: map[string]int{"nvidia.com/l4.shared": 1}},
		{file: "examples/rules/per-model-time-slicing.yaml", node: "dgx-h100",
			want: map[string]int{"nvidia.com/h100-80gb-hbm3": 8}},
		{file: "examples/rules/mps-inference-pool.yaml", node: "dgx-h100",
			nodeLabels: map[string]string{"example.com/pool": "inference"},
			want:       map[string]int{"nvidia.com/h100.mps": 8}},
		{file: "examples/rules/mps-inference-pool.yaml", node: "dgx-h100",
			want: map[string]int{"nvidia.com/gpu": 8}},
		{file: "examples/rules/mixed-mig.yaml", node: "a100-80gb-mixed", want: map[string]int{
			"nvidia.com/gpu": 1, "nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-2g.20gb": 1,
			"nvidia.com/mig-1g.10gb.shared": 1, "nvidia.com/mig-1g.10gb.me.shared": 1}},
	} {
		label := tc.file + " on " + tc.node
		for k, v := range tc.nodeLabels {
			label += " " + k + "=" + v
		}
		t.Run(label, func(t *testing.T) {
			rs, err := rules.Load(filepath.Join(dir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			inv, _ := features(t, tc.node)
			plan, err := rs.Plan(inv, tc.nodeLabels)
			if err != nil {
				t.Fatalf("planning %s on %s: %v", tc.file, tc.node, err)
			}
			got := map[string]int{}
			for _, r := range plan.Resources {
				got[r.Name] = len(r.Devices)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("resources %v, want %v", sortedKeys(got), tc.want)
			}
		})
	}
}

func sortedKeys(m map[string]int) []string {
	return slices.Sorted(maps.Keys(m))
}
