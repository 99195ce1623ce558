package agent

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/cmd/internal/kube/kubeclientset"
	"github.com/featureplug/featureplug/plugin/cdi"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
	"github.com/featureplug/featureplug/rules/plan"
)

// serveRules is a rules file for dgx-h100 (eight H100, GPU 0 to 7): GPUs
// 0-3 are example.com/a, served through aServe ("" leaves it to the
// agent's --serve), and GPUs 4-7 example.com/b, served by device plugin.
func serveRules(aServe plan.Serve) []byte {
	s := `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: a
  devices: gpu
  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {index: {op: In, value: ["0", "1", "2", "3"]}}}]
  resource: example.com/a
`
	if aServe != "" {
		s += "  serve: " + string(aServe) + "\n"
	}
	return []byte(s + `- name: b
  devices: gpu
  resource: example.com/b
  serve: device-plugin
`)
}

// serveWaitReady waits until the agent's device plugins are all
// registered with the kubelet (the agent is ready: every resource of the
// plan they serve has registered). Registration ends in the plugin's
// process after the kubelet's answer, so this polls.
func serveWaitReady(t *testing.T, a *Agent) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for !a.isReady() {
		if time.Now().After(deadline) {
			t.Fatal("the device plugins never became ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestServeSplitsResourcesByAPI: of a plan with one resource served
// through DRA and one by device plugin, only the latter registers with
// the kubelet; a rules reload moving the first to the device plugins
// registers it, and moving it back to DRA stops exactly its server while
// the other resource keeps its one registration and ListAndWatch stream,
// with no update but the health change the test plays last.
func TestServeSplitsResourcesByAPI(t *testing.T) {
	src := openFakeT(t, "dgx-h100")
	dir := kubeletsim.ShortTempDir(t)
	kubeletDir := filepath.Join(dir, "dp")
	if err := os.Mkdir(kubeletDir, 0o755); err != nil {
		t.Fatal(err)
	}
	kubelet := startKubeletT(t, kubeletDir)
	rulesPath := filepath.Join(dir, "rules.yaml")
	writeRules := func(aServe plan.Serve) {
		t.Helper()
		// Renamed into place, so that the agent never reads half a file.
		tmp := rulesPath + ".tmp"
		if err := os.WriteFile(tmp, serveRules(aServe), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, rulesPath); err != nil {
			t.Fatal(err)
		}
	}
	writeRules(plan.ServeDRA)
	records := make(kubeRecords, 4096)
	kube := kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "uid-1"}})
	a, err := New(agentconfig.Config{
		NodeName: "n", Source: src, Rules: rulesPath, RulesEngine: testRulesEngine(),
		Kube:               kubeclientset.New(kube, nil),
		Plugin:             deviceplugin.Options{KubeletDir: kubeletDir},
		CDI:                cdi.DriverConfig{SpecDir: filepath.Join(dir, "cdi"), DriverRoot: t.TempDir()},
		RediscoverInterval: time.Hour,
		FileSettle:         time.Millisecond,
		FileCheckInterval:  50 * time.Millisecond,
		Logger:             slog.New(records),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(runAgent(t, a), testWait)
	defer cancel()
	const resA, resB = "example.com/a", "example.com/b"
	fourHealthy := func(devs []*pluginapi.Device) bool {
		if len(devs) != 4 {
			return false
		}
		for _, d := range devs {
			if d.GetHealth() != pluginapi.Healthy {
				return false
			}
		}
		return true
	}

	// Start: a is served through DRA, b by its device plugin.
	kubeWaitRecord(t, records, "plan applied", "trigger=start")
	if err := kubelet.WaitFor(ctx, resB, fourHealthy); err != nil {
		t.Fatal(err)
	}
	serveWaitReady(t, a) // every device plugin of the plan has registered ...
	if got := kubelet.Resources(); !slices.Equal(got, []string{resB}) {
		t.Fatalf("kubelet registrations %v, want only %s (%s is served through DRA)", got, resB, resA)
	}
	updatesB := kubelet.Updates(resB)

	// Reload: a moves to the device plugins.
	writeRules("")
	if err := kubelet.WaitFor(ctx, resA, fourHealthy); err != nil {
		t.Fatal(err)
	}

	// Reload: a moves back to DRA; its server stops, its stream ends.
	writeRules(plan.ServeDRA)
	if err := kubelet.WaitUntil(ctx, func() bool { return !kubelet.Streaming(resA) }); err != nil {
		t.Fatalf("%s still streams after moving to DRA: %v", resA, err)
	}
	// Every sink took both reloads (the DRA sink included).
	kubeWaitRecord(t, records, "plan applied", "trigger=rules")
	kubeWaitRecord(t, records, "plan applied", "trigger=rules")

	// A health change on a GPU of b comes after every reload on b's
	// stream: had a reload restarted or updated b, it would show now.
	if err := src.InjectXID(5, 79); err != nil {
		t.Fatal(err)
	}
	uuid := a.current.Load().GPUs[5].UUID
	if err := kubelet.WaitFor(ctx, resB, func(devs []*pluginapi.Device) bool {
		return slices.ContainsFunc(devs, func(d *pluginapi.Device) bool { return d.GetID() == uuid && d.GetHealth() == pluginapi.Unhealthy })
	}); err != nil {
		t.Fatal(err)
	}
	if r, s, u := kubelet.Registrations(resB), kubelet.Streams(resB), kubelet.Updates(resB); r != 1 || s != 1 || u != updatesB+1 {
		t.Errorf("%s: %d registrations, %d streams, %d updates; want 1, 1 and %d (the health change only): "+
			"moving %s between APIs touched it", resB, r, s, u, updatesB+1, resA)
	}
	if !kubelet.Streaming(resB) {
		t.Errorf("%s's stream is closed", resB)
	}
	if got := kubelet.Registrations(resA); got != 1 {
		t.Errorf("%s registered %d times, want once (while the device plugins served it)", resA, got)
	}
}

// TestServeRefusesDRAItCannotServe: without an API server, rules that move
// a resource to DRA are refused as a whole (the rule error, naming the
// resource, rule and what is missing), before any sink takes them: the
// resource keeps its device plugin rather than being served by neither
// API.
func TestServeRefusesDRAItCannotServe(t *testing.T) {
	src := openFakeT(t, "dgx-h100")
	dir := kubeletsim.ShortTempDir(t)
	kubelet := startKubeletT(t, dir)
	rulesPath := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, serveRules(""), 0o644); err != nil {
		t.Fatal(err)
	}
	records := make(kubeRecords, 4096)
	a, err := New(agentconfig.Config{
		NodeName: "n", Source: src, Rules: rulesPath, RulesEngine: testRulesEngine(),
		Plugin:             deviceplugin.Options{KubeletDir: dir},
		CDI:                cdi.DriverConfig{SpecDir: filepath.Join(dir, "cdi"), DriverRoot: t.TempDir()},
		RediscoverInterval: time.Hour,
		FileSettle:         time.Millisecond,
		FileCheckInterval:  50 * time.Millisecond,
		Logger:             slog.New(records),
	})
	if err != nil {
		t.Fatal(err)
	}
	runAgent(t, a)
	kubeWaitRecord(t, records, "plan applied", "trigger=start", "example.com/a")
	serveWaitReady(t, a)
	tmp := rulesPath + ".tmp"
	if err := os.WriteFile(tmp, serveRules(plan.ServeDRA), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, rulesPath); err != nil {
		t.Fatal(err)
	}
	kubeWaitRecord(t, records, "rules rejected", "resource example.com/a (rule a) is served through DRA, which needs an API server")
	// The rejection is logged in the loop iteration that would have
	// applied the plan: the device plugin of a is still there.
	if !kubelet.Streaming("example.com/a") || kubelet.Registrations("example.com/a") != 1 {
		t.Error("example.com/a's device plugin stopped for rules that DRA cannot serve")
	}
	if got := planReportValue(t, a.metrics.ruleReloads.WithLabelValues("invalid")); got != 1 {
		t.Errorf(`featureplug_rule_reloads_total{result="invalid"} = %v, want 1`, got)
	}
}

// TestServeDRATakesMPSRules: with --serve dra, a rule sharing its
// resource with MPS makes a plan like any other (MPS is served through
// DRA), whether or not it says serve; the agent takes such rules
// on a reload.
func TestServeDRATakesMPSRules(t *testing.T) {
	const mpsRule = "- name: h100-mps\n  devices: gpu\n  resource: example.com/h100\n  sharing: {strategy: mps, replicas: 2}\n"
	tests := []struct {
		name  string
		def   plan.Serve
		rules string
		want  plan.Serve // the API that serves the resource
	}{
		{"default device-plugin", plan.ServeDevicePlugin, mpsRule, plan.ServeDevicePlugin},
		{"serve dra", plan.ServeDRA, mpsRule, plan.ServeDRA},
		{"rule says dra", plan.ServeDevicePlugin, mpsRule + "  serve: dra\n", plan.ServeDRA},
		{"serve dra, rule says device-plugin", plan.ServeDRA, mpsRule + "  serve: device-plugin\n", plan.ServeDevicePlugin},
		{"serve dra, time-slicing", plan.ServeDRA,
			"- name: h100-ts\n  devices: gpu\n  resource: example.com/h100\n  sharing: {strategy: time-slicing, replicas: 2}\n", plan.ServeDRA},
	}
	src, inv := openFakeInventory(t, "dgx-h100")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := testRulesEngine().Parse("r.yaml", []byte("apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n"+tt.rules))
			if err != nil {
				t.Fatal(err)
			}
			a := &Agent{cfg: agentconfig.Config{DefaultServe: tt.def}, inv: inv}
			p, err := a.planFor(rs)
			if err != nil {
				t.Fatalf("planFor: %v", err)
			}
			if len(p.Resources) != 1 {
				t.Fatalf("planFor gave %d resources, want 1", len(p.Resources))
			}
			if got := p.Resources[0].Serve; got != tt.want {
				t.Errorf("resource served by %s, want %s", got, tt.want)
			}
		})
	}

	// In the agent: rules reloaded with such a rule are taken.
	var logs bytes.Buffer
	a, err := New(agentconfig.Config{
		NodeName: "n", Source: src, RulesEngine: testRulesEngine(), DefaultServe: plan.ServeDRA,
		Kube:   kubeclientset.New(kubefake.NewClientset(), nil),
		Plugin: deviceplugin.Options{KubeletDir: t.TempDir()},
		CDI:    cdi.DriverConfig{SpecDir: t.TempDir(), DriverRoot: t.TempDir()},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	a.inv = inv
	good := planReportRules(t, "- name: h100\n  devices: gpu\n  resource: example.com/h100\n")
	if !a.takeRules(good) {
		t.Fatal("good rules refused")
	}
	mps := planReportRules(t, mpsRule)
	if !a.takeRules(mps) {
		t.Fatalf("MPS rules refused with --serve dra:\n%s", logs.String())
	}
	if a.ruleSet != mps {
		t.Error("the MPS rules did not replace the last ones")
	}
	if got := planReportValue(t, a.metrics.ruleErrors); got != 0 {
		t.Errorf("featureplug_rule_errors_total = %v, want 0", got)
	}
	if got := planReportValue(t, a.metrics.ruleReloads.WithLabelValues("invalid")); got != 0 {
		t.Errorf(`featureplug_rule_reloads_total{result="invalid"} = %v, want 0`, got)
	}
}

func TestServeFlagValues(t *testing.T) {
	for _, tt := range []struct {
		in   plan.Serve
		want plan.Serve
		err  string
	}{
		{"", plan.ServeDevicePlugin, ""},
		{plan.ServeDevicePlugin, plan.ServeDevicePlugin, ""},
		{plan.ServeDRA, plan.ServeDRA, ""},
		{"DRA", "", `--serve: "DRA" is not a kubelet API (use device-plugin or dra)`},
	} {
		cfg := agentconfig.Config{DefaultServe: tt.in, Source: realishSource{}, NodeName: "n", RulesEngine: testRulesEngine(), NoDevicePlugins: true}
		err := cfg.Complete()
		switch {
		case tt.err != "" && (err == nil || err.Error() != tt.err):
			t.Errorf("%q: error %v, want %s", tt.in, err, tt.err)
		case tt.err == "" && (err != nil || cfg.DefaultServe != tt.want):
			t.Errorf("%q: %q, %v; want %q", tt.in, cfg.DefaultServe, err, tt.want)
		}
	}
}
