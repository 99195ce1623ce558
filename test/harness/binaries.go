package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Component binary names, as built by test/components/build.sh.
const (
	EtcdBinary          = "etcd"
	KubeAPIServerBinary = "kube-apiserver"
	KubeletBinary       = "kubelet"
	NFDMasterBinary     = "nfd-master"
	// KubeControllerManagerBinary is started only by the tests that ask for
	// it (StartControllerManager).
	KubeControllerManagerBinary = "kube-controller-manager"
)

// buildScript is the component build script, relative to the test module root.
const buildScript = "components/build.sh"

// coldBuildBudget is how much time a test must have left before a helper
// starts a cold build of missing components itself; with less, it fails and
// names the command to run first.
const coldBuildBudget = 45 * time.Minute

// Binaries is the cache directory holding the component binaries.
type Binaries struct {
	// Dir is the directory holding the binaries (usable as KUBEBUILDER_ASSETS).
	Dir string
}

// Path returns the path of the named component binary in b.
func (b Binaries) Path(name string) string { return filepath.Join(b.Dir, name) }

// RequireBinaries returns the cache directory with the named components
// (EtcdBinary, KubeAPIServerBinary, KubeletBinary, NFDMasterBinary,
// KubeControllerManagerBinary, KubeSchedulerBinary, ContainerdBinary, which
// brings CtrBinary and ContainerdShimBinary), building the missing ones with
// test/components/build.sh. When the test's deadline leaves too little time
// for a cold build, the test fails with the command to run instead.
func RequireBinaries(t testing.TB, names ...string) Binaries {
	t.Helper()
	script, err := findBuildScript()
	if err != nil {
		t.Fatalf("locating the component build script: %v", err)
	}
	out, err := exec.Command("bash", script, "--dir").Output()
	if err != nil {
		t.Fatalf("%s --dir: %v", script, exitDetail(err))
	}
	bins := Binaries{Dir: strings.TrimSpace(string(out))}
	missing, err := missingComponents(script, names)
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) == 0 {
		return bins
	}
	if os.Getenv("FEATUREPLUG_NO_BUILD") != "" {
		t.Fatalf("components %v are missing in %s and FEATUREPLUG_NO_BUILD is set; build them with: %s", missing, bins.Dir, script)
	}
	ctx := context.Background()
	if dl, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := dl.Deadline(); ok {
			if time.Until(d) < coldBuildBudget {
				t.Fatalf("components %v are missing in %s and the test deadline (%s left) is too short for a cold build; run %s first, or go test -timeout 60m",
					missing, bins.Dir, time.Until(d).Round(time.Second), script)
			}
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, d.Add(-time.Minute))
			defer cancel()
		}
	}
	t.Logf("building missing components %v with %s (a cold build takes many minutes)", missing, script)
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = append(os.Environ(), "FEATUREPLUG_COMPONENTS="+strings.Join(missing, " "))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("building components %v failed after %s: %v\n%s", missing, time.Since(start).Round(time.Second), err, tail(log.String(), 40))
	}
	t.Logf("built components %v in %s:\n%s", missing, time.Since(start).Round(time.Second), log.String())
	return bins
}

// missingComponents returns the components of names that build.sh --check
// finds missing: a binary not there, or one of another pinned version
// than the script's (containerd's is stamped next to it).
func missingComponents(script string, names []string) ([]string, error) {
	cmd := exec.Command("bash", script, "--check")
	cmd.Env = append(os.Environ(), "FEATUREPLUG_COMPONENTS="+strings.Join(names, " "))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		return nil, nil
	}
	// "missing in <dir>: a b"
	msg := strings.TrimSpace(stderr.String())
	i := strings.LastIndex(msg, ": ")
	if !strings.HasPrefix(msg, "missing in ") || i < 0 {
		return nil, fmt.Errorf("%s --check: %s", script, msg)
	}
	return strings.Fields(msg[i+2:]), nil
}

// findBuildScript finds components/build.sh in the test module, walking up from
// the working directory (go test runs in the package directory).
func findBuildScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("getting working directory: %w", err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		p := filepath.Join(d, buildScript)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no %s in %s or any parent directory", buildScript, dir)
		}
	}
}

// exitDetail adds a command's stderr to its exit error.
func exitDetail(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}
