package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featureplug/featureplug/plugin/kubeletsim"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/cmd/internal/kube/kubeclientset"
	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/discovery/gpusource"
	"github.com/featureplug/featureplug/discovery/statedir"
	"github.com/featureplug/featureplug/plugin/cdi"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/plugin/dra"
	"github.com/featureplug/featureplug/rules/plan"
)

// draTestRules serves GPUs 0-3 of dgx-h100 as example.com/a through DRA
// and the others as example.com/b through the device plugin.
const draTestRules = `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: a
  devices: gpu
  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {index: {op: In, value: ["0", "1", "2", "3"]}}}]
  resource: example.com/a
  serve: dra
- name: b
  devices: gpu
  resource: example.com/b
`

// draTestEnv is what an agent of the DRA tests runs with: the same state
// directory and fake API server across restarts.
type draTestEnv struct {
	src      *gpusource.Fake
	dir      string
	kube     *kubefake.Clientset
	rules    string
	specDir  string
	stateDir string
}

func newDRATestEnv(t *testing.T) *draTestEnv {
	t.Helper()
	src, err := gpusource.OpenFake("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	dir := kubeletsim.ShortTempDir(t)
	e := &draTestEnv{
		src: src, dir: dir,
		kube:     kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "uid-1"}}),
		rules:    filepath.Join(dir, "rules.yaml"),
		specDir:  filepath.Join(dir, "cdi"),
		stateDir: filepath.Join(dir, "state"),
	}
	if err := os.WriteFile(e.rules, []byte(draTestRules), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

// start runs an agent until the returned stop is called (or the test
// ends); records gets its log lines.
func (e *draTestEnv) start(t *testing.T, records kubeRecords) (*Agent, func()) {
	t.Helper()
	a, err := New(agentconfig.Config{
		NodeName: "n", Source: e.src, Rules: e.rules, RulesEngine: testRulesEngine(),
		Kube:   kubeclientset.New(e.kube, nil),
		Plugin: deviceplugin.Options{KubeletDir: filepath.Join(e.dir, "kubelet")}, StateDir: e.stateDir, HealthRecovery: time.Hour,
		CDI:                cdi.DriverConfig{SpecDir: e.specDir, DriverRoot: filepath.Join(e.dir, "driver-root")},
		DRARegistryDir:     filepath.Join(e.dir, "plugins_registry"),
		DRAPluginDir:       filepath.Join(e.dir, "plugins", dra.DriverName),
		RediscoverInterval: time.Hour,
		FileSettle:         time.Millisecond,
		Logger:             slog.New(records),
	})
	if err != nil {
		t.Fatal(err)
	}
	_, stop := startAgentRun(t, a)
	t.Cleanup(stop)
	return a, stop
}

func (e *draTestEnv) slice(t *testing.T) *resourceapi.ResourceSlice {
	t.Helper()
	s, err := e.kube.ResourceV1().ResourceSlices().Get(context.Background(), dra.SliceName("n"), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the node's ResourceSlice: %v", err)
	}
	return s
}

// draTestGPU returns the UUID of GPU i of the agent's inventory.
func draTestGPU(t *testing.T, a *Agent, i int) string {
	t.Helper()
	inv := a.current.Load()
	if inv == nil || len(inv.GPUs) <= i {
		t.Fatalf("no GPU %d in the inventory", i)
	}
	return inv.GPUs[i].UUID
}

// draTestMetric returns the value of the metric name whose labels include
// labels (name=value pairs), or -1 when there is none.
func draTestMetric(t *testing.T, a *Agent, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := a.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				if !found {
					continue next
				}
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	return -1
}

// TestDRASinkPublishesTaintsAndSurvivesRestart: the DRA resource's four
// GPUs (not the device plugin's) are published in the node's slice and
// in the Table with their CDI IDs, which the CDI spec resolves; a health
// event taints the GPU; a restarted agent keeps the taint (health state
// file) and writes nothing, since the slice it finds is what it would
// publish.
func TestDRASinkPublishesTaintsAndSurvivesRestart(t *testing.T) {
	e := newDRATestEnv(t)
	records := make(kubeRecords, 4096)
	a, stop := e.start(t, records)
	kubeWaitRecord(t, records, "ResourceSlice created", "devices=4")

	s := e.slice(t)
	gpu0 := draTestGPU(t, a, 0)
	if len(s.Spec.Devices) != 4 || s.Spec.Driver != dra.DriverName || s.Spec.Pool.Name != "n" || *s.Spec.NodeName != "n" {
		t.Fatalf("slice spec %+v, want four devices of node n", s.Spec)
	}
	for i, d := range s.Spec.Devices {
		if got := *d.Attributes[draattr.AttrResource].StringValue; got != "example.com/a" {
			t.Errorf("device %d resource %q, want example.com/a", i, got)
		}
		if len(d.Taints) != 0 {
			t.Errorf("device %s tainted before any health event: %+v", d.Name, d.Taints)
		}
	}
	tab := sinkOf[*dra.Sink](t, a).Table()
	if tab.Len() != 4 {
		t.Fatalf("table has %d devices, want 4", tab.Len())
	}
	d, ok := tab.Lookup(draattr.DeviceName(gpu0))
	if !ok || len(d.CDIDevices) != 1 || d.CDIDevices[0] != "nvidia.com/gpu="+gpu0 {
		t.Fatalf("table device of GPU 0 = %+v, %v; want CDI ID nvidia.com/gpu=%s", d, ok, gpu0)
	}
	// The CDI spec holds the DRA devices (no CDI device-list strategy is
	// on, so only those), and every CDI ID the table answers resolves.
	if n := draTestMetric(t, a, "featureplug_cdi_spec_devices"); n != 4 {
		t.Errorf("CDI spec has %v devices, want the 4 DRA devices", n)
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(e.specDir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	for _, dev := range s.Spec.Devices {
		d, ok := tab.Lookup(dev.Name)
		if !ok || len(d.CDIDevices) != 1 || cache.GetDevice(d.CDIDevices[0]) == nil {
			t.Errorf("slice device %s: table entry %+v (found %v) does not resolve in the CDI spec", dev.Name, d, ok)
		}
	}
	if got := draTestMetric(t, a, "featureplug_dra_devices"); got != 4 {
		t.Errorf("featureplug_dra_devices = %v, want 4", got)
	}

	a.health.Record(discovery.HealthEvent{GPUUUID: gpu0, Kind: discovery.EventXID, XID: 79, Time: time.Now()})
	kubeWaitRecord(t, records, "ResourceSlice updated", "generation=2")
	taint := resourceapi.DeviceTaint{Key: "gpu.featureplug.io/unhealthy", Value: "xid-79", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	checkTaint := func(s *resourceapi.ResourceSlice) {
		t.Helper()
		for _, d := range s.Spec.Devices {
			want := 0
			if d.Name == draattr.DeviceName(gpu0) {
				want = 1
			}
			if len(d.Taints) != want || (want == 1 && (d.Taints[0].Key != taint.Key || d.Taints[0].Value != taint.Value || d.Taints[0].Effect != taint.Effect)) {
				t.Errorf("device %s taints %+v, want %d of %+v", d.Name, d.Taints, want, taint)
			}
		}
	}
	checkTaint(e.slice(t))
	stop()

	records2 := make(kubeRecords, 4096)
	a2, _ := e.start(t, records2)
	kubeWaitRecord(t, records2, "plan applied", "trigger=start")
	deadline := time.Now().Add(testWait)
	for draTestMetric(t, a2, "featureplug_dra_slice_syncs_total", "result", "ok") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the restarted agent never compared its slice with the API server's")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, op := range []string{"create", "update", "delete"} {
		if got := draTestMetric(t, a2, "featureplug_dra_slice_writes_total", "op", op); got != 0 {
			t.Errorf("restarted agent: featureplug_dra_slice_writes_total{op=%q} = %v, want 0 (the slice is unchanged)", op, got)
		}
	}
	checkTaint(e.slice(t))
}

// TestDRASinkRefusesWhatItCannotServe: a plan with a DRA resource is
// refused, naming the resource, the rule and what is missing, when the
// agent has no API server or no CDI spec directory; the Table stays as
// it was.
func TestDRASinkRefusesWhatItCannotServe(t *testing.T) {
	src, inv := openFakeInventory(t, "dgx-h100")
	g := inv.GPUs[0]
	p := &plan.Plan{Resources: []plan.Resource{{Name: "example.com/a", Serve: plan.ServeDRA,
		Devices: []plan.Device{{ID: g.UUID, Kind: plan.DeviceGPU, GPUUUID: g.UUID, Index: "0", Rule: "rule-a"}}}}}
	kube := kubeclientset.New(kubefake.NewClientset(), nil)
	for _, tt := range []struct {
		name string
		kube bool
		spec string
		want string
	}{
		{"no API server", false, t.TempDir(), "resource example.com/a (rule rule-a) is served through DRA, which needs an API server (in-cluster or --kubeconfig)"},
		{"no CDI spec directory", true, "", "resource example.com/a (rule rule-a) is served through DRA, which prepares devices as CDI devices: --cdi-spec-dir is empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := agentconfig.Config{NodeName: "n", Source: src, RulesEngine: testRulesEngine(), CDI: cdi.DriverConfig{SpecDir: tt.spec, DriverRoot: t.TempDir()},
				Plugin: deviceplugin.Options{KubeletDir: t.TempDir()}, DRARegistryDir: kubeletsim.ShortTempDir(t), DRAPluginDir: kubeletsim.ShortTempDir(t)}
			if tt.kube {
				cfg.Kube = kube
			}
			a, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = sinkOf[*dra.Sink](t, a).Apply(context.Background(), inv, p)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Apply: %v, want %q", err, tt.want)
			}
			if sinkOf[*dra.Sink](t, a).Table().Len() != 0 {
				t.Errorf("the refused plan's devices are in the table")
			}
			// The same plan served by the device plugin is no concern of
			// the DRA sink's.
			q := *p
			q.Resources = []plan.Resource{p.Resources[0]}
			q.Resources[0].Serve = plan.ServeDevicePlugin
			if err := sinkOf[*dra.Sink](t, a).Apply(context.Background(), inv, &q); err != nil {
				t.Errorf("Apply of a device-plugin plan: %v", err)
			}
		})
	}
}

// TestServeDRAStartupErrors: --serve dra without what DRA needs does not
// start, naming the flag.
func TestServeDRAStartupErrors(t *testing.T) {
	src, err := gpusource.OpenFake("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	kube := kubeclientset.New(kubefake.NewClientset(), nil)
	for _, tt := range []struct {
		name string
		cfg  agentconfig.Config
		want string
	}{
		{"no API server", agentconfig.Config{CDI: cdi.DriverConfig{SpecDir: t.TempDir()}}, "--serve dra publishes ResourceSlices: it needs an API server (in-cluster or --kubeconfig)"},
		{"no CDI spec directory", agentconfig.Config{Kube: kube}, "--serve dra prepares devices as CDI devices: --cdi-spec-dir is empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			cfg.NodeName, cfg.Source, cfg.RulesEngine, cfg.DefaultServe = "n", src, testRulesEngine(), plan.ServeDRA
			cfg.Plugin = deviceplugin.Options{KubeletDir: t.TempDir()}
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want %q", err, tt.want)
			}
		})
	}
	// With both, it starts.
	_, err = New(agentconfig.Config{NodeName: "n", Source: src, RulesEngine: testRulesEngine(), DefaultServe: plan.ServeDRA, Kube: kube,
		CDI: cdi.DriverConfig{SpecDir: t.TempDir(), DriverRoot: t.TempDir()}, Plugin: deviceplugin.Options{KubeletDir: t.TempDir()},
		DRARegistryDir: kubeletsim.ShortTempDir(t), DRAPluginDir: kubeletsim.ShortTempDir(t)})
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("New with an API server and a CDI spec directory: %v", err)
	}
}

// TestDRASliceLeftByEarlierRunIsDeleted: an agent whose rules served
// through DRA leaves a marker in the state directory; restarted with rules
// that serve everything through the device plugins, it deletes the slice
// the earlier run left (its devices would otherwise be offered through
// both APIs) and then removes the marker.
func TestDRASliceLeftByEarlierRunIsDeleted(t *testing.T) {
	e := newDRATestEnv(t)
	records := make(kubeRecords, 4096)
	_, stop := e.start(t, records)
	kubeWaitRecord(t, records, "ResourceSlice created", "devices=4")
	marker := filepath.Join(e.stateDir, statedir.DRASliceMarkerFile)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("no marker after the slice was created: %v", err)
	}
	stop()

	noDRA := strings.Replace(draTestRules, "  serve: dra\n", "", 1)
	if noDRA == draTestRules {
		t.Fatal("the test rules no longer say serve: dra")
	}
	if err := os.WriteFile(e.rules, []byte(noDRA), 0o644); err != nil {
		t.Fatal(err)
	}
	records2 := make(kubeRecords, 4096)
	a2, _ := e.start(t, records2)
	kubeWaitRecord(t, records2, "deleted a ResourceSlice the node no longer needs", "devices=4")
	list, err := e.kube.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("%d ResourceSlices left, want none", len(list.Items))
	}
	deadline := time.Now().Add(testWait)
	for {
		_, err := os.Stat(marker)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("marker still there after the slice was deleted (stat: %v)", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := draTestMetric(t, a2, "featureplug_dra_slice_writes_total", "op", "delete"); got != 1 {
		t.Errorf("featureplug_dra_slice_writes_total{op=delete} = %v, want 1", got)
	}
}
