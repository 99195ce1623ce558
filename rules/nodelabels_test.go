package rules

import "testing"

func TestUsesNodeLabels(t *testing.T) {
	for _, tt := range []struct {
		name, rules string
		want        bool
	}{
		{"builtin mixed", "", false},
		{"node selector", `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: pool
  devices: gpu
  nodeSelector:
    matchLabels: {pool: inference}
  resource: example.com/inference
`, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var rs *RuleSet
			var err error
			if tt.rules == "" {
				rs, err = Load("mixed")
			} else {
				rs, err = Parse("rules.yaml", []byte(tt.rules))
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := rs.UsesNodeLabels(); got != tt.want {
				t.Errorf("UsesNodeLabels() = %v, want %v", got, tt.want)
			}
		})
	}
}
