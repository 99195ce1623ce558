package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// execute runs the featureplug command line in-process.
func execute(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestDiscoverOutputs(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"discover", "--fake-node", "dgx-a100"}, []string{"8 GPUs, 16 MIG devices", "NVIDIA A100-SXM4-40GB", "3g.20gb (GI 1, CI 0)", "NV12", "nvidia.capabilities: mig, mig.enabled, mps, nvlink"}},
		{[]string{"discover", "--fake-node", "h200-mig", "-o", "yaml"}, []string{"profile: 1g.18gb", "nvidia.mig:", "cudaDriverVersion: \"12.8\""}},
		{[]string{"discover", "--fake-node", "dgx-h100", "-o", "labels", "--rules", "per-model"}, []string{"nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3\n", "nvidia.com/h100.shared.replicas=4\n"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, err := execute(t, tt.args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, want := range tt.want {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

func TestDiscoverJSONRoundTrips(t *testing.T) {
	out, err := execute(t, "discover", "--fake-node", "dgx-h100", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var doc discoverOutput
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("-o json is not JSON: %v", err)
	}
	if len(doc.Inventory.GPUs) != 8 || len(doc.Features.Instances["nvidia.gpu"].Elements) != 8 {
		t.Errorf("decoded %d GPUs, %d gpu instances", len(doc.Inventory.GPUs), len(doc.Features.Instances["nvidia.gpu"].Elements))
	}
}

func TestDiscoverBadInput(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: bad\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n  - product: A100-SXM4-40GB\n    mig:\n      - profile: 9g.99gb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"discover", "--fake-node", bad}, []string{bad, "gpus[0].mig[0].profile", "9g.99gb"}},
		{[]string{"discover", "--fake-node", "dgx-a100", "-o", "xml"}, []string{"--output", "xml"}},
		{[]string{"discover", "--fake-node", "no-such-node"}, []string{"no-such-node"}},
	}
	for _, tt := range tests {
		out, err := execute(t, tt.args...)
		if err == nil {
			t.Errorf("%v: no error; output:\n%s", tt.args, out)
			continue
		}
		for _, want := range tt.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%v: error %q does not name %q", tt.args, err, want)
			}
		}
		if strings.Contains(out, "GPU") {
			t.Errorf("%v printed output as if it had worked:\n%s", tt.args, out)
		}
	}
}

func TestRulesExplainShowsMissingMPSControl(t *testing.T) {
	rulesFile := filepath.Join(t.TempDir(), "mps.yaml")
	if err := os.WriteFile(rulesFile, []byte(mpsRules), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := execute(t, "rules", "explain", "--rules", rulesFile, "--fake-node", "dgx-h100", "--mps-control", "/nonexistent/nvidia-cuda-mps-control")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "example.com/gpu.mps: not advertised until its MPS control daemon is up") {
		t.Errorf("explain does not say the MPS resource is held back:\n%s", out)
	}
	control, _ := filepath.Abs("../../plugin/mps/testdata/nvidia-cuda-mps-control")
	out, err = execute(t, "rules", "explain", "--rules", rulesFile, "--fake-node", "dgx-h100", "--mps-control", control)
	if err != nil || strings.Contains(out, "not advertised") {
		t.Errorf("explain with the control program present: %v\n%s", err, out)
	}
}
