package labeler

import (
	"maps"
	"os"
	"path/filepath"
	"testing"

	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
	"sigs.k8s.io/node-feature-discovery/pkg/apis/nfd/nodefeaturerule"
	"sigs.k8s.io/yaml"

	"github.com/featureplug/featureplug/discovery"
)

// TestNodeFeatureRuleExample evaluates the example NodeFeatureRule under
// testdata with NFD's own evaluator against the features featureplug
// publishes, as nfd-master would.
func TestNodeFeatureRuleExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "nodefeaturerule-example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var nfr nfdv1alpha1.NodeFeatureRule
	if err := yaml.UnmarshalStrict(data, &nfr); err != nil {
		t.Fatalf("example NodeFeatureRule: %v", err)
	}
	oldDriver := h100()
	oldDriver.DriverVersion = "535.161.08"
	tests := []struct {
		name string
		inv  *discovery.Inventory
		want map[string]string
	}{
		{"A100 with MIG", a100MixedMIG(), map[string]string{
			"feature.node.kubernetes.io/nvidia-a100":        "true",
			"feature.node.kubernetes.io/nvidia-driver-550":  "true",
			"feature.node.kubernetes.io/nvidia-mig-enabled": "true",
		}},
		{"H100", h100(), map[string]string{"feature.node.kubernetes.io/nvidia-driver-550": "true"}},
		{"H100 on an older driver", oldDriver, map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			features := discovery.Features(tt.inv)
			got := map[string]string{}
			for i := range nfr.Spec.Rules {
				out, err := nodefeaturerule.Execute(&nfr.Spec.Rules[i], features, true)
				if err != nil {
					t.Fatalf("rule %s: %v", nfr.Spec.Rules[i].Name, err)
				}
				maps.Copy(got, out.Labels)
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("labels %v, want %v", got, tt.want)
			}
		})
	}
}
