package plan

import (
	"strings"
	"testing"
)

func TestValidateResourceName(t *testing.T) {
	tests := []struct {
		name string
		want string // "" when valid, else a part of the error
	}{
		{"nvidia.com/gpu", ""},
		{"example.com/a100-80gb", ""},
		{"nvidia.com/mig-1g.10gb", ""},
		{"example.com/A_b.c", ""},
		{"", `"" is not an extended resource name: it is empty`},
		{"gpu", `"gpu" is not an extended resource name: it needs a domain`},
		{"/gpu", `"/gpu" is not an extended resource name: both the domain`},
		{"nvidia.com/", `"nvidia.com/" is not an extended resource name: both`},
		{"nvidia.com/a/b", `"nvidia.com/a/b" is not an extended resource name`},
		{"Nvidia.com/gpu", `"Nvidia.com/gpu" is not an extended resource name: prefix part a lowercase RFC 1123 subdomain`},
		{"nvidia_x.com/gpu", `"nvidia_x.com/gpu"`},
		{"nvidia.com/-gpu", `"nvidia.com/-gpu"`},
		{"nvidia.com/gpu-", `"nvidia.com/gpu-"`},
		{"nvidia.com/g pu", `"nvidia.com/g pu"`},
		{"nvidia.com/" + strings.Repeat("g", 64), "name part must be no more than 63"},
		{"kubernetes.io/gpu", `domain "kubernetes.io" is reserved for Kubernetes`},
		{"x.k8s.io/gpu", `domain "x.k8s.io" is reserved for Kubernetes`},
		{"requests.example.com/gpu", `must not start with "requests."`},
	}
	for _, tt := range tests {
		err := ValidateResourceName(tt.name)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("ValidateResourceName(%q) = %v, want nil", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("ValidateResourceName(%q) = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}

func TestMPSLayout(t *testing.T) {
	l := MPSLayout{Root: "/run/featureplug/mps"}
	if got, want := l.PipeDir("example.com/h100-shared"), "/run/featureplug/mps/example.com_h100-shared/pipe"; got != want {
		t.Errorf("PipeDir = %q, want %q", got, want)
	}
	if got, want := l.LogDir("example.com/h100-shared"), "/run/featureplug/mps/example.com_h100-shared/log"; got != want {
		t.Errorf("LogDir = %q, want %q", got, want)
	}
}
