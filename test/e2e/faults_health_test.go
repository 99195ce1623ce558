package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/featureplug/featureplug/test/harness"
)

// fault posts a fault hook of the agent's fake node (/fake/reset?gpu=2, ...)
// with body.
func (a *agent) fault(t *testing.T, path, body string) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Post(a.base+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusNoContent {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: %s: %s", path, resp.Status, b)
	}
}

// waitHealth waits until GPU gpu's device has health want.
func (e *pluginFaultEnv) waitHealth(gpu int, want, why string) {
	e.t.Helper()
	if err := e.kubelet.WaitFor(e.ctx(), pluginFaultResource, func(devs []*pluginapi.Device) bool {
		for _, d := range devs {
			if d.GetID() == e.gpus[gpu] {
				return d.GetHealth() == want
			}
		}
		return false
	}); err != nil {
		e.t.Fatalf("GPU %d not %s %s: %v (health %v)", gpu, want, why, err, e.health())
	}
}

// holdsHealth checks that GPU gpu's device stays want for d.
func (e *pluginFaultEnv) holdsHealth(gpu int, want string, d time.Duration, why string) {
	e.t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if got := e.health()[e.gpus[gpu]]; got != want {
			e.t.Fatalf("GPU %d turned %s %s, want it %s", gpu, got, why, want)
		}
	}
}

// TestFault28HealthPolicyClasses plays one event of each resolution class
// of NVIDIA's XID catalog on the dgx-h100 fake node, with a quiet period of
// 1 s and NVML's evidence read every 1 s, so that only what the catalog
// names can end a hold: XID 94 (restart the application) is counted and
// the GPU stays Healthy; XID 109 (reset the GPU) with the driver asking
// for a reset stays Unhealthy past many quiet periods until the fake node
// reports the reset; XID 79 (restart the node) stays Unhealthy through a
// reset.
func TestFault28HealthPolicyClasses(t *testing.T) {
	e := pluginFaultStart(t, "", "--health-recovery", "1s", "--health-evidence-interval", "1s")

	e.agent.injectXID(t, 1, 94)
	e.agent.waitMetric(t, "featureplug_plugin_health_events_total", func(v float64) bool { return v == 1 }, `xid="94"`, `effect="count"`)
	e.holdsHealth(1, pluginapi.Healthy, 2*time.Second, "after XID 94")

	e.agent.fault(t, "/fake/recovery-action?gpu=3&action=gpu-reset", "")
	e.agent.injectXID(t, 3, 109)
	e.waitHealth(3, pluginapi.Unhealthy, "after XID 109")
	e.agent.injectXID(t, 4, 79)
	e.waitHealth(4, pluginapi.Unhealthy, "after XID 79")
	e.holdsHealth(3, pluginapi.Unhealthy, 4*time.Second, "without a reset (4 quiet periods)")

	e.agent.fault(t, "/fake/reset?gpu=3", "")
	e.agent.fault(t, "/fake/reset?gpu=4", "")
	e.waitHealth(3, pluginapi.Healthy, "once NVML shows the reset")
	e.holdsHealth(4, pluginapi.Unhealthy, 3*time.Second, "after a reset: XID 79 waits for a reboot")
	if v := e.agent.metric(t, "featureplug_plugin_devices", `health="unhealthy"`); v != 1 {
		t.Errorf("featureplug_plugin_devices{health=unhealthy} = %v, want 1 (GPU 4)", v)
	}
}

// l40sHealthNode is a fake node of two L40S (page retirement), GPU 0 with
// the failure evidence evidence (a gpus[].health value, "" for none).
func l40sHealthNode(evidence string) []byte {
	health := ""
	if evidence != "" {
		health = "\n    health: " + evidence
	}
	return fmt.Appendf(nil, `name: l40s-health
driverVersion: "570.86.15"
cudaVersion: "12.8"
gpus:
  - product: L40S
    numa: 0%s
  - product: L40S
    numa: 0
`, health)
}

// TestFault28ResetHoldSurvivesRestart: XID 48 on an L40S, then pages
// retired and pending (the fake node file edited, as NVML would report
// after the driver retired them): the GPU stays Unhealthy past the quiet
// period, is Unhealthy from the first device list of an agent restarted
// with SIGKILL, and is Healthy once the evidence is gone (the GPU reset).
func TestFault28ResetHoldSurvivesRestart(t *testing.T) {
	file := filepath.Join(shortTempDir(t), "node.yaml")
	writeFileAtomic(t, file, l40sHealthNode(""))
	state := filepath.Join(shortTempDir(t), "state")
	e := pluginFaultStartOn(t, agentSpec{FakeNode: file, Rules: "single",
		Extra: []string{"--state-dir", state, "--health-recovery", "1s", "--health-evidence-interval", "1s"}})

	e.agent.injectXID(t, 0, 48)
	e.waitHealth(0, pluginapi.Unhealthy, "after XID 48")
	writeFileAtomic(t, file, l40sHealthNode("{retiredPagesPending: true}"))
	if err := e.agent.Signal(syscall.SIGHUP); err != nil { // re-discover now
		t.Fatal(err)
	}
	e.agent.waitMetric(t, "featureplug_plugin_health_events_total", func(v float64) bool { return v >= 1 }, `kind="retired-pages-pending"`, `effect="until-reset"`)
	e.holdsHealth(0, pluginapi.Unhealthy, 3*time.Second, "with retired pages pending (3 quiet periods)")

	e.killAndCheckFirstList(t, 0)
	e.holdsHealth(0, pluginapi.Unhealthy, 3*time.Second, "after the restart, retired pages still pending")

	writeFileAtomic(t, file, l40sHealthNode(""))
	if err := e.agent.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	e.waitHealth(0, pluginapi.Healthy, "once the GPU was reset (no page pending)")
	b, err := os.ReadFile(filepath.Join(state, "health.json"))
	if err != nil || strings.Contains(string(b), e.gpus[0]) {
		t.Errorf("state file after the reset: %s, %v; want GPU 0 gone", b, err)
	}
}

// TestFault28PolicyPerNodePool: the same rules file on two nodes, one in
// the inference pool, whose health entry makes XID 94 hold the GPU for the
// quiet period: there XID 94 takes the GPU out; on the other node it is
// counted and the GPU serves on.
func TestFault28PolicyPerNodePool(t *testing.T) {
	rules := filepath.Join(build.root, "manifests/examples/rules/health-pools.yaml")
	inference := pluginFaultStartOn(t, agentSpec{Node: "pool-inference", FakeNode: "dgx-h100", Rules: rules,
		Extra: []string{"--node-labels", "example.com/pool=inference"}})
	other := pluginFaultStartOn(t, agentSpec{Node: "pool-other", FakeNode: "dgx-h100", Rules: rules})

	inference.agent.injectXID(t, 2, 94)
	other.agent.injectXID(t, 2, 94)
	inference.waitHealth(2, pluginapi.Unhealthy, "in the inference pool after XID 94")
	other.agent.waitMetric(t, "featureplug_plugin_health_events_total", func(v float64) bool { return v == 1 }, `xid="94"`, `effect="count"`)
	other.holdsHealth(2, pluginapi.Healthy, 2*time.Second, "outside the pool after XID 94")
	if v := inference.agent.metric(t, "featureplug_plugin_health_events_total", `xid="94"`, `effect="until-quiet"`); v != 1 {
		t.Errorf("inference pool: health_events_total{xid=94,effect=until-quiet} = %v, want 1", v)
	}
}

// TestFault29NVMLFailsMidRun: every NVML call of the fake node's library
// answers ERROR_UNKNOWN (a driver unloaded or hung) while the agent serves
// the kubelet's own device manager: allocatable drops to 0 at the next
// re-discovery (--rediscover-interval 1s here, 30s by default), /readyz
// says why, a Warning Event NVMLUnavailable is on the Node and the
// NodeFeature carries featureplug.io/nvml-unavailable=true. When NVML
// answers again every device is allocatable again, with the same IDs, and
// the label is gone.
func TestFault29NVMLFailsMidRun(t *testing.T) {
	api := harness.StartAPIServer(t)
	c := &cluster{api: api}
	node := c.node(t, "fault27", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*waitTimeout)
	defer cancel()
	if err := api.CreateNamespace(ctx, agentNamespace); err != nil {
		t.Fatal(err)
	}
	e := agentFaultStart(t, agentSpec{Node: node, Rules: "single", Publish: "nodefeature",
		Kubeconfig: api.KubeconfigPath, Namespace: agentNamespace, Extra: []string{"--rediscover-interval", "1s"}})
	e.serves(t, map[string]int64{pluginFaultResource: 8})
	ids := slices.Sorted(maps.Keys(e.peer.Devices(pluginFaultResource)))
	label := func() (string, bool) {
		nf, err := api.NFD.NfdV1alpha1().NodeFeatures(agentNamespace).Get(ctx, nodeFeatureName(node), metav1.GetOptions{})
		if err != nil {
			return "", false
		}
		v, ok := nf.Spec.Labels["featureplug.io/nvml-unavailable"]
		return v, ok
	}

	failed := time.Now()
	e.a.fault(t, "/fake/nvml?fail=unknown", "")
	if err := e.peer.WaitCapacity(ctx, pluginFaultResource, 8, 0); err != nil {
		t.Fatalf("NVML failing: %v", err)
	}
	t.Logf("allocatable 0 %s after NVML began failing", time.Since(failed).Round(time.Millisecond))
	if code, body, err := e.a.get("/readyz"); err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "NVML fails") {
		t.Errorf("/readyz while NVML fails: %d %q %v; want 503 saying NVML fails", code, body, err)
	}
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": node, "reason": "NVMLUnavailable", "type": "Warning"}.String()
	if err := waitFor(ctx, func() (bool, string) {
		evs, err := api.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return false, err.Error()
		}
		for _, ev := range evs.Items {
			if strings.Contains(ev.Message, "ERROR_UNKNOWN") && strings.Contains(ev.Message, "8 GPUs") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d Events match %s", len(evs.Items), sel)
	}); err != nil {
		t.Errorf("Warning Event NVMLUnavailable naming the error and the GPUs: %v", err)
	}
	if err := waitFor(ctx, func() (bool, string) {
		v, ok := label()
		return ok && v == "true", fmt.Sprintf("label %q present %v", v, ok)
	}); err != nil {
		t.Errorf("NodeFeature label featureplug.io/nvml-unavailable: %v", err)
	}
	if v := e.a.metric(t, "featureplug_nvml_available"); v != 0 {
		t.Errorf("featureplug_nvml_available = %v while NVML fails", v)
	}

	e.a.fault(t, "/fake/nvml", "")
	if err := e.peer.WaitCapacity(ctx, pluginFaultResource, 8, 8); err != nil {
		t.Fatalf("NVML answering again: %v", err)
	}
	if got := slices.Sorted(maps.Keys(e.peer.Devices(pluginFaultResource))); !slices.Equal(got, ids) {
		t.Errorf("device IDs after NVML answered again: %v, want %v", got, ids)
	}
	if err := waitFor(ctx, func() (bool, string) {
		_, ok := label()
		return !ok, "label still present"
	}); err != nil {
		t.Errorf("NodeFeature label featureplug.io/nvml-unavailable: %v", err)
	}
	if code, body, err := e.a.get("/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("/readyz once NVML answers: %d %q %v", code, body, err)
	}
}
