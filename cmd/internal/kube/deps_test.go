package kube

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestAgentLinksNoClientset: the featureplug binary, as the image builds
// it, links no clientset.
// client-go's typed clientset and its scheme (every built-in API group),
// client-go's discovery client (which imports that scheme) and NFD's
// generated clientset (which imports discovery) cost the agent about 30 MB
// of binary and most of its package-initialization time
// (docs/performance.md); a command that needs the API server goes through
// Interface instead.
func TestAgentLinksNoClientset(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	// As the image builds it: without rules explain --claim, whose
	// scheduler allocator links more of k8s.io/api (docs/deployment.md).
	cmd := exec.Command("go", "list", "-deps", "-tags", "noclaimexplain", "github.com/featureplug/featureplug/cmd/featureplug")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS=-O2 -g -Wno-deprecated-declarations")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbidden := map[string]bool{
		"k8s.io/client-go/kubernetes":                                          true,
		"k8s.io/client-go/kubernetes/scheme":                                   true,
		"k8s.io/client-go/discovery":                                           true,
		"sigs.k8s.io/node-feature-discovery/api/generated/clientset/versioned": true,
	}
	for _, pkg := range strings.Fields(string(out)) {
		if forbidden[pkg] || (strings.HasPrefix(pkg, "k8s.io/api/") && pkg != "k8s.io/api/core/v1" && pkg != "k8s.io/api/resource/v1") ||
			strings.HasPrefix(pkg, "k8s.io/client-go/applyconfigurations/") {
			t.Errorf("cmd/featureplug links %s; use cmd/internal/kube's client instead", pkg)
		}
	}
}
