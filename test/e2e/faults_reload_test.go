package e2e

// Fault tests of rules reloads that would take resources away: rules that
// serve nothing on the node, and an MPS rule on a node that cannot run the
// MPS control daemon.

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFault23ReloadThatDrainsRefused: a hot reload of rules that serve no
// resource on this node (none of their rules match it, or none are left:
// what a truncated ConfigMap looks like) is refused, and the last good
// plan keeps serving.
func TestFault23ReloadThatDrainsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	path := filepath.Join(shortTempDir(t), "rules.yaml")
	writeFileAtomic(t, path, []byte(agentFaultRules("example.com/a")))
	e := agentFaultStart(t, agentSpec{Node: "fault-drain", Rules: path})
	e.serves(t, map[string]int64{"example.com/a": 8})
	matchesNothing := agentFaultRules("example.com/a") + `  matchFeatures:
  - feature: nvidia.gpu
    matchExpressions:
      product: {op: In, value: ["no such GPU"]}
`
	for i, content := range []string{matchesNothing, "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules: []\n"} {
		refused := e.a.metric(t, "featureplug_rule_reloads_total", `result="refused"`) + e.a.metric(t, "featureplug_rule_reloads_total", `result="invalid"`)
		writeFileAtomic(t, path, []byte(content))
		deadline := time.Now().Add(waitTimeout)
		for e.a.metric(t, "featureplug_rule_reloads_total", `result="refused"`)+e.a.metric(t, "featureplug_rule_reloads_total", `result="invalid"`) <= refused {
			if time.Now().After(deadline) {
				t.Fatalf("file %d: the reload was neither refused nor found invalid", i)
			}
			time.Sleep(20 * time.Millisecond)
		}
		e.checkServes(t, "after a reload that would serve nothing", map[string]int64{"example.com/a": 8})
	}
	// A file whose rules match nothing here is valid (rules check passes it
	// without a node): the agent refuses it; an empty rules list is an
	// error at load.
	if n := e.a.metric(t, "featureplug_rule_reloads_total", `result="refused"`); n != 1 {
		t.Errorf("featureplug_rule_reloads_total{result=\"refused\"} = %v, want 1 (the file that matches nothing)", n)
	}
	if lines := agentFaultLogLines(t, e.a, "would serve no resource on this node"); len(lines) == 0 {
		t.Error("no log line says why rules that serve nothing were refused")
	}
	if n := e.a.metric(t, "featureplug_plugin_devices", `resource="example.com/a"`); n != 8 {
		t.Errorf("featureplug_plugin_devices{example.com/a} = %v, want 8", n)
	}
}

// TestFault24MPSWithoutControlBinary: a hot reload that shares GPUs 0-3
// with MPS on a node without nvidia-cuda-mps-control holds that resource
// back alone: the resource beside it keeps serving its GPUs, and the MPS
// resource is reported unavailable.
func TestFault24MPSWithoutControlBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	path := filepath.Join(shortTempDir(t), "rules.yaml")
	writeFileAtomic(t, path, []byte(agentFaultSplitRules("example.com/a", "example.com/b")))
	e := agentFaultStart(t, agentSpec{Node: "fault-mps", Rules: path,
		Extra: []string{"--mps-control", "/nonexistent/nvidia-cuda-mps-control", "--mps-root", filepath.Join(shortTempDir(t), "mps")}})
	e.serves(t, map[string]int64{"example.com/a": 4, "example.com/b": 4})

	mps := strings.Replace(agentFaultSplitRules("example.com/a-mps", "example.com/b"), "  resource: example.com/a-mps\n",
		"  resource: example.com/a-mps\n  sharing: {strategy: mps, replicas: 2}\n", 1)
	writeFileAtomic(t, path, []byte(mps))
	agentFaultWaitLog(t, e.a, "MPS resource held back until its control daemon is up", "resource=example.com/a-mps")
	e.a.waitMetric(t, "featureplug_mps_resource_unavailable", func(v float64) bool { return v == 1 }, `resource="example.com/a-mps"`)
	e.serves(t, map[string]int64{"example.com/b": 4})
	e.a.waitMetric(t, "featureplug_plugin_devices", func(v float64) bool { return v == 4 }, `resource="example.com/b"`)
	if n := e.a.metric(t, "featureplug_plugin_devices", `resource="example.com/a-mps"`); n != 0 {
		t.Errorf("featureplug_plugin_devices{example.com/a-mps} = %v without a control daemon, want 0", n)
	}
	for _, bad := range []string{"rules rejected", "a sink did not take the plan"} {
		if lines := agentFaultLogLines(t, e.a, bad); len(lines) > 0 {
			t.Errorf("log has %q: %s", bad, lines[0])
		}
	}
}
