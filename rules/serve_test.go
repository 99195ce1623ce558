package rules

import (
	"slices"
	"testing"

	"github.com/featureplug/featureplug/rules/plan"
)

// TestServeLoad checks what the loader makes of serve: the values it
// takes, MPS refused for DRA, and rules that give one literal resource
// name with different serves. Rules begin on line 4 (header).
func TestServeLoad(t *testing.T) {
	tests := []struct {
		name     string
		rules    string
		err      string   // the whole error, "" when the file loads
		warnings []string // when it loads
		serve    []plan.Serve
	}{
		{
			name:  "absent",
			rules: "- name: a\n  devices: gpu\n  resource: example.com/a\n",
			serve: []plan.Serve{""},
		},
		{
			name: "both values",
			rules: "- name: a\n  devices: gpu\n  resource: example.com/a\n  serve: dra\n" +
				"- name: b\n  devices: mig\n  resource: example.com/b\n  serve: device-plugin\n",
			serve: []plan.Serve{plan.ServeDRA, plan.ServeDevicePlugin},
		},
		{
			name: "dra with time-slicing",
			rules: "- name: a\n  devices: gpu\n  resource: example.com/a\n  serve: dra\n" +
				"  sharing: {strategy: time-slicing, replicas: 4}\n",
			serve: []plan.Serve{plan.ServeDRA},
		},
		{
			name: "device-plugin with mps",
			rules: "- name: a\n  devices: gpu\n  resource: example.com/a\n  serve: device-plugin\n" +
				"  sharing: {strategy: mps, replicas: 2}\n",
			serve: []plan.Serve{plan.ServeDevicePlugin},
		},
		{
			name:  "unknown value",
			rules: "- name: a\n  devices: gpu\n  resource: example.com/a\n  serve: DRA\n",
			err:   `r.yaml:7: rules[0] "a": serve: must be "device-plugin" or "dra", or absent to leave it to the agent's --serve (have "DRA")`,
		},
		{
			name:  "the old name of the API",
			rules: "- name: a\n  devices: gpu\n  resource: example.com/a\n  serve: deviceplugin\n",
			err:   `r.yaml:7: rules[0] "a": serve: must be "device-plugin" or "dra", or absent to leave it to the agent's --serve (have "deviceplugin")`,
		},
		{
			name:  "not a string",
			rules: "- name: a\n  devices: gpu\n  resource: example.com/a\n  serve: [dra]\n",
			err:   `r.yaml:7: rules[0] "a": serve: must be a string, not array`,
		},
		{
			name: "dra with mps",
			rules: "- name: h100-mps\n  devices: gpu\n  resource: example.com/h100\n  serve: dra\n" +
				"  sharing: {strategy: mps, replicas: 2}\n",
			serve: []plan.Serve{plan.ServeDRA},
		},
		{
			name: "dra with mps and client limits",
			rules: "- name: h100-mps\n  devices: gpu\n  resource: example.com/h100\n  serve: dra\n" +
				"  sharing: {strategy: mps, replicas: 4, mps: {activeThreadPercentage: 25, pinnedMemoryLimitMiB: 10240}}\n",
			serve: []plan.Serve{plan.ServeDRA},
		},
		{
			name: "one name, two explicit serves, every node",
			rules: "- name: a100\n  devices: gpu\n  resource: example.com/gpu\n  serve: dra\n" +
				"- name: t4\n  devices: gpu\n  resource: example.com/gpu\n  serve: device-plugin\n",
			err: `r.yaml:11: rules[1] "t4": serve: resource "example.com/gpu" is also given by rules[0] "a100" with serve: dra, ` +
				`on every node; a resource is served through one API on a node, so give both rules the same serve (have "device-plugin")`,
		},
		{
			name: "one name, serve and none, same nodes",
			rules: "- name: a100\n  devices: gpu\n  nodeSelector: {matchLabels: {pool: x}}\n  resource: example.com/gpu\n" +
				"- name: t4\n  devices: gpu\n  nodeSelector: {matchLabels: {pool: x}}\n  resource: example.com/gpu\n  serve: dra\n",
			err: `r.yaml:12: rules[1] "t4": serve: resource "example.com/gpu" is also given by rules[0] "a100" with no serve ` +
				`(the agent's --serve), on the same nodes (nodeSelector "pool=x"); a resource is served through one API on a node, ` +
				`so give both rules the same serve (have "dra")`,
		},
		{
			name: "one name, node selectors that may overlap",
			rules: "- name: gpu-dra\n  devices: gpu\n  nodeSelector: {matchLabels: {featureplug.io/serve: dra}}\n  resource: nvidia.com/gpu\n  serve: dra\n" +
				"- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\n",
			warnings: []string{`r.yaml:9: rules[1] "gpu": serve: resource "nvidia.com/gpu" is also given by rules[0] "gpu-dra" with serve: dra, ` +
				`and their node selectors may select the same node; a resource is served through one API on a node, so such a node's plan ` +
				`is refused when both rules claim devices there (make the selectors exclusive)`},
			serve: []plan.Serve{plan.ServeDRA, ""},
		},
		{
			name: "one name, exclusive node selectors",
			rules: "- name: gpu-dra\n  devices: gpu\n  nodeSelector: {matchLabels: {featureplug.io/serve: dra}}\n  resource: nvidia.com/gpu\n  serve: dra\n" +
				"- name: gpu\n  devices: gpu\n  nodeSelector: {matchExpressions: [{key: featureplug.io/serve, operator: NotIn, values: [dra]}]}\n" +
				"  resource: nvidia.com/gpu\n  serve: device-plugin\n",
			serve: []plan.Serve{plan.ServeDRA, plan.ServeDevicePlugin},
		},
		{
			name: "one name, one serve",
			rules: "- name: a100\n  devices: gpu\n  resource: example.com/gpu\n  serve: dra\n" +
				"- name: t4\n  devices: gpu\n  resource: example.com/gpu\n  serve: dra\n",
			serve: []plan.Serve{plan.ServeDRA, plan.ServeDRA},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Parse("r.yaml", []byte(header+tt.rules))
			if tt.err != "" {
				if err == nil {
					t.Fatalf("Parse succeeded, want error:\n%s", tt.err)
				}
				if got := err.Error(); got != tt.err {
					t.Fatalf("Parse error:\n got %s\nwant %s", got, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := rs.Warnings(); !slices.Equal(got, tt.warnings) {
				t.Errorf("warnings:\n got %q\nwant %q", got, tt.warnings)
			}
			var got []plan.Serve
			for _, r := range rs.rules {
				got = append(got, r.serve)
			}
			if !slices.Equal(got, tt.serve) {
				t.Errorf("serve of the rules = %q, want %q", got, tt.serve)
			}
		})
	}
}

// TestServePlan checks that the plan carries the serve of the rules that
// gave each resource, in its resources and in the decisions, and that a
// node where two rules give one resource name with different serves gets
// no plan, the error naming both rules.
func TestServePlan(t *testing.T) {
	// modelNode: GPU 0 H100, 1 A100 80GB, 2 A100 40GB, 3 T4.
	const migrating = `- name: a100-dra
  devices: gpu
  nodeSelector: {matchLabels: {featureplug.io/serve: dra}}
  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {product: {op: InRegexp, value: [A100]}}}]
  resource: example.com/a100
  serve: dra
- name: a100
  devices: gpu
  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {product: {op: InRegexp, value: [A100]}}}]
  resource: example.com/a100
- name: t4
  devices: gpu
  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {product: {op: In, value: [Tesla T4]}}}]
  resource: example.com/t4
  serve: device-plugin
`
	tests := []struct {
		name      string
		rules     string
		labels    map[string]string
		resources map[string]plan.Serve
		decisions []plan.Serve // in inventory order
		err       string       // the whole error
	}{
		{
			name:      "pool moved to dra",
			rules:     migrating,
			labels:    map[string]string{"featureplug.io/serve": "dra"},
			resources: map[string]plan.Serve{"example.com/a100": plan.ServeDRA, "example.com/t4": plan.ServeDevicePlugin},
			decisions: []plan.Serve{"", plan.ServeDRA, plan.ServeDRA, plan.ServeDevicePlugin},
		},
		{
			name:      "pool not moved",
			rules:     migrating,
			resources: map[string]plan.Serve{"example.com/a100": "", "example.com/t4": plan.ServeDevicePlugin},
			decisions: []plan.Serve{"", "", "", plan.ServeDevicePlugin},
		},
		{
			name: "templated name, two serves",
			rules: `- name: a100-40gb
  devices: gpu
  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {memory: {op: Lt, value: ["50000"]}}}]
  resource: 'example.com/{{ .family }}'
  serve: dra
- name: rest
  devices: gpu
  resource: 'example.com/{{ .family }}'
`,
			// GPU 1 (80GB) goes to rest first: devices are decided in
			// inventory order.
			err: `r.yaml:4: rules[0] "a100-40gb": serve: resource "example.com/ampere" of GPU 2 NVIDIA A100-SXM4-40GB is also given by ` +
				`rules[1] "rest" with no serve (the agent's --serve); a resource is served through one API on a node, so give both rules ` +
				`the same serve (have "dra")`,
		},
		{
			name: "templated name, two explicit serves",
			rules: `- name: dp
  devices: gpu
  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {memory: {op: Gt, value: ["50000"]}}}]
  resource: 'example.com/{{ .family }}'
  serve: device-plugin
- name: dra
  devices: gpu
  resource: 'example.com/{{ .family }}'
  serve: dra
`,
			err: `r.yaml:9: rules[1] "dra": serve: resource "example.com/ampere" of GPU 2 NVIDIA A100-SXM4-40GB is also given by ` +
				`rules[0] "dp" with serve: device-plugin; a resource is served through one API on a node, so give both rules ` +
				`the same serve (have "dra")`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := mustParse(t, tt.rules).Plan(modelNode(), tt.labels)
			if tt.err != "" {
				if err == nil {
					t.Fatalf("Plan succeeded, want error:\n%s", tt.err)
				}
				if got := err.Error(); got != tt.err {
					t.Fatalf("Plan error:\n got %s\nwant %s", got, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			got := make(map[string]plan.Serve)
			for _, r := range p.Resources {
				got[r.Name] = r.Serve
			}
			if len(got) != len(tt.resources) {
				t.Errorf("resources = %v, want %v", got, tt.resources)
			}
			for name, want := range tt.resources {
				if s, ok := got[name]; !ok || s != want {
					t.Errorf("resource %s: serve %q (present %v), want %q", name, s, ok, want)
				}
			}
			var decided []plan.Serve
			for _, d := range p.Decisions {
				decided = append(decided, d.Serve)
			}
			if !slices.Equal(decided, tt.decisions) {
				t.Errorf("decisions' serve = %q, want %q", decided, tt.decisions)
			}
		})
	}
}

// TestServeCheckNodes checks that `rules check` (CheckNodes) finds a serve
// conflict that only templates make, on a catalog node.
func TestServeCheckNodes(t *testing.T) {
	rs := mustParse(t, `- name: a100-40gb
  devices: gpu
  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {memory: {op: Lt, value: ["50000"]}}}]
  resource: 'example.com/{{ .family }}'
  serve: dra
- name: rest
  devices: gpu
  resource: 'example.com/{{ .family }}'
`)
	err := rs.CheckNodes([]CheckNode{{Name: "node m", Inventory: modelNode()}})
	want := `r.yaml:4: rules[0] "a100-40gb": serve: on node m: resource "example.com/ampere" of GPU 2 NVIDIA A100-SXM4-40GB is also given by ` +
		`rules[1] "rest" with no serve (the agent's --serve); a resource is served through one API on a node, so give both rules ` +
		`the same serve (have "dra")`
	if err == nil || err.Error() != want {
		t.Errorf("CheckNodes error:\n got %v\nwant %s", err, want)
	}
}

func TestServeSummary(t *testing.T) {
	tests := []struct {
		rules string
		want  string
	}{
		{"- name: a\n  devices: gpu\n  resource: example.com/a\n", ""},
		{"- name: a\n  devices: gpu\n  resource: example.com/a\n  serve: dra\n" +
			"- name: b\n  devices: mig\n  resource: example.com/b\n" +
			"- name: c\n  devices: mig\n  resource: example.com/c\n  serve: device-plugin\n" +
			"- name: d\n  devices: gpu\n  resource: example.com/d\n  serve: dra\n",
			"serve: dra: a, d; device-plugin: c; the agent's --serve: b"},
	}
	for _, tt := range tests {
		if got := mustParse(t, tt.rules).ServeSummary(); got != tt.want {
			t.Errorf("ServeSummary() = %q, want %q", got, tt.want)
		}
	}
}
