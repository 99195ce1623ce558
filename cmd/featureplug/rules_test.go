package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// runRules runs `featureplug rules ARGS...` and returns its output.
func runRules(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runCommand(newRulesCommand(), args...)
}

// runCommand runs cmd with args in process and returns its output.
func runCommand(cmd *cobra.Command, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	cmd.SilenceUsage = true
	cmd.SilenceErrors = true
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// exitCode is the code main would exit with for err.
func exitCode(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	}
	return 1
}

func TestRulesCheck(t *testing.T) {
	pools := filepath.Join("..", "..", "rules", "testdata", "pools.yaml")
	bad := filepath.Join("..", "..", "rules", "testdata", "many-errors.yaml")
	warn := filepath.Join(t.TempDir(), "warn.yaml")
	if err := os.WriteFile(warn, []byte(`apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: fans
  devices: gpu
  matchFeatures: [{feature: nvidia.fan, matchExpressions: {speed: {op: Exists}}}]
  resource: example.com/gpu
`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		code       int
		wantOut    []string
		wantErrOut []string
	}{
		{"builtin and file", []string{"check", "mixed", pools}, 0,
			[]string{"mixed: ok, 3 rules (gpu, mig, vfio)", "pools.yaml: ok, 4 rules (inference-h100, big-mig, small-mig, rest)"}, nil},
		{"warnings", []string{"check", warn}, 0, []string{"warn.yaml: ok, 1 warning, 1 rule (fans)"},
			[]string{`warning: ` + warn + `:6: rules[0] "fans": matchFeatures[0].feature: featureplug never publishes this feature`}},
		{"every error", []string{"check", pools, bad}, 1, []string{"pools.yaml: ok"}, []string{
			"many-errors.yaml: invalid:",
			`many-errors.yaml:8: rules[0] "typo": sharing: unknown field "stratgy"`,
			`many-errors.yaml:15: rules[1] "bad-expression": matchFeatures[0].matchExpressions.memory: invalid expression`,
			`many-errors.yaml:19: rules[2] "bad-name": resource: "kubernetes.io/mig"`,
			`many-errors.yaml:21: rules[3] "typo": devices: must be "gpu", "mig" or "vfio" (have "everything")`,
			`many-errors.yaml:23: rules[3] "typo": sharing.replicas: must be at least 1 (have 0)`,
			`many-errors.yaml:20: rules[3] "typo": name: name already used by rules[0]`,
		}},
		{"missing file", []string{"check", "no-such-rules.yaml"}, 2, nil, []string{"no-such-rules.yaml"}},
		{"warnings under --strict", []string{"check", "--strict", warn}, 1, []string{"warn.yaml: fails under --strict: 1 warning, 1 rule (fans)"}, nil},
		{"--rules and arguments", []string{"check", "--rules", "mixed", pools}, 0, []string{"mixed: ok", "pools.yaml: ok"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, err := runRules(t, tt.args...)
			if got := exitCode(err); got != tt.code {
				t.Errorf("exit code %d (%v), want %d", got, err, tt.code)
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.wantErrOut {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr lacks %q:\n%s", w, errOut)
				}
			}
		})
	}
	if _, _, err := runRules(t, "check"); err == nil {
		t.Errorf("check without files succeeded")
	}
}

func TestRulesExplain(t *testing.T) {
	out, _, err := runRules(t, "explain", "--rules", "mixed", "--fake-node", "a100-80gb-mixed")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"Rules: builtin:mixed",
		"GPU 0 NVIDIA A100-SXM4-80GB  GPU-",
		"resource  none: MIG is enabled, so only its MIG devices can be claimed",
		"GPU 0 MIG 3 (1g.10gb+me)  MIG-",
		"resource  nvidia.com/mig-1g.10gb.me",
		"(1 rule for devices: gpu skipped)",
		"nvidia.com/gpu             1        none",
		"nvidia.com/mig-1g.10gb.me  0:3      none",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("explain output lacks %q:\n%s", w, out)
		}
	}

	// The default rules are none.
	out, _, err = runRules(t, "explain", "--fake-node", "a100-80gb-mixed")
	if err != nil || !strings.Contains(out, "Rules: builtin:none") || strings.Contains(out, "mig-") {
		t.Errorf("explain without --rules: %v\n%s", err, out)
	}
}

func TestRulesExplainJSONWithNodeLabels(t *testing.T) {
	pools := filepath.Join("..", "..", "rules", "testdata", "pools.yaml")
	for _, tt := range []struct {
		labels   []string
		resource string
	}{
		{[]string{"--node-labels", "pool=inference", "--node-labels", "zone=a"}, "example.com/h100-mps"},
		{nil, "nvidia.com/gpu"},
	} {
		args := append([]string{"explain", "--rules", pools, "--fake-node", "dgx-h100", "-o", "json"}, tt.labels...)
		out, _, err := runRules(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Rules     string `json:"rules"`
			Resources []struct {
				Name    string
				Devices []json.RawMessage
				Sharing struct{ Strategy string }
			}
			Decisions []struct{ Rule string }
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, out)
		}
		if doc.Rules != pools || len(doc.Resources) != 1 || doc.Resources[0].Name != tt.resource || len(doc.Resources[0].Devices) != 8 || len(doc.Decisions) != 8 {
			t.Errorf("labels %v: %+v", tt.labels, doc)
		}
	}
}

func TestRulesExplainFailures(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad output", []string{"explain", "--fake-node", "workstation", "-o", "xml"}, `--output: "xml"`},
		{"bad rules", []string{"explain", "--rules", filepath.Join("..", "..", "rules", "testdata", "many-errors.yaml"), "--fake-node", "workstation"}, `many-errors.yaml:8: rules[0] "typo"`},
		{"unknown fake node", []string{"explain", "--fake-node", "no-such-node"}, "no-such-node"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runRules(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestRulesExplainShowsProblems checks that a device whose rule gives an
// invalid name is shown as left out, with the problem, while the rest of
// the plan is explained, that explain then exits 1 with the message run
// refuses the plan with, and that check refuses the same file naming the
// device.
func TestRulesExplainShowsProblems(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mig.yaml")
	if err := os.WriteFile(file, []byte(`apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: mig
  devices: mig
  resource: 'nvidia.com/mig-{{ .profile }}'
- name: gpu
  devices: gpu
  resource: nvidia.com/gpu
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runRules(t, "explain", "--rules", file, "--fake-node", "a100-80gb-mixed")
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "run refuses this plan on this node:\n"+file+`:6: rules[0] "mig": resource: template gives`) {
		t.Fatalf("explain: %v, want exit 1 with run's refusal\n%s", err, errOut)
	}
	for _, w := range []string{
		"GPU 0 MIG 3 (1g.10gb+me)", "resource  none: left out because of its rule",
		`template gives "nvidia.com/mig-1g.10gb+me" for GPU 0 MIG 3 (1g.10gb+me)`,
		"1 device left out", "nvidia.com/mig-3g.40gb", "nvidia.com/gpu",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("explanation lacks %q:\n%s", w, out)
		}
	}
	if !strings.Contains(errOut, "warning: left out: GPU 0 MIG 3 (1g.10gb+me)") {
		t.Errorf("stderr lacks the left-out warning:\n%s", errOut)
	}
	out, _, err = runRules(t, "explain", "--rules", file, "--fake-node", "a100-80gb-mixed", "-o", "json")
	if exitCode(err) != 1 {
		t.Fatal(err)
	}
	var doc struct {
		Problems []struct{ Device, Rule, Resource, Message string }
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Problems) != 1 || doc.Problems[0].Rule != "mig" || doc.Problems[0].Resource != "nvidia.com/mig-1g.10gb+me" {
		t.Errorf("problems = %+v", doc.Problems)
	}

	_, errOut, err = runRules(t, "check", file)
	if exitCode(err) != 1 || !strings.Contains(errOut, `rules[0] "mig": resource: template gives "nvidia.com/mig-1g.10gb+me" on fake node a100-80gb-mixed, NVIDIA A100-SXM4-80GB MIG 1g.10gb+me`) {
		t.Errorf("check: %v\n%s", err, errOut)
	}
}

// TestUnknownCommands checks that an unknown subcommand at any level is an
// error naming it, with a non-zero exit.
func TestUnknownCommands(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rules", "frobnicate"}, `unknown command "frobnicate" for "featureplug rules" (commands: check, diff, explain, import)`},
		{[]string{"rules", "chek"}, `unknown command "chek" for "featureplug rules"; did you mean "check"?`},
		{[]string{"frobnicate"}, `unknown command "frobnicate" for "featureplug"`},
		{[]string{"version", "frobnicate"}, `unknown command "frobnicate" for "featureplug version"`},
	} {
		root := newRootCommand()
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetArgs(tc.args)
		err := root.Execute()
		if exitCode(err) == 0 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v (exit %d), want one containing %q", tc.args, err, exitCode(err), tc.want)
		}
	}
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"rules"})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "check") {
		t.Errorf("featureplug rules: %v, want help:\n%s", err, out.String())
	}
}

// TestNodeLabelsFlag checks that explain takes --node-labels, and the old
// --node-label still works with a deprecation note.
func TestNodeLabelsFlag(t *testing.T) {
	pools := filepath.Join("..", "..", "rules", "testdata", "pools.yaml")
	for _, tc := range []struct {
		flag       string
		deprecated bool
	}{{"--node-labels", false}, {"--node-label", true}} {
		out, errOut, err := runRules(t, "explain", "--rules", pools, "--fake-node", "dgx-h100", tc.flag, "pool=inference", "-o", "json")
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.flag, err, errOut)
		}
		if !strings.Contains(out, `"name": "example.com/h100-mps"`) {
			t.Errorf("%s: the label did not reach the rules:\n%s", tc.flag, out)
		}
		if got := strings.Contains(errOut, "flag --node-label is deprecated, use --node-labels"); got != tc.deprecated {
			t.Errorf("%s: deprecation note %v, want %v:\n%s", tc.flag, got, tc.deprecated, errOut)
		}
	}
	// Both spellings together combine.
	run := newRunCommand()
	addDeprecatedAlias(run, "node-label", "node-labels")
	var errOut bytes.Buffer
	run.SetErr(&errOut)
	if err := run.ParseFlags([]string{"--node-labels", "a=1", "--node-label", "b=2"}); err != nil {
		t.Fatal(err)
	}
	if v := run.Flags().Lookup("node-labels").Value.String(); !strings.Contains(v, "a=1") || !strings.Contains(v, "b=2") {
		t.Errorf("run --node-labels a=1 --node-label b=2: %s", v)
	}
	if !strings.Contains(errOut.String(), "deprecated") {
		t.Errorf("run --node-label printed no deprecation note")
	}
}
