package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/featureplug/featureplug/test/harness"
)

// TestDRAClassesCreated runs `featureplug dra classes` on every bundled
// rules file (the builtins and manifests/examples/rules) and creates the
// DeviceClasses it prints in the real kube-apiserver, which validates
// names, CEL selectors (syntax, types, cost) and extendedResourceName;
// each class must come back as it was sent.
func TestDRAClassesCreated(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: needs kube-apiserver")
	}
	api := harness.StartAPIServer(t)
	ctx := context.Background()
	classes := api.Client.ResourceV1().DeviceClasses()

	files := []string{"none", "mixed", "per-model", "single"}
	examples, err := filepath.Glob(filepath.Join(build.root, "manifests", "examples", "rules", "*.yaml"))
	if err != nil || len(examples) == 0 {
		t.Fatalf("no example rules in %s: %v", build.root, err)
	}
	files = append(files, examples...)
	for _, file := range files {
		stdout, stderr := draClassRun(t, "dra", "classes", "--rules", file, "-o", "json")
		var list struct {
			Items []resourceapi.DeviceClass `json:"items"`
		}
		if err := json.Unmarshal([]byte(stdout), &list); err != nil {
			t.Fatalf("%s: output is not a JSON list: %v\n%s", file, err, stdout)
		}
		if len(list.Items) == 0 {
			t.Fatalf("%s: no classes\nstderr:\n%s", file, stderr)
		}
		for i := range list.Items {
			want := &list.Items[i]
			got, err := classes.Create(ctx, want, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("%s: creating DeviceClass %s: %v\nselector: %s", file, want.Name, err, want.Spec.Selectors[0].CEL.Expression)
			}
			if want.Spec.ExtendedResourceName != nil && (got.Spec.ExtendedResourceName == nil || *got.Spec.ExtendedResourceName != *want.Spec.ExtendedResourceName) {
				t.Errorf("%s: DeviceClass %s: extendedResourceName %v, want %s (is DRAExtendedResource on?)", file, want.Name, got.Spec.ExtendedResourceName, *want.Spec.ExtendedResourceName)
			}
			if len(got.Spec.Selectors) != 1 || got.Spec.Selectors[0].CEL == nil || got.Spec.Selectors[0].CEL.Expression != want.Spec.Selectors[0].CEL.Expression {
				t.Errorf("%s: DeviceClass %s: selectors %+v, want %+v", file, want.Name, got.Spec.Selectors, want.Spec.Selectors)
			}
		}
		t.Logf("%s: %d DeviceClasses created", filepath.Base(file), len(list.Items))
		if strings.HasSuffix(file, "mps-inference-pool.yaml") && !strings.Contains(stderr, `nodeSelector: a DeviceClass cannot select nodes`) {
			t.Errorf("%s: stderr does not name the nodeSelector:\n%s", file, stderr)
		}
		// The next file gives some of the same names.
		for _, c := range list.Items {
			if err := classes.Delete(ctx, c.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("deleting DeviceClass %s: %v", c.Name, err)
			}
		}
	}
}

// draClassRun runs the featureplug binary, which must succeed, and returns
// its stdout and stderr.
func draClassRun(t *testing.T, args ...string) (string, string) {
	t.Helper()
	cmd := exec.Command(build.agent, args...)
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("featureplug %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), errOut.String()
}
