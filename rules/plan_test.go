package rules

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// mustParse parses rules written after the file header.
func mustParse(t *testing.T, rules string) *RuleSet {
	t.Helper()
	rs, err := Parse("r.yaml", []byte(header+rules))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return rs
}

// mustPlan plans and fails the test on error.
func mustPlan(t *testing.T, rs *RuleSet, inv *discovery.Inventory, nodeLabels map[string]string) *plan.Plan {
	t.Helper()
	p, err := rs.Plan(inv, nodeLabels)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	return p
}

// claims maps each advertised device's index ("3" or "3:1") to its resource.
func claims(p *plan.Plan) map[string]string {
	out := make(map[string]string)
	for _, r := range p.Resources {
		for _, d := range r.Devices {
			out[d.Index] = r.Name
		}
	}
	return out
}

// claimedIndexes returns the sorted indexes of the advertised devices.
func claimedIndexes(p *plan.Plan) []string {
	return slices.Sorted(maps.Keys(claims(p)))
}

// TestOperators runs one rule per NFD operator family over a node with one
// GPU of each of four models: H100 80GB (0), A100 80GB (1), A100 40GB (2)
// and T4 (3).
func TestOperators(t *testing.T) {
	tests := []struct {
		name   string
		match  string // the rule's matchFeatures or matchAny
		driver string // the node's driver version, when not the default
		want   []string
	}{
		{"In", "matchFeatures: [{feature: nvidia.gpu, matchExpressions: {product: {op: In, value: [Tesla T4, NVIDIA H200]}}}]", "", []string{"3"}},
		{"NotIn", "matchFeatures: [{feature: nvidia.gpu, matchExpressions: {product: {op: NotIn, value: [Tesla T4]}}}]", "", []string{"0", "1", "2"}},
		{"InRegexp", "matchFeatures: [{feature: nvidia.gpu, matchExpressions: {product: {op: InRegexp, value: [\"^NVIDIA A100\"]}}}]", "", []string{"1", "2"}},
		{"Exists", "matchFeatures: [{feature: nvidia.gpu, matchExpressions: {memory: {op: Exists}}}]", "", []string{"0", "1", "2", "3"}},
		{"DoesNotExist", "matchFeatures: [{feature: nvidia.gpu, matchExpressions: {memory: {op: DoesNotExist}}}]", "", nil},
		{"Gt", "matchFeatures: [{feature: nvidia.gpu, matchExpressions: {memory: {op: Gt, value: [\"40960\"]}}}]", "", []string{"0", "1"}},
		{"Ge", "matchFeatures: [{feature: nvidia.gpu, matchExpressions: {memory: {op: Ge, value: [\"40960\"]}}}]", "", []string{"0", "1", "2"}},
		{"Lt", "matchFeatures: [{feature: nvidia.gpu, matchExpressions: {memory: {op: Lt, value: [\"40960\"]}}}]", "", []string{"3"}},
		{"Le", "matchFeatures: [{feature: nvidia.gpu, matchExpressions: {memory: {op: Le, value: [\"40960\"]}}}]", "", []string{"2", "3"}},
		{"GtLt", "matchFeatures: [{feature: nvidia.gpu, matchExpressions: {memory: {op: GtLt, value: [\"15360\", \"81920\"]}}}]", "", []string{"0", "2"}},
		{"GeLe", "matchFeatures: [{feature: nvidia.gpu, matchExpressions: {memory: {op: GeLe, value: [\"15360\", \"40960\"]}}}]", "", []string{"2", "3"}},
		{"Ge on compute capability", "matchFeatures: [{feature: nvidia.gpu, matchExpressions: {compute.major: {op: Ge, value: [\"8\"]}}}]", "", []string{"0", "1", "2"}},
		{"IsTrue", "matchFeatures: [{feature: nvidia.gpu, matchExpressions: {mig.capable: {op: IsTrue}}}]", "", []string{"0", "1", "2"}},
		{"IsFalse", "matchFeatures: [{feature: nvidia.gpu, matchExpressions: {mig.capable: {op: IsFalse}}}]", "", []string{"3"}},
		{"version Ge", "matchFeatures: [{feature: nvidia.driver, matchExpressions: {version: {op: Ge, value: [\"550\"], type: version}}}]", "", []string{"0", "1", "2", "3"}},
		{"version Ge on an older driver", "matchFeatures: [{feature: nvidia.driver, matchExpressions: {version: {op: Ge, value: [\"550\"], type: version}}}]", "535.104.05", nil},
		{"version Lt", "matchFeatures: [{feature: nvidia.driver, matchExpressions: {version: {op: Lt, value: [\"550.54.14\"], type: version}}}]", "535.104.05", []string{"0", "1", "2", "3"}},
		{"version GtLt", "matchFeatures: [{feature: nvidia.driver, matchExpressions: {version: {op: GtLt, value: [\"560\", \"580\"], type: version}}}]", "", []string{"0", "1", "2", "3"}},
		{"version GeLe excludes", "matchFeatures: [{feature: nvidia.driver, matchExpressions: {cuda.version: {op: GeLe, value: [\"11.0\", \"12.4\"], type: version}}}]", "", nil},
		{"flag Exists", "matchFeatures: [{feature: nvidia.capabilities, matchExpressions: {mig: {op: Exists}}}]", "", []string{"0", "1", "2", "3"}},
		{"flag DoesNotExist", "matchFeatures: [{feature: nvidia.capabilities, matchExpressions: {mig.enabled: {op: DoesNotExist}}}]", "", []string{"0", "1", "2", "3"}},
		{"flag not set", "matchFeatures: [{feature: nvidia.capabilities, matchExpressions: {nvlink: {op: Exists}}}]", "", nil},
		{"terms are ANDed", "matchFeatures: [{feature: nvidia.gpu, matchExpressions: {product: {op: InRegexp, value: [A100]}, memory: {op: Gt, value: [\"50000\"]}}}, {feature: nvidia.driver, matchExpressions: {major: {op: In, value: [\"570\"]}}}]", "", []string{"1"}},
		{"matchAny is ORed", "matchAny: [{matchFeatures: [{feature: nvidia.gpu, matchExpressions: {product: {op: In, value: [Tesla T4]}}}]}, {matchFeatures: [{feature: nvidia.gpu, matchExpressions: {memory: {op: Gt, value: [\"81000\"]}}}]}]", "", []string{"0", "1", "3"}},
		{"matchAny and matchFeatures", "matchAny: [{matchFeatures: [{feature: nvidia.gpu, matchExpressions: {family: {op: In, value: [ampere]}}}]}]\n  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {memory: {op: Lt, value: [\"50000\"]}}}]", "", []string{"2"}},
		{"matchName", "matchFeatures: [{feature: nvidia.gpu, matchName: {op: In, value: [nvlinks]}}]", "", []string{"0", "1", "2", "3"}},
		{"feature alone", "matchFeatures: [{feature: nvidia.gpu}]", "", []string{"0", "1", "2", "3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := mustParse(t, "- name: r\n  devices: gpu\n  resource: example.com/gpu\n  "+tt.match+"\n")
			if w := rs.Warnings(); len(w) > 0 {
				t.Errorf("warnings: %v", w)
			}
			inv := modelNode()
			if tt.driver != "" {
				inv.DriverVersion = tt.driver
			}
			p := mustPlan(t, rs, inv, nil)
			if got := claimedIndexes(p); !slices.Equal(got, tt.want) {
				t.Errorf("claimed %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMIGRules(t *testing.T) {
	tests := []struct {
		name  string
		rules string
		want  map[string]string
	}{
		{"mig rules claim only MIG devices", "- name: r\n  devices: mig\n  resource: example.com/mig\n",
			map[string]string{"1:0": "example.com/mig", "1:1": "example.com/mig", "1:2": "example.com/mig"}},
		{"gpu rules claim only GPUs with MIG disabled", "- name: r\n  devices: gpu\n  resource: example.com/gpu\n",
			map[string]string{"0": "example.com/gpu"}},
		{"by profile", "- name: r\n  devices: mig\n  resource: example.com/small\n  matchFeatures: [{feature: nvidia.mig, matchExpressions: {profile: {op: In, value: [1g.5gb]}}}]\n",
			map[string]string{"1:2": "example.com/small"}},
		{"by MIG memory", "- name: r\n  devices: mig\n  resource: example.com/big\n  matchFeatures: [{feature: nvidia.mig, matchExpressions: {memory: {op: Gt, value: [\"9000\"]}}}]\n",
			map[string]string{"1:0": "example.com/big", "1:1": "example.com/big"}},
		{"by parent attribute", "- name: r\n  devices: mig\n  resource: example.com/a100\n  matchFeatures: [{feature: nvidia.mig, matchExpressions: {parent.product: {op: InRegexp, value: [A100], }, parent.index: {op: In, value: [\"1\"]}}}]\n",
			map[string]string{"1:0": "example.com/a100", "1:1": "example.com/a100", "1:2": "example.com/a100"}},
		{"the parent is the nvidia.gpu instance", "- name: r\n  devices: mig\n  resource: example.com/a100\n  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {index: {op: In, value: [\"1\"]}, mig.enabled: {op: IsTrue}}}]\n",
			map[string]string{"1:0": "example.com/a100", "1:1": "example.com/a100", "1:2": "example.com/a100"}},
		{"a MIG device sees only its own parent", "- name: r\n  devices: mig\n  resource: example.com/x\n  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {index: {op: In, value: [\"0\"]}}}]\n",
			map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPlan(t, mustParse(t, tt.rules), a100Node(), nil)
			if got := claims(p); !maps.Equal(got, tt.want) {
				t.Errorf("claims = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestFirstMatchAndExplanations checks that the first matching rule claims
// a device and that every earlier rule says why it did not.
func TestFirstMatchAndExplanations(t *testing.T) {
	rs := mustParse(t, `- name: h100
  devices: gpu
  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {product: {op: InRegexp, value: [H100]}}}]
  resource: example.com/h100
- name: big
  devices: gpu
  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {memory: {op: Gt, value: ["50000"]}}}]
  resource: example.com/big
- name: small-mig
  devices: mig
  matchAny:
  - matchFeatures: [{feature: nvidia.mig, matchExpressions: {profile: {op: In, value: [1g.5gb]}}}]
  - matchFeatures: [{feature: nvidia.driver, matchExpressions: {major: {op: Gt, value: ["900"]}}}]
  resource: example.com/small
- name: any-gpu
  devices: gpu
  resource: example.com/gpu
- name: never
  devices: gpu
  resource: example.com/never
`)
	p := mustPlan(t, rs, a100Node(), nil)
	wantMIGOff := "devices: gpu claims only GPUs with MIG disabled (MIG is enabled)"
	want := []plan.Decision{
		{Device: "GPU-00000000-0000-0000-0000-000000000000", Kind: plan.DeviceGPU, Description: "GPU 0 NVIDIA A100-SXM4-40GB",
			Resource: "example.com/gpu", Rule: "any-gpu", Skipped: []plan.RuleMiss{
				{Rule: "h100", Reason: `nvidia.gpu.product: InRegexp [H100] did not match "NVIDIA A100-SXM4-40GB"`},
				{Rule: "big", Reason: `nvidia.gpu.memory: Gt 50000 did not match "40960"`},
				{Rule: "small-mig", Reason: "devices: mig (device is a gpu)"},
			}},
		{Device: "GPU-00000001-0000-0000-0000-000000000000", Kind: plan.DeviceGPU, Description: "GPU 1 NVIDIA A100-SXM4-40GB",
			Skipped: []plan.RuleMiss{{Rule: "h100", Reason: wantMIGOff}, {Rule: "big", Reason: wantMIGOff}, {Rule: "small-mig", Reason: "devices: mig (device is a gpu)"}, {Rule: "any-gpu", Reason: wantMIGOff}, {Rule: "never", Reason: wantMIGOff}}},
		{Device: "MIG-00000001-0000-0000-0000-000000000000", Kind: plan.DeviceMIG, Description: "GPU 1 MIG 0 (3g.20gb)",
			Skipped: []plan.RuleMiss{
				{Rule: "h100", Reason: "devices: gpu (device is a mig device)"},
				{Rule: "big", Reason: "devices: gpu (device is a mig device)"},
				{Rule: "small-mig", Reason: `matchAny: no element matched: nvidia.mig.profile: In [1g.5gb] did not match "3g.20gb"; nvidia.driver.major: Gt 900 did not match "570"`},
				{Rule: "any-gpu", Reason: "devices: gpu (device is a mig device)"},
				{Rule: "never", Reason: "devices: gpu (device is a mig device)"},
			}},
		{Device: "MIG-00000001-0001-0000-0000-000000000000", Kind: plan.DeviceMIG, Description: "GPU 1 MIG 1 (2g.10gb)"},
		{Device: "MIG-00000001-0002-0000-0000-000000000000", Kind: plan.DeviceMIG, Description: "GPU 1 MIG 2 (1g.5gb)",
			Resource: "example.com/small", Rule: "small-mig", Skipped: []plan.RuleMiss{
				{Rule: "h100", Reason: "devices: gpu (device is a mig device)"},
				{Rule: "big", Reason: "devices: gpu (device is a mig device)"},
			}},
	}
	if len(p.Decisions) != len(want) {
		t.Fatalf("%d decisions, want %d", len(p.Decisions), len(want))
	}
	for i, w := range want {
		got := p.Decisions[i]
		if i == 3 {
			// Same misses as MIG 0, with its own profile.
			if got.Rule != "" || len(got.Skipped) != 5 || !strings.Contains(got.Skipped[2].Reason, `did not match "2g.10gb"`) {
				t.Errorf("decision 3 = %+v", got)
			}
			continue
		}
		if got.Device != w.Device || got.Kind != w.Kind || got.Description != w.Description || got.Resource != w.Resource || got.Rule != w.Rule {
			t.Errorf("decision %d = %+v\nwant %+v", i, got, w)
		}
		if !slices.Equal(got.Skipped, w.Skipped) {
			t.Errorf("decision %d skipped:\n got %q\nwant %q", i, got.Skipped, w.Skipped)
		}
		if (got.Resource != "") != (got.Sharing != nil) {
			t.Errorf("decision %d: resource %q with sharing %v", i, got.Resource, got.Sharing)
		}
	}
}

func TestExplanationsOfOtherMisses(t *testing.T) {
	tests := []struct {
		name, match, want string
	}{
		{"absent attribute", "matchFeatures: [{feature: nvidia.gpu, matchExpressions: {cores: {op: Exists}}}]", "nvidia.gpu.cores: Exists: no such attribute"},
		{"flag not set", "matchFeatures: [{feature: nvidia.capabilities, matchExpressions: {nvlink: {op: Exists}}}]", "nvidia.capabilities.nvlink: Exists: the flag is not set"},
		{"flag set", "matchFeatures: [{feature: nvidia.capabilities, matchExpressions: {mig: {op: DoesNotExist}}}]", "nvidia.capabilities.mig: DoesNotExist: the flag is set"},
		{"unknown feature", "matchFeatures: [{feature: nvidia.fan, matchExpressions: {speed: {op: Exists}}}]", "nvidia.fan: no such feature for this device"},
		{"matchName", "matchFeatures: [{feature: nvidia.gpu, matchName: {op: InRegexp, value: [\"^fan\"]}}]", "nvidia.gpu: matchName InRegexp [^fan] matched no name"},
		{"one matchAny element", "matchAny: [{matchFeatures: [{feature: nvidia.gpu, matchExpressions: {numa: {op: In, value: [\"7\"]}}}]}]", `matchAny: nvidia.gpu.numa: In [7] did not match "0"`},
		{"version", "matchFeatures: [{feature: nvidia.driver, matchExpressions: {version: {op: Lt, value: [\"550\"], type: version}}}]", `nvidia.driver.version: Lt 550 (version) did not match "570.86.15"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := mustParse(t, "- name: r\n  devices: gpu\n  resource: example.com/gpu\n  "+tt.match+"\n")
			p := mustPlan(t, rs, testInventory(testGPU(0, "Tesla T4"), testGPU(1, "NVIDIA A100-SXM4-40GB")), nil)
			d := p.Decisions[0]
			if d.Rule != "" || len(d.Skipped) != 1 || d.Skipped[0].Reason != tt.want {
				t.Errorf("decision = %+v, want a miss %q", d, tt.want)
			}
		})
	}
}

func TestEvaluationErrorIsAMiss(t *testing.T) {
	rs := mustParse(t, `- name: new-driver
  devices: gpu
  matchFeatures: [{feature: nvidia.driver, matchExpressions: {version: {op: Ge, value: ["550"], type: version}}}]
  resource: example.com/new
- name: rest
  devices: gpu
  resource: example.com/gpu
`)
	inv := modelNode()
	inv.DriverVersion = "unknown"
	p := mustPlan(t, rs, inv, nil)
	d := p.Decisions[0]
	if d.Rule != "rest" || len(d.Skipped) != 1 || !strings.HasPrefix(d.Skipped[0].Reason, "error: ") || !strings.Contains(d.Skipped[0].Reason, `"unknown"`) {
		t.Errorf("decision = %+v, want rest after an error naming the value", d)
	}
}

func TestNodeSelector(t *testing.T) {
	rs := mustParse(t, `- name: inference
  devices: gpu
  nodeSelector:
    matchLabels: {pool: inference}
    matchExpressions: [{key: zone, operator: NotIn, values: [b]}]
  resource: example.com/inference
  sharing: {strategy: time-slicing, replicas: 4}
- name: rest
  devices: gpu
  resource: nvidia.com/gpu
`)
	tests := []struct {
		labels map[string]string
		want   string
		miss   string
	}{
		{map[string]string{"pool": "inference", "zone": "a"}, "example.com/inference", ""},
		{map[string]string{"pool": "inference"}, "example.com/inference", ""},
		{map[string]string{"pool": "inference", "zone": "b"}, "nvidia.com/gpu", `nodeSelector "pool=inference,zone notin (b)" does not select this node`},
		{map[string]string{"pool": "training"}, "nvidia.com/gpu", `nodeSelector "pool=inference,zone notin (b)" does not select this node`},
		{nil, "nvidia.com/gpu", `nodeSelector "pool=inference,zone notin (b)" does not select this node`},
	}
	for _, tt := range tests {
		p := mustPlan(t, rs, modelNode(), tt.labels)
		if got := claims(p)["2"]; got != tt.want {
			t.Errorf("labels %v: GPU 2 is %q, want %q", tt.labels, got, tt.want)
		}
		d := p.Decisions[2]
		if tt.miss != "" && (len(d.Skipped) != 1 || d.Skipped[0].Reason != tt.miss) {
			t.Errorf("labels %v: skipped %q, want %q", tt.labels, d.Skipped, tt.miss)
		}
	}
}

func TestTemplates(t *testing.T) {
	tests := []struct {
		name     string
		devices  plan.DeviceKind
		resource string
		want     map[string]string // device index -> resource
	}{
		{"resourceName", plan.DeviceGPU, `example.com/{{ .product | resourceName }}`, map[string]string{"0": "example.com/nvidia-h100-80gb-hbm3", "3": "example.com/tesla-t4"}},
		{"trimPrefix and lower", plan.DeviceGPU, `example.com/{{ .product | trimPrefix "NVIDIA " | lower | replace " " "-" }}`, map[string]string{"0": "example.com/h100-80gb-hbm3", "3": "example.com/tesla-t4"}},
		{"dotted names", plan.DeviceGPU, `example.com/{{ .family }}-sm{{ .compute_major }}{{ index . "compute.minor" }}`, map[string]string{"0": "example.com/hopper-sm90", "3": "example.com/turing-sm75"}},
		{"upper", plan.DeviceGPU, `example.com/{{ .family | upper }}`, map[string]string{"0": "example.com/HOPPER", "3": "example.com/TURING"}},
		{"trimSuffix", plan.DeviceGPU, `example.com/{{ .product | trimSuffix " HBM3" | resourceName }}`, map[string]string{"0": "example.com/nvidia-h100-80gb", "3": "example.com/tesla-t4"}},
		{"conditions", plan.DeviceGPU, `example.com/{{ if eq .mig_capable "true" }}mig-capable{{ else }}whole{{ end }}`, map[string]string{"0": "example.com/mig-capable", "3": "example.com/whole"}},
		{"with", plan.DeviceGPU, `example.com/{{ with .family }}{{ . }}{{ end }}-{{ $.memory }}mib`, map[string]string{"0": "example.com/hopper-81559mib", "3": "example.com/turing-15360mib"}},
		{"mig profile", plan.DeviceMIG, `nvidia.com/mig-{{ .profile | replace "+" "." }}`, map[string]string{"1:0": "nvidia.com/mig-1g.10gb.me", "1:1": "nvidia.com/mig-2g.20gb"}},
		{"mig parent", plan.DeviceMIG, `example.com/{{ .parent_product | trimPrefix "NVIDIA " | resourceName }}-{{ .profile | resourceName }}`, map[string]string{"1:0": "example.com/a100-sxm4-80gb-1g.10gb-me", "1:1": "example.com/a100-sxm4-80gb-2g.20gb"}},
	}
	inv := func(kind plan.DeviceKind) *discovery.Inventory {
		if kind == plan.DeviceMIG {
			return testInventory(testGPU(0, "Tesla T4"), withMIG(testGPU(1, "NVIDIA A100-SXM4-80GB"), "1g.10gb+me", "2g.20gb"))
		}
		return testInventory(testGPU(0, "NVIDIA H100 80GB HBM3"), testGPU(3, "Tesla T4"))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := mustParse(t, "- name: r\n  devices: "+string(tt.devices)+"\n  resource: '"+tt.resource+"'\n")
			if got := claims(mustPlan(t, rs, inv(tt.devices), nil)); !maps.Equal(got, tt.want) {
				t.Errorf("claims = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestResourceNameSanitizing(t *testing.T) {
	for in, want := range map[string]string{
		"NVIDIA A100-SXM4-40GB":         "nvidia-a100-sxm4-40gb",
		"Tesla T4":                      "tesla-t4",
		"NVIDIA GeForce RTX 4090 (OEM)": "nvidia-geforce-rtx-4090-oem",
		"1g.10gb+me":                    "1g.10gb-me",
		"--A..":                         "a",
		"Ünïcode GPU":                   "n-code-gpu",
		"":                              "",
	} {
		if got := sanitizeName(in); got != want {
			t.Errorf("sanitizeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPlanErrors(t *testing.T) {
	tests := []struct {
		name  string
		rules string
		inv   *discovery.Inventory
		want  []string
	}{
		{"one resource two sharings", `- name: a100
  devices: gpu
  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {product: {op: InRegexp, value: [A100]}}}]
  resource: 'example.com/{{ .brand | lower }}'
- name: rest
  devices: gpu
  resource: 'example.com/{{ .brand | lower }}'
  sharing: {strategy: time-slicing, replicas: 2}
`, modelNode(), []string{`r.yaml:4: rules[0] "a100": sharing: resource "example.com/nvidia" of GPU 1 NVIDIA A100-SXM4-80GB is also given by rules[1] "rest" with sharing time-slicing x2; a resource has one sharing (have none)`}},
		{"a GPU and its own MIG devices", "- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\n- name: mig\n  devices: mig\n  resource: nvidia.com/gpu\n", func() *discovery.Inventory {
			inv := a100Node()
			inv.GPUs[1].MIGEnabled = false // MIG devices left over: inconsistent
			return inv
		}(), []string{`rules[1] "mig": devices: MIG device 1:0 (3g.20gb) is claimed while rule "gpu" claims its whole GPU 1`}},
		{"a device twice", "- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\n", func() *discovery.Inventory {
			inv := modelNode()
			inv.GPUs[1].UUID = inv.GPUs[0].UUID
			return inv
		}(), []string{"r.yaml: device 1 is in the inventory twice (have GPU-00000000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := mustParse(t, tt.rules).Plan(tt.inv, nil)
			if err == nil {
				t.Fatalf("Plan succeeded: %+v", p.Resources)
			}
			first := splitErrors(err)[0].Error()
			for _, w := range tt.want {
				if !strings.Contains(first, w) {
					t.Errorf("first error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestPlanRefusesMPSOnMIG checks the plan-time guard behind the load-time
// rule that mps is only for devices: gpu.
func TestPlanRefusesMPSOnMIG(t *testing.T) {
	rs := mustParse(t, "- name: mps\n  devices: gpu\n  resource: example.com/mps\n  sharing: {strategy: mps, replicas: 2}\n")
	rs.rules[0].devices = plan.DeviceMIG // what the loader refuses
	_, err := rs.Plan(a100Node(), nil)
	if err == nil || !strings.Contains(err.Error(), `rules[0] "mps": sharing.strategy: mps cannot share GPU 1 MIG 0 (3g.20gb): MIG is enabled on its GPU`) {
		t.Errorf("Plan error = %v", err)
	}
}

func TestSharing(t *testing.T) {
	tests := []struct {
		name    string
		sharing string
		want    plan.Sharing
	}{
		{"none", "", plan.Sharing{Strategy: plan.SharingNone, Replicas: 1}},
		{"explicit none", "{strategy: none, replicas: 1}", plan.Sharing{Strategy: plan.SharingNone, Replicas: 1}},
		{"time-slicing", "{strategy: time-slicing, replicas: 4, failRequestsGreaterThanOne: true}", plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 4, FailRequestsGreaterThanOne: true}},
		{"mps defaults", "{strategy: mps, replicas: 4}", plan.Sharing{Strategy: plan.SharingMPS, Replicas: 4, MPS: &plan.MPSLimits{PinnedMemoryLimitMiB: 40960 / 4, ActiveThreadPercentage: 25}}},
		{"mps defaults round down", "{strategy: mps, replicas: 3}", plan.Sharing{Strategy: plan.SharingMPS, Replicas: 3, MPS: &plan.MPSLimits{PinnedMemoryLimitMiB: 40960 / 3, ActiveThreadPercentage: 33}}},
		{"mps set", "{strategy: mps, replicas: 2, mps: {pinnedMemoryLimitMiB: 8000, activeThreadPercentage: 40}}", plan.Sharing{Strategy: plan.SharingMPS, Replicas: 2, MPS: &plan.MPSLimits{PinnedMemoryLimitMiB: 8000, ActiveThreadPercentage: 40}}},
		{"mps half set", "{strategy: mps, replicas: 2, mps: {activeThreadPercentage: 40}}", plan.Sharing{Strategy: plan.SharingMPS, Replicas: 2, MPS: &plan.MPSLimits{PinnedMemoryLimitMiB: 20480, ActiveThreadPercentage: 40}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules := "- name: r\n  devices: gpu\n  resource: example.com/gpu\n"
			if tt.sharing != "" {
				rules += "  sharing: " + tt.sharing + "\n"
			}
			p := mustPlan(t, mustParse(t, rules), a100Node(), nil)
			r, ok := p.Resource("example.com/gpu")
			if !ok {
				t.Fatalf("no resource in %+v", p.Resources)
			}
			if !r.Sharing.Same(tt.want) || (r.Sharing.MPS == nil) != (tt.want.MPS == nil) || r.Sharing.Strategy != tt.want.Strategy || r.Sharing.Replicas != tt.want.Replicas {
				t.Errorf("sharing = %s, want %s", r.Sharing, tt.want)
			}
			if d := p.Decisions[0]; d.Sharing == nil || !d.Sharing.Same(tt.want) {
				t.Errorf("decision sharing = %v, want %s", d.Sharing, tt.want)
			}
		})
	}
}

// TestMPSDefaultsUseTheSmallestDevice checks that a resource over GPUs of
// different sizes gets limits that fit on every one of them.
func TestMPSDefaultsUseTheSmallestDevice(t *testing.T) {
	p := mustPlan(t, mustParse(t, "- name: r\n  devices: gpu\n  resource: example.com/gpu\n  sharing: {strategy: mps, replicas: 2}\n"), modelNode(), nil)
	if got := p.Resources[0].Sharing.MPS.PinnedMemoryLimitMiB; got != 15360/2 {
		t.Errorf("pinned memory limit = %d MiB, want %d (half a T4)", got, 15360/2)
	}
}

func TestPlanShape(t *testing.T) {
	inv := testInventory(
		withMIG(testGPU(0, "NVIDIA A100-SXM4-80GB"), "3g.40gb", "1g.10gb"),
		testGPU(1, "NVIDIA A100-SXM4-40GB"),
		withMIG(testGPU(4, "NVIDIA A100-SXM4-80GB"), "1g.10gb", "1g.10gb"),
		testGPU(2, "Tesla T4"),
	)
	inv.GPUs[2].NUMANode = discovery.NoNUMANode
	inv.Links = discovery.LinkMatrix{{{}, {NVLinks: 4}}, {{NVLinks: 4}, {}}}
	rs, err := Load("mixed")
	if err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, rs, inv, nil)

	var names []string
	for _, r := range p.Resources {
		names = append(names, r.Name)
	}
	if want := []string{"nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"}; !slices.Equal(names, want) {
		t.Errorf("resources %v, want %v", names, want)
	}
	small, _ := p.Resource("nvidia.com/mig-1g.10gb")
	want := []plan.Device{
		{ID: "MIG-00000000-0001-0000-0000-000000000000", Kind: plan.DeviceMIG, GPUUUID: "GPU-00000000-0000-0000-0000-000000000000", GPUIndex: 0, Index: "0:1", NUMANode: 0, Profile: "1g.10gb", MemoryMiB: 10240 - 256, Rule: "mig"},
		{ID: "MIG-00000004-0000-0000-0000-000000000000", Kind: plan.DeviceMIG, GPUUUID: "GPU-00000004-0000-0000-0000-000000000000", GPUIndex: 4, Index: "4:0", NUMANode: discovery.NoNUMANode, Profile: "1g.10gb", MemoryMiB: 10240 - 256, Rule: "mig"},
		{ID: "MIG-00000004-0001-0000-0000-000000000000", Kind: plan.DeviceMIG, GPUUUID: "GPU-00000004-0000-0000-0000-000000000000", GPUIndex: 4, Index: "4:1", NUMANode: discovery.NoNUMANode, Profile: "1g.10gb", MemoryMiB: 10240 - 256, Rule: "mig"},
	}
	if !slices.Equal(small.Devices, want) {
		t.Errorf("devices of %s:\n got %+v\nwant %+v", small.Name, small.Devices, want)
	}
	gpus, _ := p.Resource("nvidia.com/gpu")
	if got := []string{gpus.Devices[0].Index, gpus.Devices[1].Index}; !slices.Equal(got, []string{"1", "2"}) {
		t.Errorf("nvidia.com/gpu devices %v, want GPUs 1 and 2 in index order", got)
	}
	if gpus.Devices[0].MemoryMiB != 40960 || gpus.Devices[1].Kind != plan.DeviceGPU || gpus.Devices[1].ID != gpus.Devices[1].GPUUUID {
		t.Errorf("nvidia.com/gpu devices %+v", gpus.Devices)
	}

	if len(p.Decisions) != 8 {
		t.Fatalf("%d decisions, want one per device (8)", len(p.Decisions))
	}
	var order []string
	for _, d := range p.Decisions {
		order = append(order, d.Description)
	}
	if want := []string{"GPU 0 NVIDIA A100-SXM4-80GB", "GPU 0 MIG 0 (3g.40gb)", "GPU 0 MIG 1 (1g.10gb)", "GPU 1 NVIDIA A100-SXM4-40GB",
		"GPU 4 NVIDIA A100-SXM4-80GB", "GPU 4 MIG 0 (1g.10gb)", "GPU 4 MIG 1 (1g.10gb)", "GPU 2 Tesla T4"}; !slices.Equal(order, want) {
		t.Errorf("decisions in order %q, want inventory order %q", order, want)
	}

	if p.Links.Score(0, 1) != 400 {
		t.Errorf("links not copied: %+v", p.Links)
	}
	inv.Links[0][1].NVLinks = 0
	if p.Links.Score(0, 1) != 400 {
		t.Errorf("the plan shares its link matrix with the inventory")
	}
}

func TestSharingString(t *testing.T) {
	for _, tt := range []struct {
		s    plan.Sharing
		want string
	}{
		{plan.Sharing{}, "none"},
		{plan.Sharing{Strategy: plan.SharingNone, Replicas: 1}, "none"},
		{plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 4, FailRequestsGreaterThanOne: true}, "time-slicing x4 (failRequestsGreaterThanOne)"},
		{plan.Sharing{Strategy: plan.SharingMPS, Replicas: 2, MPS: &plan.MPSLimits{PinnedMemoryLimitMiB: 20480, ActiveThreadPercentage: 50}}, "mps x2 (20480 MiB, 50% threads)"},
	} {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.s, got, tt.want)
		}
	}
}

func TestValidateResourceName(t *testing.T) {
	for name, ok := range map[string]bool{
		"nvidia.com/gpu":                        true,
		"nvidia.com/mig-1g.10gb.me":             true,
		"example.com/A100_80GB":                 true,
		"gpu":                                   false,
		"/gpu":                                  false,
		"nvidia.com/":                           false,
		"kubernetes.io/gpu":                     false,
		"node.kubernetes.io/gpu":                false,
		"k8s.io/gpu":                            false,
		"nvidia.com/gpu/extra":                  false,
		"nvidia.com/-gpu":                       false,
		"nvidia.com/gpu+me":                     false,
		"Nvidia.com/gpu":                        false,
		"nvidia.com/" + strings.Repeat("a", 63): true,
		"nvidia.com/" + strings.Repeat("a", 64): false,
	} {
		if err := plan.ValidateResourceName(name); (err == nil) != ok {
			t.Errorf("ValidateResourceName(%q) = %v, want ok %v", name, err, ok)
		}
	}
}

// TestPlanConcurrently checks that a RuleSet is safe for concurrent use
// (run with -race).
func TestPlanConcurrently(t *testing.T) {
	rs, err := Load(filepath.Join("testdata", "pools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				if _, err := rs.Plan(a100Node(), map[string]string{"pool": "inference"}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
