package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/plugin/kubeletsim"
)

// executeRoot runs the whole command tree, as main does, and returns its
// output and the exit code main would use.
func executeRoot(t *testing.T, args ...string) (stdout, stderr string, code int, err error) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), exitCode(err), err
}

// TestRulesFileConvention: every command that reads a rules file takes it
// the same way, as --rules FILE or as its argument, with the same output;
// giving two is a usage error, and so are unknown flags and missing files,
// all with exit code 2.
func TestRulesFileConvention(t *testing.T) {
	pools := filepath.Join("..", "..", "rules", "testdata", "pools.yaml")
	commands := [][]string{
		{"rules", "check"},
		{"rules", "explain", "--fake-node", "dgx-h100"},
		{"dra", "classes"},
		{"discover", "--fake-node", "dgx-h100", "-o", "labels"},
	}
	for _, c := range commands {
		name := strings.Join(c[:2], " ")
		t.Run(name, func(t *testing.T) {
			byFlag, _, code, err := executeRoot(t, append(append([]string{}, c...), "--rules", pools)...)
			if code != 0 {
				t.Fatalf("--rules: exit %d: %v", code, err)
			}
			byArg, _, code, err := executeRoot(t, append(append([]string{}, c...), pools)...)
			if code != 0 || byArg != byFlag {
				t.Errorf("the argument gives exit %d (%v) and other output than --rules:\n%s\n---\n%s", code, err, byArg, byFlag)
			}
			for _, bad := range []struct {
				args []string
				want string
			}{
				{[]string{"--no-such-flag"}, "unknown flag: --no-such-flag"},
				{[]string{"--rules", "no-such-file.yaml"}, "no-such-file.yaml"},
				{[]string{"no-such-file.yaml"}, "no-such-file.yaml"},
				{[]string{"--rules", "mixd"}, `did you mean "mixed"?`},
			} {
				_, errOut, code, err := executeRoot(t, append(append([]string{}, c...), bad.args...)...)
				if code != exitUsage || !strings.Contains(errOut+errorString(err), bad.want) {
					t.Errorf("%v: exit %d, %v; want exit %d and a message with %q\n%s", bad.args, code, err, exitUsage, bad.want, errOut)
				}
			}
			if c[1] != "check" {
				_, _, code, err := executeRoot(t, append(append([]string{}, c...), "--rules", "mixed", pools)...)
				if code != exitUsage || !strings.Contains(err.Error(), "two rules files: --rules mixed and the argument") {
					t.Errorf("two rules files: exit %d, %v", code, err)
				}
			}
		})
	}
	// Other usage errors exit 2 too: a bad output format, too many
	// arguments, an unknown command.
	for _, args := range [][]string{
		{"rules", "explain", "--fake-node", "workstation", "-o", "xml"},
		{"discover", "--fake-node", "workstation", "a", "b"},
		{"version", "extra"},
		{"rules", "frobnicate"},
		{"run", "--rules", "/no/such/rules.yaml"},
	} {
		if _, _, code, err := executeRoot(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d (%v), want %d", args, code, err, exitUsage)
		}
	}
}

// errorString is err's message, or "" for nil.
func errorString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestRulesCheckStrict: a rule that can never match (a misspelt attribute)
// passes a plain check with a warning that suggests the attribute meant,
// and fails under --strict.
func TestRulesCheckStrict(t *testing.T) {
	file := filepath.Join(t.TempDir(), "typo.yaml")
	writeFile(t, file, `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: a100
  devices: gpu
  matchFeatures:
  - feature: nvidia.gpu
    matchExpressions:
      productName: {op: InRegexp, value: ["A100"]}
  resource: example.com/a100
`)
	out, errOut, code, _ := executeRoot(t, "rules", "check", file)
	if code != 0 || !strings.Contains(out, "ok, 1 warning") || !strings.Contains(errOut, `never publishes "productName" in nvidia.gpu, so the expression never matches; did you mean "product"?`) {
		t.Errorf("check: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code, err := executeRoot(t, "rules", "check", "--strict", file)
	if code != 1 || !strings.Contains(out, "fails under --strict") || !strings.Contains(err.Error(), "1 of 1 files have warnings") {
		t.Errorf("check --strict: exit %d, %v\n%s", code, err, out)
	}
	if _, _, code, err := executeRoot(t, "rules", "check", "--strict", "mixed"); code != 0 {
		t.Errorf("check --strict of a clean builtin: exit %d, %v", code, err)
	}
}

// TestRunRefusesMissingRulesFile: a --rules file missing at start is an
// error naming --wait-for-rules, and with that flag the agent starts,
// serves nothing, and applies the file once it appears.
func TestRunRefusesMissingRulesFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "rules.yaml")
	_, _, code, err := executeRoot(t, "run", "--fake-node", "workstation", "--rules", missing, "--publish", "none")
	if code != exitUsage || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "--wait-for-rules") {
		t.Fatalf("run with a missing rules file: exit %d, %v", code, err)
	}

	dir := kubeletsim.ShortTempDir(t)
	k := startKubelet(t, dir)
	startAgent(t, "--fake-node", "workstation", "--publish", "none", "--kubelet-dir", dir, "--rules", missing,
		"--wait-for-rules", "--file-check-interval", "50ms")
	writeFile(t, missing, "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n- name: l4\n  devices: gpu\n  resource: example.com/l4\n")
	eventually(t, "the rules file that appeared is served", func() bool {
		total, _ := k.Capacity("example.com/l4")
		return total == 1
	})
	if _, err := os.Stat(missing); err != nil {
		t.Fatal(err)
	}
}
