package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/rules"
)

// TestNodeWithoutMPSControl: a node whose agent says it cannot find the
// MPS control program gets, before any MPS rule reaches it, a warning from
// rules check --node and the reason in rules explain --node; a node whose
// agent finds it gets neither.
func TestNodeWithoutMPSControl(t *testing.T) {
	r := &clusterFakeReader{}
	inv := explainTestInventory(t, "dgx-h100")
	r.add(t, "without", inv, nil, "")
	r.add(t, "with", inv, nil, "")
	r.features[0].Annotations = map[string]string{labeler.AnnotationMPSControl: "nvidia-cuda-mps-control not found in PATH"}
	r.features[1].Annotations = map[string]string{labeler.AnnotationMPSControl: labeler.MPSControlFound}
	file := filepath.Join(t.TempDir(), "mps.yaml")
	writeFile(t, file, mpsRules)
	rs, err := rules.Load(file)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		node string
		warn bool
	}{{"without", true}, {"with", false}} {
		target, err := readCheckTarget(context.Background(), r, &clusterFlags{namespace: defaultRulesNamespace}, tc.node)
		if err != nil {
			t.Fatal(err)
		}
		p, err := rs.CheckOn(target.name, target.inv, target.labels)
		if err != nil {
			t.Fatal(err)
		}
		warnings := target.warnings(p)
		got := strings.Join(warnings, "\n")
		want := "on node without: example.com/gpu.mps: not advertised until its MPS control daemon is up: the node's agent cannot start MPS control daemons: nvidia-cuda-mps-control not found in PATH"
		if tc.warn != strings.Contains(got, want) || !tc.warn && got != "" {
			t.Errorf("check --node %s: warnings %q", tc.node, warnings)
		}

		var out, errOut bytes.Buffer
		if err := explainNode(context.Background(), &out, &errOut, r, &clusterFlags{namespace: defaultRulesNamespace}, tc.node, file, "table"); err != nil {
			t.Fatal(err)
		}
		if tc.warn != strings.Contains(out.String(), "example.com/gpu.mps: not advertised until its MPS control daemon is up") {
			t.Errorf("explain --node %s:\n%s", tc.node, out.String())
		}
		if strings.Contains(errOut.String(), "cannot be known from the cluster") {
			t.Errorf("explain --node %s says it cannot know, though the agent said:\n%s", tc.node, errOut.String())
		}
	}
}

// TestOneWarningPerCause: single on a node with MIG and whole GPUs leaves
// out every MIG device for one reason, said once with the count.
func TestOneWarningPerCause(t *testing.T) {
	_, errOut, code, err := executeRoot(t, "rules", "explain", "--rules", "single", "--fake-node", "dgx-a100")
	if code != 0 {
		t.Fatalf("explain: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if strings.Count(errOut, "left out:") != 1 || !strings.Contains(lines[0], "warning: left out: 20 devices (GPU 0 MIG 0 (3g.20gb), ") ||
		!strings.Contains(lines[0], "and 16 more): MIG strategy single refuses this node") {
		t.Errorf("stderr:\n%s", errOut)
	}
}

// TestClusterCommandsWithoutKubeconfig: without a kubeconfig, explain
// --node and check --node say so in their words (not client-go's
// KUBERNETES_MASTER hint) and exit 3.
func TestClusterCommandsWithoutKubeconfig(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for _, args := range [][]string{
		{"rules", "explain", "--node", "gpu-node-7"},
		{"rules", "check", "mixed", "--node", "gpu-node-7"},
	} {
		_, _, code, err := executeRoot(t, args...)
		if code != exitCluster || err == nil || strings.Contains(err.Error(), "KUBERNETES_MASTER") || !strings.Contains(err.Error(), "no kubeconfig") {
			t.Errorf("%v: exit %d, %v", args, code, err)
		}
	}
}
