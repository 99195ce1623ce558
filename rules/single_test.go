package rules_test

import (
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/plan"
)

// singleDiscover discovers a bundled fake node or one given as YAML.
func singleDiscover(t *testing.T, node string) *discovery.Inventory {
	t.Helper()
	var n *fakenode.Node
	var err error
	if strings.Contains(node, "\n") {
		n, err = fakenode.Parse("inline", []byte(node))
	} else {
		n, err = fakenode.Named(node)
	}
	if err != nil {
		t.Fatal(err)
	}
	inv, err := discovery.Discover(n.NVML())
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// TestSingleRefusesNonUniformNodes: under the single strategy a node with
// MIG devices of several profiles, MIG beside whole GPUs, or a MIG GPU
// without MIG devices advertises 0 devices, as NVIDIA's device plugin and
// gpu-feature-discovery (internal/lm/mig-strategy.go) refuse it; uniform
// nodes are served.
func TestSingleRefusesNonUniformNodes(t *testing.T) {
	const uniform = "name: u\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n  - product: A100-SXM4-40GB\n    count: 2\n    mig:\n      - profile: 1g.5gb\n        count: 7\n"
	const emptyMIG = "name: e\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n  - product: A100-SXM4-40GB\n    count: 2\n    mig: []\n"
	tests := []struct {
		node    string
		why     string // "" : served
		devices int
	}{
		{node: "dgx-a100", why: "GPUs with MIG enabled (GPU 0, GPU 1, GPU 2, GPU 3) beside GPUs with MIG disabled (GPU 4, GPU 5, GPU 6, GPU 7)"},
		{node: "a100-80gb-mixed", why: "GPUs with MIG enabled (GPU 0) beside GPUs with MIG disabled (GPU 1)"},
		{node: "h200-mig", why: "MIG devices of more than one profile (1g.18gb, 2g.35gb, 3g.71gb)"},
		{node: emptyMIG, why: "GPU 0 has MIG enabled but no MIG devices"},
		{node: uniform, devices: 14},
		{node: "dgx-h100", devices: 8},
	}
	rs, err := rules.Load("single")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		name, _, _ := strings.Cut(tt.node, "\n")
		t.Run(name, func(t *testing.T) {
			inv := singleDiscover(t, tt.node)
			p, err := rs.Plan(inv, nil)
			if err != nil {
				t.Fatal(err)
			}
			if p.MIGStrategy != plan.MIGStrategySingle {
				t.Errorf("strategy %q, want single", p.MIGStrategy)
			}
			r, ok := p.Resource("nvidia.com/gpu")
			if !ok {
				t.Fatal("no nvidia.com/gpu resource: the kubelet must see it with 0 devices, not keep the old count")
			}
			if p.SingleInvalid != tt.why {
				t.Errorf("SingleInvalid %q, want %q", p.SingleInvalid, tt.why)
			}
			if len(r.Devices) != tt.devices {
				t.Errorf("%d devices, want %d", len(r.Devices), tt.devices)
			}
			if tt.why == "" {
				if len(p.Problems) != 0 {
					t.Errorf("problems on a uniform node: %v", p.Problems)
				}
				return
			}
			// Every refused device is explained.
			var out strings.Builder
			if err := rules.WriteExplanation(&out, p); err != nil {
				t.Fatal(err)
			}
			if len(p.Problems) == 0 || !strings.Contains(out.String(), "MIG strategy single refuses this node: "+tt.why) {
				t.Errorf("explain does not say why:\n%s", out.String())
			}
			for _, d := range p.Decisions {
				if d.Resource != "" {
					t.Errorf("%s still goes to %s", d.Description, d.Resource)
				}
			}
		})
	}
}

// TestMIGStrategyOfRules: the strategy a rules file amounts to, per node
// (a rule whose node selector rejects the node does not count).
func TestMIGStrategyOfRules(t *testing.T) {
	const perPool = `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: single-pool
  devices: mig
  nodeSelector: {matchLabels: {nvidia.com/device-plugin.config: a}}
  resource: nvidia.com/gpu
- name: mixed-pool
  devices: mig
  nodeSelector: {matchLabels: {nvidia.com/device-plugin.config: b}}
  resource: 'nvidia.com/mig-{{ .profile | replace "+" "." }}'
- name: gpu
  devices: gpu
  resource: nvidia.com/gpu
`
	inv := singleDiscover(t, "dgx-h100")
	for _, tt := range []struct {
		rules  string
		labels map[string]string
		want   string
	}{
		{rules: "none", want: plan.MIGStrategyNone},
		{rules: "single", want: plan.MIGStrategySingle},
		{rules: "mixed", want: plan.MIGStrategyMixed},
		{rules: "per-model", want: plan.MIGStrategyMixed},
		{rules: perPool, labels: map[string]string{"nvidia.com/device-plugin.config": "a"}, want: plan.MIGStrategySingle},
		{rules: perPool, labels: map[string]string{"nvidia.com/device-plugin.config": "b"}, want: plan.MIGStrategyMixed},
		{rules: perPool, want: plan.MIGStrategyNone},
	} {
		var rs *rules.RuleSet
		var err error
		if strings.Contains(tt.rules, "\n") {
			rs, err = rules.Parse("per-pool.yaml", []byte(tt.rules))
		} else {
			rs, err = rules.Load(tt.rules)
		}
		if err != nil {
			t.Fatal(err)
		}
		p, err := rs.Plan(inv, tt.labels)
		if err != nil {
			t.Fatal(err)
		}
		if p.MIGStrategy != tt.want {
			t.Errorf("%s with %v: strategy %q, want %q", rs.Source(), tt.labels, p.MIGStrategy, tt.want)
		}
	}
}

// TestSingleRefusesSharedRename: NVIDIA's single strategy with a sharing
// config that renames by default pools MIG devices into
// nvidia.com/gpu.shared; a non-uniform node is refused under that name too.
func TestSingleRefusesSharedRename(t *testing.T) {
	const shared = `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: gpu
  devices: gpu
  resource: nvidia.com/gpu.shared
  sharing: {strategy: time-slicing, replicas: 2}
- name: mig
  devices: mig
  resource: nvidia.com/gpu.shared
  sharing: {strategy: time-slicing, replicas: 2}
`
	rs, err := rules.Parse("single-shared.yaml", []byte(shared))
	if err != nil {
		t.Fatal(err)
	}
	p, err := rs.Plan(singleDiscover(t, "dgx-a100"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.MIGStrategy != plan.MIGStrategySingle {
		t.Errorf("strategy %q, want single", p.MIGStrategy)
	}
	r, ok := p.Resource("nvidia.com/gpu.shared")
	if !ok || len(r.Devices) != 0 {
		t.Fatalf("nvidia.com/gpu.shared: present %v with %d devices, want present with 0", ok, len(r.Devices))
	}
	if !strings.Contains(p.SingleInvalid, "beside GPUs with MIG disabled") {
		t.Errorf("SingleInvalid %q does not say why", p.SingleInvalid)
	}
	if len(p.Problems) == 0 || p.Problems[0].Resource != "nvidia.com/gpu.shared" {
		t.Errorf("problems %v: want the refused devices under nvidia.com/gpu.shared", p.Problems)
	}
}
