package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRulesImport(t *testing.T) {
	testdata := filepath.Join("..", "..", "rules", "nvidiaconfig", "testdata")
	dir := t.TempDir()
	badCfg := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badCfg, []byte("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: -2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := filepath.Join(dir, "a.yaml")
	b := filepath.Join(dir, "b.yaml")
	for path, replicas := range map[string]string{a: "2", b: "8"} {
		if err := os.WriteFile(path, []byte("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: "+replicas+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "rules.yaml")
	tests := []struct {
		name       string
		args       []string
		code       int
		wantOut    []string
		wantErrOut []string
	}{
		{"configmap", []string{"import", "--default-config", "b", filepath.Join(testdata, "configmap.yaml")}, 0,
			[]string{"kind: ResourceRules", "- name: a-gpu", "operator: In, values: [a]", "- name: b-gpu", "operator: NotIn, values: [a]", "replicas: 4", "replicas: 2"}, nil},
		{"warnings", []string{"import", filepath.Join(testdata, "rename.yaml")}, 0,
			[]string{"resource: nvidia.com/gpu\n"},
			[]string{"warning: " + filepath.Join(testdata, "rename.yaml") + ": sharing.timeSlicing.resources[0].rename: ignored, as NVIDIA's plugin ignores it"}},
		{"files named after configs", []string{"import", a, b, "--default-config", "a", "-o", out}, 0,
			nil, []string{out + ": 2 rules (a-gpu, b-gpu)"}},
		{"bad config", []string{"import", badCfg}, 1, nil, nil},
		{"unknown default", []string{"import", "--default-config", "c", filepath.Join(testdata, "configmap.yaml")}, 1, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := runRules(t, tt.args...)
			if code := exitCode(err); code != tt.code {
				t.Fatalf("exit code %d (%v), want %d\nstdout:\n%s\nstderr:\n%s", code, err, tt.code, stdout, stderr)
			}
			for _, want := range tt.wantOut {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
			for _, want := range tt.wantErrOut {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
		})
	}
	// The error names the file, the field and the value.
	_, _, err := runRules(t, "import", badCfg)
	if want := badCfg + ": sharing.timeSlicing.resources[0].replicas: must be at least 1 (have -2)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want it to contain %q", err, want)
	}
	_, _, err = runRules(t, "import", "--default-config", "c", filepath.Join(testdata, "configmap.yaml"))
	if want := `default config "c" is not among the configs (a, b)`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want it to contain %q", err, want)
	}
	// The file written loads, and gives each node its config.
	stdout, _, err := runRules(t, "explain", "--rules", out, "--fake-node", "l40s-pcie", "--node-labels", "nvidia.com/device-plugin.config=b", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, `"replicas": 8`) {
		t.Errorf("explain on a node labelled b lacks replicas 8:\n%s", stdout)
	}
	// rules check takes an NVIDIA config as it is.
	if _, stderr, err := runRules(t, "check", filepath.Join(testdata, "rename.yaml")); err != nil || !strings.Contains(stderr, "warning: ") {
		t.Errorf("rules check on an NVIDIA config: %v\n%s", err, stderr)
	}
}
