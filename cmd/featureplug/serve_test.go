package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRulesCheckReportsServe: `rules check` accepts rules that choose the
// kubelet API with serve, says which do, accepts serve: dra with MPS, and
// refuses an unknown serve naming the rule, field and value.
func TestRulesCheckReportsServe(t *testing.T) {
	const header = "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n"
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte(header+`- name: a100-dra
  devices: gpu
  nodeSelector: {matchLabels: {featureplug.io/serve: dra}}
  resource: example.com/a100
  serve: dra
- name: a100
  devices: gpu
  nodeSelector: {matchExpressions: [{key: featureplug.io/serve, operator: NotIn, values: [dra]}]}
  resource: example.com/a100
  serve: device-plugin
- name: mig
  devices: mig
  resource: example.com/mig
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(header+"- name: h100\n  devices: gpu\n  resource: example.com/h100\n  serve: DRA\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mps := filepath.Join(dir, "mps.yaml")
	if err := os.WriteFile(mps, []byte(header+"- name: h100-mps\n  devices: gpu\n  resource: example.com/h100\n  serve: dra\n"+
		"  sharing: {strategy: mps, replicas: 2}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runRules(t, "check", good)
	if err != nil {
		t.Fatalf("check: %v\n%s", err, errOut)
	}
	want := good + ": ok, 3 rules (a100-dra, a100, mig)\n  serve: dra: a100-dra; device-plugin: a100; the agent's --serve: mig\n"
	if out != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out, want)
	}
	if errOut != "" {
		t.Errorf("stderr (warnings) %q, want none: the node selectors are exclusive", errOut)
	}

	out, errOut, err = runRules(t, "check", mps)
	if err != nil {
		t.Errorf("check of serve: dra with mps: %v\n%s", err, errOut)
	}
	if w := "serve: dra: h100-mps"; !strings.Contains(out, w) {
		t.Errorf("check of serve: dra with mps: stdout lacks %q:\n%s", w, out)
	}

	_, errOut, err = runRules(t, "check", bad)
	if exitCode(err) != 1 {
		t.Errorf("check of serve: DRA: exit code %d (%v), want 1", exitCode(err), err)
	}
	if w := bad + `:7: rules[0] "h100": serve: must be "device-plugin" or "dra"`; !strings.Contains(errOut, w) {
		t.Errorf("stderr lacks %q:\n%s", w, errOut)
	}
}

// TestRunRejectsBadServe: --serve (and FEATUREPLUG_SERVE) takes
// device-plugin or dra; anything else stops run at start, naming the flag.
func TestRunRejectsBadServe(t *testing.T) {
	t.Setenv("FEATUREPLUG_STATE_DIR", t.TempDir())
	_, err := execute(t, "run", "--fake-node", "dgx-h100", "--publish", "none", "--metrics-addr", "", "--serve", "both")
	if want := `--serve: "both" is not a kubelet API (use device-plugin or dra)`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("--serve both: error %v, want one containing %q", err, want)
	}
	t.Setenv("FEATUREPLUG_SERVE", "DRA")
	_, err = execute(t, "run", "--fake-node", "dgx-h100", "--publish", "none", "--metrics-addr", "")
	if want := `--serve: "DRA" is not a kubelet API`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("FEATUREPLUG_SERVE=DRA: error %v, want one containing %q", err, want)
	}
}
