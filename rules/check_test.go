package rules

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery"
)

// gpuNode is a node of n whole GPUs of one product.
func gpuNode(n int, product string) *discovery.Inventory {
	inv := testInventory()
	for i := range n {
		inv.GPUs = append(inv.GPUs, testGPU(i, product))
	}
	return inv
}

// TestCheckOn checks that CheckOn refuses exactly what the agent would
// refuse or leave out on the node, with the agent's own messages, and
// passes the plan Plan makes otherwise.
func TestCheckOn(t *testing.T) {
	const h100 = "NVIDIA H100 80GB HBM3"
	for _, tc := range []struct {
		name, rules string
		inv         *discovery.Inventory
		labels      map[string]string
		// want are substrings of the error; none: valid.
		want []string
		// planErr: Plan itself fails (no plan), and CheckOn says the same.
		planErr bool
	}{
		{name: "valid", rules: "- name: all\n  devices: gpu\n  resource: nvidia.com/gpu\n", inv: gpuNode(8, h100)},
		{
			name:  "mig rules on a node without MIG serve nothing",
			rules: "- name: mig\n  devices: mig\n  resource: 'nvidia.com/mig-{{ .profile }}'\n", inv: gpuNode(8, h100),
			want: []string{`r.yaml: on node n: the plan serves no device: none of the node's 8 GPUs and MIG devices goes to a resource (no rule claims any of them)`,
				"says serveNothing: true"},
		},
		{
			name:  "replicas against the node's real device count",
			rules: "- name: shared\n  devices: gpu\n  resource: example.com/shared\n  sharing: {strategy: time-slicing, replicas: 1024}\n", inv: gpuNode(16, h100),
			want:    []string{`r.yaml:4: rules[0] "shared": resource example.com/shared: 16 devices x 1024 replicas = 16384 device IDs, over the cap of 8192 per resource (plan.MaxDevicesPerResource)`},
			planErr: true,
		},
		{
			name:  "replicas at the cap on 8 GPUs",
			rules: "- name: shared\n  devices: gpu\n  resource: example.com/shared\n  sharing: {strategy: time-slicing, replicas: 1024}\n", inv: gpuNode(8, h100),
		},
		{
			name:  "a device left out",
			rules: "- name: mig\n  devices: mig\n  resource: 'nvidia.com/mig-{{ .profile }}'\n- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\n",
			inv:   testInventory(testGPU(0, "NVIDIA A100-SXM4-80GB"), withMIG(testGPU(1, "NVIDIA A100-SXM4-80GB"), "1g.10gb+me", "2g.20gb")),
			want:  []string{`r.yaml:6: rules[0] "mig": resource: template gives "nvidia.com/mig-1g.10gb+me" for GPU 1 MIG 0 (1g.10gb+me)`},
		},
		{
			name:  "node selector not selecting",
			rules: "- name: pool\n  devices: gpu\n  nodeSelector: {matchLabels: {pool: a}}\n  resource: nvidia.com/gpu\n", inv: gpuNode(2, h100),
			want: []string{"the plan serves no device"},
		},
		{
			name:  "node selector selecting",
			rules: "- name: pool\n  devices: gpu\n  nodeSelector: {matchLabels: {pool: a}}\n  resource: nvidia.com/gpu\n", inv: gpuNode(2, h100),
			labels: map[string]string{"pool": "a"},
		},
		{name: "a node without devices", rules: "- name: all\n  devices: gpu\n  resource: nvidia.com/gpu\n", inv: testInventory()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := mustParse(t, tc.rules)
			p, err := rs.CheckOn("node n", tc.inv, tc.labels)
			want, planErr := rs.Plan(tc.inv, tc.labels)
			if (planErr != nil) != tc.planErr || (p == nil) != tc.planErr {
				t.Fatalf("Plan error %v, CheckOn plan %v: want Plan to fail: %v", planErr, p != nil, tc.planErr)
			}
			if planErr != nil && (err == nil || err.Error() != planErr.Error()) {
				t.Errorf("CheckOn error %v, want Plan's own %v", err, planErr)
			}
			if planErr == nil && p.CheckServes() == nil && len(p.Problems) == 0 && err != nil {
				t.Errorf("CheckOn refuses a plan the agent serves: %v", err)
			}
			if planErr == nil && len(p.Resources) != len(want.Resources) {
				t.Errorf("CheckOn's plan has %d resources, Plan's %d", len(p.Resources), len(want.Resources))
			}
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("CheckOn: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("CheckOn passed")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			for _, e := range splitErrors(err) {
				var pe *Error
				if !errors.As(e, &pe) {
					t.Errorf("%v (%T) is not an *Error", e, e)
				}
			}
			if planErr == nil {
				for _, pr := range p.Problems {
					if !strings.Contains(err.Error(), pr.Message) {
						t.Errorf("CheckOn does not report the agent's problem %q", pr.Message)
					}
				}
			}
		})
	}
	rs, err := Parse("r.yaml", []byte("apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nserveNothing: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := rs.CheckOn("node n", gpuNode(8, h100), nil); err != nil || !p.ServeNothing {
		t.Errorf("a serveNothing file: %v, plan %+v", err, p)
	}
}

// TestCheckNodesLabelSets checks that CheckNodes plans the nodes with the
// labels the node selectors ask for, so that two rules that only meet on
// a labelled node are found to conflict there.
func TestCheckNodesLabelSets(t *testing.T) {
	rs := mustParse(t, `- name: h100-pool
  devices: gpu
  nodeSelector: {matchLabels: {pool: shared}}
  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {product: {op: InRegexp, value: ["H100"]}}}]
  resource: example.com/gpu
  sharing: {strategy: time-slicing, replicas: 2}
- name: rest
  devices: gpu
  resource: example.com/gpu
`)
	if len(rs.Warnings()) == 0 {
		t.Error("no warning at load about the overlapping selectors")
	}
	if _, err := rs.Plan(modelNode(), nil); err != nil {
		t.Fatalf("without labels the rules do not meet, but Plan fails: %v", err)
	}
	err := rs.CheckNodes([]CheckNode{{Name: "node m", Inventory: modelNode()}})
	want := `rules[1] "rest": sharing: on node m with node labels pool=shared: resource "example.com/gpu" of GPU 1 NVIDIA A100-SXM4-80GB is also given by rules[0] "h100-pool"`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("CheckNodes: %v\nwant an error containing %q", err, want)
	}

	for _, tc := range []struct {
		rules string
		want  []string
	}{
		{"- name: a\n  devices: gpu\n  resource: a.com/a\n", []string{""}},
		{"- name: a\n  devices: gpu\n  nodeSelector: {matchLabels: {pool: a}}\n  resource: a.com/a\n" +
			"- name: b\n  devices: gpu\n  nodeSelector: {matchLabels: {pool: b}}\n  resource: a.com/a\n" +
			"- name: c\n  devices: gpu\n  nodeSelector: {matchExpressions: [{key: zone, operator: Exists}, {key: gpu, operator: NotIn, values: [x]}]}\n  resource: a.com/a\n",
			[]string{"", "pool=a", "pool=b", "zone=true", "pool=a,zone=true"}},
	} {
		var got []string
		for _, set := range mustParse(t, tc.rules).labelSets() {
			got = append(got, labelString(set))
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("labelSets = %q, want %q", got, tc.want)
		}
	}
}

// labelString formats labels as a selector would, sorted.
func labelString(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

// TestCheckNodesLargest checks the caps on the largest node a Synthetic
// node stands for: its GPUs times the devices like those matched that one
// GPU holds, with the plan's own message.
func TestCheckNodesLargest(t *testing.T) {
	inv := testInventory(testGPU(0, "NVIDIA A100-SXM4-40GB"),
		withMIG(testGPU(1, "NVIDIA A100-SXM4-40GB"), "1g.5gb"), withMIG(testGPU(2, "NVIDIA A100-SXM4-40GB"), "3g.20gb"))
	node := CheckNode{Name: "synthetic", Inventory: inv, Synthetic: true, Largest: &LargestNode{GPUs: 16, PerGPU: map[string]int{
		inv.GPUs[1].MIGDevices[0].UUID: 7, inv.GPUs[2].MIGDevices[0].UUID: 2,
	}}}
	for _, tc := range []struct {
		name, rules, want string
	}{
		{"whole GPUs at the cap", "- name: s\n  devices: gpu\n  resource: a.com/s\n  sharing: {strategy: time-slicing, replicas: 512}\n", ""},
		{"whole GPUs over the cap", "- name: s\n  devices: gpu\n  resource: a.com/s\n  sharing: {strategy: time-slicing, replicas: 513}\n",
			`r.yaml:4: rules[0] "s": on the largest node of NVIDIA A100-SXM4-40GB (16 GPUs), if every rule claimed every device it matches: resource a.com/s: 16 devices x 513 replicas = 8208 device IDs, over the cap of 8192 per resource (plan.MaxDevicesPerResource)`},
		{"3g MIG devices: 2 a GPU", "- name: s\n  devices: mig\n  matchFeatures: [{feature: nvidia.mig, matchExpressions: {profile: {op: In, value: [3g.20gb]}}}]\n  resource: a.com/s\n  sharing: {strategy: time-slicing, replicas: 256}\n", ""},
		{"1g MIG devices: 7 a GPU", "- name: s\n  devices: mig\n  resource: a.com/s\n  sharing: {strategy: time-slicing, replicas: 74}\n",
			`on the largest node of NVIDIA A100-SXM4-40GB (16 GPUs, 7 MIG devices each), if every rule claimed every device it matches: resource a.com/s: 112 devices x 74 replicas = 8288 device IDs`},
		{"two names, the node cap", "- name: s\n  devices: mig\n  resource: 'a.com/s-{{ index . \"slices.gi\" }}'\n  sharing: {strategy: time-slicing, replicas: 1024}\n",
			`resource a.com/s-3: 32 devices x 1024 replicas = 32768 device IDs`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := mustParse(t, tc.rules).CheckNodes([]CheckNode{node})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckNodes: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("CheckNodes: %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}
