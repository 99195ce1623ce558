package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
	"github.com/featureplug/featureplug/rules/plan"
)

// deviceIDs lists the IDs of a ListAndWatch list.
func deviceIDs(devs []*pluginapi.Device) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.GetID()
	}
	return out
}

// hasIDs returns a predicate that holds when the list has exactly want.
func hasIDs(want []string) func([]*pluginapi.Device) bool {
	return func(devs []*pluginapi.Device) bool {
		return devs != nil && slices.Equal(deviceIDs(devs), want)
	}
}

func TestRegistersEveryResource(t *testing.T) {
	e := startEnv(t, DefaultOptions(), mixedPlan())
	names := []string{"example.com/mps", "example.com/mps-limits", "example.com/shared", "example.com/shared-one", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"}
	e.waitRegistered(1, names...)
	if got := e.kubelet.Resources(); !slices.Equal(got, names) {
		t.Errorf("registered resources = %v, want %v", got, names)
	}
	capacity := map[string]int{
		"nvidia.com/gpu": 3, "nvidia.com/mig-1g.10gb": 2,
		"example.com/shared": 8, "example.com/shared-one": 8, "example.com/mps": 8, "example.com/mps-limits": 8,
	}
	for name, want := range capacity {
		total, healthy := e.kubelet.Capacity(name)
		if total != want || healthy != want {
			t.Errorf("%s: capacity %d (healthy %d), want %d", name, total, healthy, want)
		}
		if !e.m.Registered(name) {
			t.Errorf("%s: Registered = false after the kubelet accepted it", name)
		}
		sock, err := SocketPath(e.dir, name)
		if err != nil {
			t.Fatal(err)
		}
		if ep := e.kubelet.Endpoint(name); ep != filepath.Base(sock) {
			t.Errorf("%s: endpoint %q, want %q", name, ep, filepath.Base(sock))
		}
	}
	if !e.m.Ready() {
		t.Error("Ready = false with every resource of the first plan registered")
	}
	if got := deviceIDs(e.kubelet.Devices("example.com/shared")); !slices.Equal(got, []string{
		replicaID(4, 0), replicaID(4, 1), replicaID(4, 2), replicaID(4, 3),
		replicaID(5, 0), replicaID(5, 1), replicaID(5, 2), replicaID(5, 3),
	}) {
		t.Errorf("replica IDs = %v", got)
	}
	for _, d := range e.kubelet.Devices("nvidia.com/gpu") {
		nodes := d.GetTopology().GetNodes()
		if len(nodes) != 1 || nodes[0].GetID() != 0 {
			t.Errorf("%s: topology %v, want NUMA node 0", d.GetID(), d.GetTopology())
		}
	}
	for _, d := range e.kubelet.Devices("example.com/mps") {
		if nodes := d.GetTopology().GetNodes(); len(nodes) != 1 || nodes[0].GetID() != 1 {
			t.Errorf("%s: topology %v, want NUMA node 1", d.GetID(), d.GetTopology())
		}
	}
}

func TestNoTopologyWithoutNUMA(t *testing.T) {
	devs := gpus(0)
	devs[0].NUMANode = discovery.NoNUMANode
	e := startEnv(t, DefaultOptions(), &plan.Plan{Resources: []plan.Resource{{Name: "nvidia.com/gpu", Devices: devs}}})
	e.waitRegistered(1, "nvidia.com/gpu")
	if d := e.kubelet.Devices("nvidia.com/gpu")[0]; d.GetTopology() != nil {
		t.Errorf("topology %v for a GPU without NUMA node, want none", d.GetTopology())
	}
}

func TestManagerBeforeKubelet(t *testing.T) {
	e := &env{t: t, dir: kubeletsim.ShortTempDir(t)}
	reg := prometheus.NewRegistry()
	opts := DefaultOptions()
	opts.Registerer = reg
	e.startManager(opts, h100Plan("nvidia.com/gpu"))
	// Wait for at least one registration attempt that found no kubelet.
	missing := map[string]string{"resource": "nvidia.com/gpu", "result": regKubeletMissing}
	waitTrue(t, "a registration attempt without a kubelet", func() bool {
		return metricValue(t, reg, "featureplug_plugin_registrations_total", missing) >= 1
	})
	if e.m.Ready() || e.m.Registered("nvidia.com/gpu") {
		t.Fatal("ready without a kubelet")
	}
	k, err := kubeletsim.Start(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	e.kubelet = k
	e.waitRegistered(1, "nvidia.com/gpu")
	if total, _ := k.Capacity("nvidia.com/gpu"); total != 8 {
		t.Errorf("capacity %d, want 8", total)
	}
}

// TestWaitReadyWakesOnRegistration: WaitReady blocks while the kubelet is
// away and returns true once every resource of the plan is registered (what
// the agent holds publishing back for); it returns false when its context
// ends first.
func TestWaitReadyWakesOnRegistration(t *testing.T) {
	e := &env{t: t, dir: kubeletsim.ShortTempDir(t)}
	reg := prometheus.NewRegistry()
	opts := DefaultOptions()
	opts.Registerer = reg
	twoResources := &plan.Plan{Resources: []plan.Resource{
		{Name: "example.com/a", Devices: gpus(0, 1)},
		{Name: "example.com/b", Devices: gpus(2, 3)},
	}}
	e.startManager(opts, twoResources)
	missing := map[string]string{"resource": "example.com/a", "result": regKubeletMissing}
	waitTrue(t, "a registration attempt without a kubelet", func() bool {
		return metricValue(t, reg, "featureplug_plugin_registrations_total", missing) >= 1
	})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if e.m.WaitReady(cancelled) {
		t.Fatal("WaitReady = true without a kubelet")
	}

	ready := make(chan bool, 1)
	go func() { ready <- e.m.WaitReady(e.ctx()) }()
	k, err := kubeletsim.Start(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	if !<-ready {
		t.Fatal("WaitReady = false after the kubelet came")
	}
	for _, r := range []string{"example.com/a", "example.com/b"} {
		if !e.m.Registered(r) {
			t.Errorf("WaitReady returned before %s was registered", r)
		}
	}

	// A plan with no resource is ready as soon as it is served.
	empty := &env{t: t, dir: kubeletsim.ShortTempDir(t)}
	empty.startManager(DefaultOptions(), &plan.Plan{})
	if !empty.m.WaitReady(empty.ctx()) {
		t.Fatal("WaitReady = false for an empty plan")
	}
}

func TestReadyNeedsEveryFirstResource(t *testing.T) {
	m, err := NewManager(Options{KubeletDir: kubeletsim.ShortTempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	if m.Ready() {
		t.Error("Ready before any plan")
	}
	if err := m.Apply(h100Plan("nvidia.com/gpu")); err != nil {
		t.Fatal(err)
	}
	if m.Ready() {
		t.Error("Ready before Run")
	}
}

func TestPlanChange(t *testing.T) {
	plan1 := &plan.Plan{Links: nvlinkGroups(8, 4), Resources: []plan.Resource{
		{Name: "example.com/a", Devices: gpus(0, 1, 2, 3)},
		{Name: "example.com/b", Devices: gpus(4, 5)},
		{Name: "example.com/c", Devices: gpus(6, 7)},
	}}
	e := startEnv(t, DefaultOptions(), plan1)
	e.waitRegistered(1, "example.com/a", "example.com/b", "example.com/c")
	updatesA := e.kubelet.Updates("example.com/a")
	socketC, _ := SocketPath(e.dir, "example.com/c")

	// b loses GPU 5, c is renamed d, a only changes its rule name (not
	// visible to the kubelet).
	a := plan1.Resources[0]
	a.Devices = gpus(0, 1, 2, 3)
	for i := range a.Devices {
		a.Devices[i].Rule = "renamed-rule"
	}
	plan2 := &plan.Plan{Links: nvlinkGroups(8, 4), Resources: []plan.Resource{
		a,
		{Name: "example.com/b", Devices: gpus(4)},
		{Name: "example.com/d", Devices: gpus(6, 7)},
	}}
	if err := e.m.Apply(plan2); err != nil {
		t.Fatal(err)
	}
	e.waitRegistered(1, "example.com/d")
	e.waitDevices("example.com/b", "shrinks to GPU 4", hasIDs(gpuIDs(4)))
	e.waitDevices("example.com/d", "lists GPUs 6, 7", hasIDs(gpuIDs(6, 7)))
	if err := e.kubelet.WaitUntil(e.ctx(), func() bool { return !e.kubelet.Streaming("example.com/c") }); err != nil {
		t.Errorf("the removed resource's stream stays open: %v", err)
	}
	if exists(socketC) {
		t.Errorf("socket %s of the removed resource still exists", socketC)
	}
	if e.m.Registered("example.com/c") {
		t.Error("removed resource still reported registered")
	}

	// A wrongly pushed update or re-registration of a would arrive on its
	// stream before the next real change does: push one (GPU 3 leaves a)
	// and wait for it, then count.
	aMarker := a
	aMarker.Devices = a.Devices[:3]
	planMarker := &plan.Plan{Links: plan2.Links, Resources: append([]plan.Resource{aMarker}, plan2.Resources[1:]...)}
	if err := e.m.Apply(planMarker); err != nil {
		t.Fatal(err)
	}
	e.waitDevices("example.com/a", "shrinks to GPUs 0-2", hasIDs(gpuIDs(0, 1, 2)))
	for name, want := range map[string][3]int{ // registrations, streams
		"example.com/a": {1, 1},
		"example.com/b": {1, 1},
		"example.com/d": {1, 1},
	} {
		if r, s := e.kubelet.Registrations(name), e.kubelet.Streams(name); r != want[0] || s != want[1] {
			t.Errorf("%s: %d registrations and %d streams, want %d and %d", name, r, s, want[0], want[1])
		}
		if !e.kubelet.Streaming(name) {
			t.Errorf("%s: stream closed", name)
		}
	}
	if got := e.kubelet.Updates("example.com/a"); got != updatesA+1 {
		t.Errorf("unchanged resource a got %d updates after the plan change, want none", got-updatesA-1)
	}
	if got := e.kubelet.Updates("example.com/b"); got != 2 {
		t.Errorf("resource b got %d device lists, want 2 (initial and changed)", got)
	}

	// Sharing changes are pushed on the same stream too.
	plan3 := &plan.Plan{Links: nvlinkGroups(8, 4), Resources: []plan.Resource{
		a,
		{Name: "example.com/b", Devices: gpus(4), Sharing: plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 2}},
		{Name: "example.com/d", Devices: gpus(6, 7)},
	}}
	if err := e.m.Apply(plan3); err != nil {
		t.Fatal(err)
	}
	e.waitDevices("example.com/b", "becomes two replicas", hasIDs([]string{replicaID(4, 0), replicaID(4, 1)}))
	if r, s := e.kubelet.Registrations("example.com/b"), e.kubelet.Streams("example.com/b"); r != 1 || s != 1 {
		t.Errorf("b after sharing change: %d registrations and %d streams, want 1 and 1", r, s)
	}
	if _, err := e.kubelet.Allocate(e.ctx(), "example.com/b", []string{replicaID(4, 1)}); err != nil {
		t.Errorf("Allocate of a new replica ID: %v", err)
	}
}

func TestKubeletRestart(t *testing.T) {
	for _, clean := range []bool{false, true} {
		name := "keeps plugin sockets"
		if clean {
			name = "cleans plugin sockets"
		}
		t.Run(name, func(t *testing.T) {
			e := startEnv(t, DefaultOptions(), mixedPlan())
			names := make([]string, 0, 6)
			for _, r := range mixedPlan().Resources {
				names = append(names, r.Name)
			}
			e.waitRegistered(1, names...)
			for range 2 {
				before := map[string]int{}
				for _, n := range names {
					before[n] = e.kubelet.Registrations(n)
				}
				if err := e.kubelet.Restart(clean); err != nil {
					t.Fatal(err)
				}
				for _, n := range names {
					e.waitRegistered(before[n]+1, n)
				}
				for _, n := range names {
					if e.kubelet.Registrations(n) <= before[n] {
						t.Errorf("%s not registered again", n)
					}
					if total, healthy := e.kubelet.Capacity(n); total == 0 || total != healthy {
						t.Errorf("%s after restart: capacity %d, healthy %d", n, total, healthy)
					}
				}
			}
			if _, err := e.kubelet.Allocate(e.ctx(), "nvidia.com/gpu", gpuIDs(0)); err != nil {
				t.Errorf("Allocate after restart: %v", err)
			}
		})
	}
}

func TestServerSocketRemoved(t *testing.T) {
	plan := &plan.Plan{Resources: []plan.Resource{
		{Name: "example.com/a", Devices: gpus(0, 1)},
		{Name: "example.com/b", Devices: gpus(2, 3)},
	}}
	e := startEnv(t, DefaultOptions(), plan)
	e.waitRegistered(1, "example.com/a", "example.com/b")
	sock, _ := SocketPath(e.dir, "example.com/a")
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	e.waitRegistered(2, "example.com/a")
	if !exists(sock) {
		t.Errorf("socket %s was not re-created", sock)
	}
	if r := e.kubelet.Registrations("example.com/b"); r != 1 {
		t.Errorf("untouched resource b registered %d times, want 1", r)
	}
	if _, err := e.kubelet.Allocate(e.ctx(), "example.com/a", gpuIDs(1)); err != nil {
		t.Errorf("Allocate on the restarted server: %v", err)
	}
}

func TestRunStops(t *testing.T) {
	e := startEnv(t, DefaultOptions(), h100Plan("nvidia.com/gpu"))
	e.waitRegistered(1, "nvidia.com/gpu")
	sock, _ := SocketPath(e.dir, "nvidia.com/gpu")
	e.stop()
	if exists(sock) {
		t.Errorf("socket %s left behind after Run returned", sock)
	}
	if err := e.m.Apply(h100Plan("nvidia.com/gpu")); err == nil {
		t.Error("Apply after Run returned did not fail")
	}
	if err := e.m.Run(e.ctx()); err == nil {
		t.Error("second Run did not fail")
	}
}

// healthPlan has whole GPUs, replicas and MIG devices on shared GPUs.
func healthPlan() *plan.Plan {
	return &plan.Plan{Resources: []plan.Resource{
		{Name: "example.com/shared", Devices: gpus(1, 2), Sharing: plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 2}},
		{Name: "nvidia.com/gpu", Devices: gpus(0, 1, 2)},
		{Name: "nvidia.com/mig", Devices: []plan.Device{migDevice(3, 0), migDevice(3, 1)}},
		{Name: "nvidia.com/mig-shared", Devices: []plan.Device{migDevice(3, 2)}, Sharing: plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 2}},
	}}
}

func TestHealth(t *testing.T) {
	clock := newFakeClock()
	opts := DefaultOptions()
	withHealth(t, &opts, clock, time.Minute, "", nil)
	e := startEnv(t, opts, healthPlan())
	all := []string{"example.com/shared", "nvidia.com/gpu", "nvidia.com/mig", "nvidia.com/mig-shared"}
	e.waitRegistered(1, all...)

	// expect waits until every resource shows exactly the listed IDs
	// unhealthy.
	expect := func(step string, unhealthy ...string) {
		t.Helper()
		bad := map[string]bool{}
		for _, id := range unhealthy {
			bad[id] = true
		}
		for _, r := range all {
			e.waitDevices(r, step, func(devs []*pluginapi.Device) bool {
				for id, h := range healthOf(devs) {
					if (h == pluginapi.Unhealthy) != bad[id] {
						return false
					}
				}
				return devs != nil
			})
		}
	}

	e.m.health.Record(discovery.HealthEvent{GPUUUID: gpuUUID(1), Kind: discovery.EventXID, XID: 61})
	expect("XID 61 on GPU 1", gpuUUID(1), replicaID(1, 0), replicaID(1, 1))

	e.m.health.Record(discovery.HealthEvent{GPUUUID: gpuUUID(3), MIGUUID: migUUID(3, 1), Kind: discovery.EventXID, XID: 61})
	migShared := migUUID(3, 2)
	expect("XID on MIG 3:1", gpuUUID(1), replicaID(1, 0), replicaID(1, 1), migUUID(3, 1))

	e.m.health.Record(discovery.HealthEvent{GPUUUID: gpuUUID(3), Kind: discovery.EventECCDoubleBit})
	expect("ECC on GPU 3", gpuUUID(1), replicaID(1, 0), replicaID(1, 1), migUUID(3, 0), migUUID(3, 1), migShared+"::0", migShared+"::1")

	// 40 s later GPU 1 has a new event: its quiet period starts again.
	clock.Advance(40 * time.Second)
	e.m.health.Record(discovery.HealthEvent{GPUUUID: gpuUUID(1), Kind: discovery.EventXID, XID: 48})
	clock.Advance(30 * time.Second) // 70 s after the first events
	expect("quiet period over for GPU 3 and MIG 3:1, not for GPU 1", gpuUUID(1), replicaID(1, 0), replicaID(1, 1))
	clock.Advance(30 * time.Second) // 60 s after GPU 1's last event
	expect("all recovered")

	for _, r := range all {
		if n := e.kubelet.Registrations(r); n != 1 {
			t.Errorf("%s registered %d times; health must travel on the open stream", r, n)
		}
	}
}

func TestHealthWithoutRecovery(t *testing.T) {
	clock := newFakeClock()
	opts := DefaultOptions()
	tr := withHealth(t, &opts, clock, 0, "", nil)
	e := startEnv(t, opts, healthPlan())
	e.waitRegistered(1, "nvidia.com/gpu")
	tr.Record(discovery.HealthEvent{GPUUUID: gpuUUID(0), Kind: discovery.EventXID, XID: 61})
	e.waitDevices("nvidia.com/gpu", "GPU 0 unhealthy", func(devs []*pluginapi.Device) bool {
		return healthOf(devs)[gpuUUID(0)] == pluginapi.Unhealthy
	})
	clock.Advance(24 * time.Hour)
	// A recovery of GPU 0 would reach the stream before the next change:
	// make one (GPU 1 fails) and wait for it.
	tr.Record(discovery.HealthEvent{GPUUUID: gpuUUID(1), Kind: discovery.EventXID, XID: 61})
	e.waitDevices("nvidia.com/gpu", "GPU 1 unhealthy", func(devs []*pluginapi.Device) bool {
		return healthOf(devs)[gpuUUID(1)] == pluginapi.Unhealthy
	})
	if h := healthOf(e.kubelet.Devices("nvidia.com/gpu"))[gpuUUID(0)]; h != pluginapi.Unhealthy {
		t.Errorf("GPU 0 is %s a day later with recovery disabled", h)
	}
}

func TestHealthBeforePlan(t *testing.T) {
	// An event for a device no plan serves yet applies once a plan does.
	clock := newFakeClock()
	opts := DefaultOptions()
	withHealth(t, &opts, clock, time.Minute, "", nil)
	e := &env{t: t, dir: kubeletsim.ShortTempDir(t)}
	k, err := kubeletsim.Start(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	e.kubelet = k
	e.startManager(opts, nil)
	e.m.health.Record(discovery.HealthEvent{GPUUUID: gpuUUID(2), Kind: discovery.EventXID, XID: 61})
	if err := e.m.Apply(h100Plan("nvidia.com/gpu")); err != nil {
		t.Fatal(err)
	}
	e.waitDevices("nvidia.com/gpu", "GPU 2 unhealthy", func(devs []*pluginapi.Device) bool {
		return devs != nil && healthOf(devs)[gpuUUID(2)] == pluginapi.Unhealthy && healthOf(devs)[gpuUUID(3)] == pluginapi.Healthy
	})
}

// metricValue returns the value of the series of family name whose labels
// include want, or -1.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
					continue series
				}
			}
			return value(m)
		}
	}
	return -1
}

func value(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetGauge().GetValue()
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := DefaultOptions()
	opts.Registerer = reg
	e := startEnv(t, opts, h100Plan("nvidia.com/gpu"))
	e.waitRegistered(1, "nvidia.com/gpu")
	if _, err := e.kubelet.Allocate(e.ctx(), "nvidia.com/gpu", gpuIDs(0)); err != nil {
		t.Fatal(err)
	}
	_, _ = e.kubelet.Allocate(e.ctx(), "nvidia.com/gpu", []string{"GPU-nope"})
	e.m.health.Record(discovery.HealthEvent{GPUUUID: gpuUUID(0), Kind: discovery.EventXID, XID: 61})
	e.waitDevices("nvidia.com/gpu", "GPU 0 unhealthy", func(devs []*pluginapi.Device) bool {
		return healthOf(devs)[gpuUUID(0)] == pluginapi.Unhealthy
	})
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"featureplug_plugin_devices", map[string]string{"resource": "nvidia.com/gpu", "health": "healthy"}, 7},
		{"featureplug_plugin_devices", map[string]string{"resource": "nvidia.com/gpu", "health": "unhealthy"}, 1},
		{"featureplug_plugin_allocations_total", map[string]string{"resource": "nvidia.com/gpu", "result": "ok"}, 1},
		{"featureplug_plugin_allocations_total", map[string]string{"resource": "nvidia.com/gpu", "result": "invalid"}, 1},
		{"featureplug_plugin_plan_applies_total", map[string]string{"result": "ok"}, 1},
		{"featureplug_plugin_registrations_total", map[string]string{"resource": "nvidia.com/gpu", "result": "ok"}, 1},
		{"featureplug_plugin_health_events_total", map[string]string{"kind": "xid", "xid": "61"}, 1},
	}
	for _, c := range checks {
		if got := metricValue(t, reg, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if _, err := NewManager(opts); err == nil || !strings.Contains(err.Error(), "registering plugin metrics") {
		t.Errorf("second manager on the same registry: error %v, want a registration error", err)
	}
}

func TestEmptyResource(t *testing.T) {
	e := startEnv(t, DefaultOptions(), &plan.Plan{Resources: []plan.Resource{{Name: "example.com/none"}}})
	e.waitRegistered(1, "example.com/none")
	if total, _ := e.kubelet.Capacity("example.com/none"); total != 0 {
		t.Errorf("capacity %d, want 0", total)
	}
	if _, err := e.kubelet.GetPreferredAllocation(e.ctx(), "example.com/none", nil, nil, 1); err == nil {
		t.Error("GetPreferredAllocation from no devices did not fail")
	}
}
