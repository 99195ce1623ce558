package rules

import "testing"

func TestSuggestName(t *testing.T) {
	attrs := []string{"architecture", "brand", "compute.major", "compute.minor", "family", "index", "memory", "mig.enabled", "product", "uuid"}
	for _, tt := range []struct{ name, want string }{
		{"productName", "product"},
		{"Product", "product"},
		{"computeMajor", "compute.major"},
		{"compute_minor", "compute.minor"},
		{"gpuMemory", "memory"},
		{"familly", "family"},
		{"arch", "architecture"},
		{"migEnabled", "mig.enabled"},
		{"temperature", ""},
		{"", ""},
	} {
		if got := suggestName(tt.name, attrs); got != tt.want {
			t.Errorf("suggestName(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
	if got := suggestName("nvidia.gpus", []string{"nvidia.capabilities", "nvidia.driver", "nvidia.gpu", "nvidia.mig"}); got != "nvidia.gpu" {
		t.Errorf("feature suggestion %q, want nvidia.gpu", got)
	}
}
