package e2e

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/featureplug/featureplug/test/harness"
)

// TestDRARollingUpdate runs a DaemonSet update of featureplug on a node
// of the kubelet's DRA manager (its real plugin watcher), with the real
// kube-scheduler: the old agent (POD_UID pod-old) prepares a claim; the
// new agent (POD_UID pod-new) starts beside it on the same directories,
// registers its own sockets, and the old one stops, removing only its
// own; the kubelet then unprepares the claim through the new agent, which
// knows it from the shared checkpoint, and prepares a new claim through
// it.
func TestDRARollingUpdate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, kube-scheduler and featureplug")
	}
	api := harness.StartAPIServer(t)
	draE2EEnsureServiceAccount(t, api)
	n := draE2EStartNode(t, api, "dra-rolling", draE2ERules(""))
	spec := n.draE2EAgentSpec("dra", "")
	oldSpec, newSpec := spec, spec
	oldSpec.Env = []string{"POD_UID=pod-old"}
	newSpec.Env = []string{"POD_UID=pod-new"}
	old := startAgent(t, oldSpec)
	n.agent = old
	n.draE2EWaitRegistered(t)
	n.draE2EWaitSlice(t, map[string]int{draE2EA100: 3, draE2EOther: 2, draE2EMIG: 2})
	draE2ECreateAnyClass(t, api)
	harness.StartScheduler(t, api)
	ctx := t.Context()

	gpu := draE2EAttr("type") + ` == "gpu"`
	draE2ECreateClaim(t, api, draE2EClaim("before", gpu))
	before := draE2EWaitPod(t, api, "pod-before", "bound", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
	ids, err := n.kubelet.PreparePod(ctx, before)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids["main"]) != 1 || old.metric(t, "featureplug_dra_prepare_total", `result="prepared"`) != 1 {
		t.Fatalf("the old agent prepared CDI IDs %v", ids["main"])
	}

	// The new pod of the update starts beside the old one.
	newer := startAgent(t, newSpec)
	newer.waitMetric(t, "featureplug_dra_registered", func(v float64) bool { return v == 1 })
	sockets := func() (reg, dra []string) {
		t.Helper()
		for dir, out := range map[string]*[]string{n.regDir: &reg, n.pluginDir: &dra} {
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				*out = append(*out, e.Name())
			}
		}
		return reg, dra
	}
	reg, dra := sockets()
	t.Logf("while both run: registry %v, plugin directory %v", reg, dra)
	for _, want := range []string{draE2EDriver + "-pod-old-reg.sock", draE2EDriver + "-pod-new-reg.sock"} {
		if _, err := os.Stat(filepath.Join(n.regDir, want)); err != nil {
			t.Errorf("registration socket %s: %v", want, err)
		}
	}

	if err := old.Stop(); err != nil {
		t.Fatalf("stopping the old agent: %v", err)
	}
	reg, dra = sockets()
	t.Logf("after the old agent stopped: registry %v, plugin directory %v", reg, dra)
	for path, want := range map[string]bool{
		filepath.Join(n.regDir, draE2EDriver+"-pod-old-reg.sock"): false,
		filepath.Join(n.pluginDir, "dra-pod-old.sock"):            false,
		filepath.Join(n.regDir, draE2EDriver+"-pod-new-reg.sock"): true,
		filepath.Join(n.pluginDir, "dra-pod-new.sock"):            true,
	} {
		if _, err := os.Stat(path); (err == nil) != want {
			t.Errorf("%s: present %v, want %v", path, err == nil, want)
		}
	}

	// The kubelet unprepares the claim prepared before the update through
	// the new agent.
	if err := n.kubelet.UnpreparePod(ctx, before); err != nil {
		t.Fatalf("unprepare after the update: %v", err)
	}
	if v := newer.metric(t, "featureplug_dra_unprepare_total", `result="unprepared"`); v != 1 {
		t.Errorf("new agent: featureplug_dra_unprepare_total{result=unprepared} = %v, want 1 (the claim the old agent prepared)", v)
	}
	if v := newer.metric(t, "featureplug_dra_unprepare_total", `result="unknown"`); v != 0 {
		t.Errorf("new agent: featureplug_dra_unprepare_total{result=unknown} = %v, want 0", v)
	}
	draE2ECreateClaim(t, api, draE2EClaim("after", gpu))
	after := draE2EWaitPod(t, api, "pod-after", "bound", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
	if ids, err := n.kubelet.PreparePod(ctx, after); err != nil || len(ids["main"]) != 1 {
		t.Fatalf("prepare after the update: CDI IDs %v, err %v", ids["main"], err)
	}
	if v := newer.metric(t, "featureplug_dra_prepare_total", `result="prepared"`); v != 1 {
		t.Errorf("new agent: featureplug_dra_prepare_total{result=prepared} = %v, want 1", v)
	}
}
