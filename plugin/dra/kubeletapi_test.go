package dra

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
)

// TestServesEveryKubeletDRAVersion fails when the k8s.io/kubelet module
// this build links has a version of the kubelet's DRA API (pkg/apis/dra)
// or of its device health API (pkg/apis/dra-health) that the driver does
// not register and list at registration, or when the driver lists one the
// module no longer has: the kubelet side is featureplug's own code (see
// the package doc), so a new version is served only when it is written
// here.
func TestServesEveryKubeletDRAVersion(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", "k8s.io/kubelet").Output()
	if err != nil {
		t.Fatalf("go list -m k8s.io/kubelet: %v", err)
	}
	dir, version, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	for _, api := range []struct {
		path, service string
	}{
		// The service name is "<version>.<service>" (drapbv1.DRAPluginService
		// is "v1.DRAPlugin").
		{"pkg/apis/dra", strings.TrimPrefix(drapbv1.DRAPluginService, "v1")},
		{"pkg/apis/dra-health", strings.TrimPrefix(drahealthv1.DRAResourceHealthService, "v1")},
	} {
		versions := kubeletAPIVersions(t, filepath.Join(dir, api.path))
		if len(versions) == 0 {
			t.Fatalf("k8s.io/kubelet@%s: no version packages under %s", version, api.path)
		}
		var listed []string
		for _, s := range supportedServices {
			if v, ok := strings.CutSuffix(s, api.service); ok {
				listed = append(listed, v)
			}
		}
		for _, v := range versions {
			if !slices.Contains(listed, v) {
				t.Errorf("k8s.io/kubelet@%s has %s/%s, which the driver does not serve: register %s%s (registerDRA) and list it in supportedServices, most recent first",
					version, api.path, v, v, api.service)
			}
		}
		for _, v := range listed {
			if !slices.Contains(versions, v) {
				t.Errorf("the driver lists %s%s, but k8s.io/kubelet@%s has no %s/%s", v, api.service, version, api.path, v)
			}
		}
	}
}

// kubeletAPIVersions lists the version packages (v1, v1beta1, ...) of an
// API directory of the kubelet module: its subdirectories holding Go
// files.
func kubeletAPIVersions(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "v") {
			continue
		}
		if goFiles, _ := filepath.Glob(filepath.Join(dir, e.Name(), "*.go")); len(goFiles) > 0 {
			out = append(out, e.Name())
		}
	}
	return out
}
