package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestDemoRunsTheWholeChain(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the featureplug binary")
	}
	bin := filepath.Join(t.TempDir(), "featureplug")
	build := exec.Command("go", "build", "-o", bin, "../featureplug")
	build.Env = os.Environ()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building featureplug: %v\n%s", err, out)
	}
	var out bytes.Buffer
	if err := run(context.Background(), &out, bin, "dgx-a100"); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"NVIDIA A100-SXM4-40GB",                        // discovery
		"rules.yaml: ok",                               // rules check
		"example.com/a100-sxm4-40gb",                   // plan and resources
		"nvidia.com/mig-1g.5gb.shared  12       12",    // replicas registered, healthy
		"nvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB", // labels
		"env NVIDIA_VISIBLE_DEVICES=GPU-",              // allocation
		"the kubelet sees the GPU Unhealthy",           // health
		"Healthy again",                                // recovery
		"the agent stopped on SIGTERM",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("demo output:\n%s", out.String())
	}
}
