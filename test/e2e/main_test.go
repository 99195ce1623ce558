// Package e2e runs `featureplug run` as a real process on fake nodes against
// the real components the harness starts: kube-apiserver with etcd,
// nfd-master, and the kubelet's own device manager. Each test checks what an
// admin or a workload would see: Node labels, NodeFeature objects, Events,
// device-plugin capacity and allocations.
package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// productModule is the module path of the product, whose root holds
// cmd/featureplug and the bundled fake nodes.
const productModule = "github.com/featureplug/featureplug"

// cgoFlags is the CGO_CFLAGS value every build in the project uses; another
// value would rebuild go-nvml from scratch.
const cgoFlags = "-O2 -g -Wno-deprecated-declarations"

// build holds what TestMain prepared for the tests. It is written once, by
// TestMain before any test runs, and only read afterwards.
var build struct {
	// agent is the featureplug binary under test.
	agent string
	// root is the product repository root.
	root string
}

// TestMain builds the featureplug binary once for the whole run, from the
// product module itself (so that its own go.mod and go.sum decide the
// dependencies), unless -short skips the end-to-end tests.
func TestMain(m *testing.M) {
	// Run as the documentation's kubectl or helm (docs_shim_test.go).
	if os.Getenv(docsShimEnv) != "" {
		os.Exit(docsShim())
	}
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	code, err := buildAndRun(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func buildAndRun(m *testing.M) (int, error) {
	root, err := productRoot()
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "featureplug-e2e-bin-")
	if err != nil {
		return 0, fmt.Errorf("creating the binary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "featureplug")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/featureplug")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS="+cgoFlags)
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("building featureplug in %s: %w\n%s", root, err, out)
	}
	build.agent, build.root = bin, root
	return m.Run(), nil
}

// productRoot finds the product module's root: the nearest parent directory
// whose go.mod declares productModule.
func productRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("getting the working directory: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && modulePath(string(b)) == productModule {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod of %s in %s or any parent directory", productModule, wd)
		}
	}
}

// modulePath returns the module path a go.mod declares.
func modulePath(gomod string) string {
	for _, line := range strings.Split(gomod, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}
