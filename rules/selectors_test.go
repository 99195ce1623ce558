package rules

import (
	"errors"
	"strings"
	"testing"
)

// "One resource name has one sharing" holds per node: rules that certainly
// select the same nodes are an error at load time, rules that may select the
// same node are a warning, rules that cannot are fine; a node's plan refuses
// two sharings that meet on it.
func TestSharingPerNode(t *testing.T) {
	rule := func(name, selector, sharing string) string {
		s := "- name: " + name + "\n  devices: gpu\n  resource: nvidia.com/gpu\n"
		if selector != "" {
			s += "  nodeSelector: " + selector + "\n"
		}
		if sharing != "" {
			s += "  sharing: " + sharing + "\n"
		}
		return s
	}
	const (
		ts2     = "{strategy: time-slicing, replicas: 2}"
		ts4     = "{strategy: time-slicing, replicas: 4}"
		poolA   = "{matchLabels: {pool: a}}"
		poolB   = "{matchLabels: {pool: b}}"
		inA     = "{matchExpressions: [{key: pool, operator: In, values: [a, c]}]}"
		notInA  = "{matchExpressions: [{key: pool, operator: NotIn, values: [a, c]}]}"
		noPool  = "{matchExpressions: [{key: pool, operator: DoesNotExist}]}"
		hasPool = "{matchExpressions: [{key: pool, operator: Exists}]}"
		gpuA    = "{matchLabels: {gpu: a}}"
	)
	tests := []struct {
		name    string
		rules   string
		err     string // substring of the load error, "" for none
		warning string // substring of the one warning, "" for none
	}{
		{"no selectors", rule("a", "", ts2) + rule("b", "", ts4),
			`r.yaml:11: rules[1] "b": sharing: resource "nvidia.com/gpu" is also given by rules[0] "a" with sharing time-slicing x2, on every node; a resource has one sharing per node (have time-slicing x4)`, ""},
		{"same selector", rule("a", poolA, ts2) + rule("b", poolA, ""),
			`on the same nodes (nodeSelector "pool=a")`, ""},
		{"disjoint matchLabels", rule("a", poolA, ts2) + rule("b", poolB, ts4), "", ""},
		{"In and NotIn", rule("a", inA, ts2) + rule("b", notInA, ts4), "", ""},
		{"In and DoesNotExist", rule("a", inA, ts2) + rule("b", noPool, ""), "", ""},
		{"Exists and DoesNotExist", rule("a", hasPool, ts2) + rule("b", noPool, ""), "", ""},
		{"same sharing", rule("a", "", ts2) + rule("b", poolA, ts2), "", ""},
		{"overlap on other keys", rule("a", poolA, ts2) + rule("b", gpuA, ts4), "",
			`rules[1] "b": sharing: resource "nvidia.com/gpu" is also given by rules[0] "a" with sharing time-slicing x2, and their node selectors may select the same node`},
		{"one without selector", rule("a", poolA, ts2) + rule("b", "", ""), "", "may select the same node"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := Parse("r.yaml", []byte(header+tt.rules))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Parse error %v, want one containing %q", err, tt.err)
				}
				var e *Error
				if !errors.As(err, &e) || e.Field != "sharing" {
					t.Errorf("error %#v is not an *Error on field sharing", e)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			w := rs.Warnings()
			switch {
			case tt.warning == "" && len(w) > 0:
				t.Errorf("warnings %q, want none", w)
			case tt.warning != "" && (len(w) != 1 || !strings.Contains(w[0], tt.warning)):
				t.Errorf("warnings %q, want one containing %q", w, tt.warning)
			}
		})
	}
}

// A node whose labels select two rules that give one name two sharings
// on its devices gets no plan; nodes each rule selects alone get theirs.
func TestSharingPerNodePlan(t *testing.T) {
	rs := mustParse(t, `- name: a
  devices: gpu
  nodeSelector: {matchLabels: {pool: a}}
  matchFeatures:
  - feature: nvidia.gpu
    matchExpressions:
      product: {op: InRegexp, value: [H100]}
  resource: nvidia.com/gpu
  sharing: {strategy: time-slicing, replicas: 2}
- name: b
  devices: gpu
  nodeSelector: {matchLabels: {gpu: b}}
  resource: nvidia.com/gpu
  sharing: {strategy: time-slicing, replicas: 4}
`)
	inv := modelNode()
	for labels, want := range map[string][2]int{"pool=a": {1, 2}, "gpu=b": {4, 4}} {
		k, v, _ := strings.Cut(labels, "=")
		p := mustPlan(t, rs, inv, map[string]string{k: v})
		r, ok := p.Resource("nvidia.com/gpu")
		if !ok || len(r.Devices) != want[0] || r.Sharing.Replicas != want[1] {
			t.Errorf("node %s: nvidia.com/gpu = %+v, want %d devices x%d", labels, r, want[0], want[1])
		}
	}
	_, err := rs.Plan(inv, map[string]string{"pool": "a", "gpu": "b"})
	if err == nil || !strings.Contains(err.Error(), `rules[1] "b": sharing: resource "nvidia.com/gpu" of GPU 1 NVIDIA A100-SXM4-80GB is also given by rules[0] "a" with sharing time-slicing x2`) {
		t.Errorf("Plan on a node both select: error %v, want the two sharings named", err)
	}
}
