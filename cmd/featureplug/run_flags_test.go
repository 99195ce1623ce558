package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestRunHelpDocumentsEveryFlagAndItsEnvironmentVariable(t *testing.T) {
	out, err := execute(t, "run", "--help")
	if err != nil {
		t.Fatal(err)
	}
	newRunCommand().Flags().VisitAll(func(f *pflag.Flag) {
		if !strings.Contains(out, "--"+f.Name) || !strings.Contains(out, "$"+envName(f.Name)) {
			t.Errorf("run --help does not document --%s and $%s", f.Name, envName(f.Name))
		}
	})
}

func TestRunFlagsFromEnvironment(t *testing.T) {
	t.Setenv("FEATUREPLUG_PUBLISH", "file")
	t.Setenv("FEATUREPLUG_DEVICE_LIST_STRATEGY", "envvar, cdi-cri")
	t.Setenv("FEATUREPLUG_IGNORED_XIDS", "13,79")
	t.Setenv("FEATUREPLUG_REDISCOVER_INTERVAL", "10s")
	t.Setenv("FEATUREPLUG_RULES", "from-env.yaml")
	cmd := newRunCommand()
	if err := cmd.Flags().Parse([]string{"--rules", "from-flag.yaml"}); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	get := func(name string) string { return cmd.Flags().Lookup(name).Value.String() }
	for name, want := range map[string]string{
		"publish":              "file",
		"device-list-strategy": "[envvar,cdi-cri]",
		"ignored-xids":         "[13,79]",
		"rediscover-interval":  "10s",
		"rules":                "from-flag.yaml", // the command line wins
	} {
		if got := get(name); got != want {
			t.Errorf("--%s = %q, want %q", name, got, want)
		}
	}

	t.Setenv("FEATUREPLUG_RESYNC_INTERVAL", "soon")
	if err := applyEnv(newRunCommand().Flags()); err == nil || !strings.Contains(err.Error(), "FEATUREPLUG_RESYNC_INTERVAL") || !strings.Contains(err.Error(), "soon") {
		t.Errorf("a bad environment value gives %v, want an error naming the variable and value", err)
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	t.Setenv("FEATUREPLUG_STATE_DIR", t.TempDir())
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--fake-node", "dgx-h100", "--publish", "carrier-pigeon", "--metrics-addr", ""}, `--publish: "carrier-pigeon"`},
		{[]string{"run", "--fake-node", "dgx-h100", "--publish", "none", "--log-level", "loud"}, `--log-level: "loud"`},
		{[]string{"run", "--fake-node", "dgx-h100", "--publish", "nodefeature", "--metrics-addr", ""}, "--publish nodefeature needs an API server"},
		{[]string{"run", "--fake-node", "dgx-h100", "--publish", "none", "--device-id-strategy", "serial", "--metrics-addr", ""}, "serial"},
		{[]string{"run", "--fake-node", "l40s-vfio", "--publish", "none", "--vfio-health-interval", "-1s", "--metrics-addr", ""}, "--vfio-health-interval: -1s is negative"},
	}
	for _, tt := range tests {
		_, err := execute(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want one containing %q", tt.args, err, tt.want)
		}
	}
}

// TestRunRefusesAKubeletDirThatIsAFile: --kubelet-dir naming a file is
// one usage error naming the flag and the path, before anything starts
// (no plan applied, no sink's error after it).
func TestRunRefusesAKubeletDirThatIsAFile(t *testing.T) {
	t.Setenv("FEATUREPLUG_STATE_DIR", t.TempDir())
	file := filepath.Join(t.TempDir(), "device-plugins")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := execute(t, "run", "--fake-node", "dgx-h100", "--publish", "none", "--metrics-addr", "", "--kubelet-dir", file)
	want := "--kubelet-dir " + file + " is not a directory (it is a regular file)"
	if exitCode(err) != 2 || err.Error() != want+": give the kubelet's device-plugin directory, e.g. /var/lib/kubelet/device-plugins/" {
		t.Errorf("error %v (exit %d), want exit 2 with %q", err, exitCode(err), want)
	}
	for _, never := range []string{"plan applied", "Apply after Run returned", "ERROR"} {
		if strings.Contains(out, never) {
			t.Errorf("the output says %q:\n%s", never, out)
		}
	}
	// Under a file: the directory cannot be made.
	under := filepath.Join(file, "sub")
	_, err = execute(t, "run", "--fake-node", "dgx-h100", "--publish", "none", "--metrics-addr", "", "--kubelet-dir", under)
	if want := "--kubelet-dir " + under + " cannot be made: " + file + " is a regular file, not a directory"; exitCode(err) != 2 || err.Error() != want {
		t.Errorf("error %v (exit %d), want exit 2 with %q", err, exitCode(err), want)
	}
}

func TestPrepareStateDir(t *testing.T) {
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	dir := filepath.Join(t.TempDir(), "var", "lib", "featureplug")
	if got := prepareStateDir(dir, log); got != dir {
		t.Errorf("prepareStateDir(%s) = %q, want the directory", dir, got)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("state directory %s: %v, %v; want a directory with mode 0700", dir, fi, err)
	}

	// Under a regular file: it cannot be created; the agent runs without
	// persistence and says so.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := prepareStateDir(filepath.Join(file, "state"), log); got != "" {
		t.Errorf("prepareStateDir under a file = %q, want \"\" (no persistence)", got)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "running without persistence") {
		t.Errorf("no warning about running without persistence: %s", logs.String())
	}
}
