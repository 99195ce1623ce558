package deviceplugin

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fswatch"
	"github.com/featureplug/featureplug/discovery/statedir"
	"github.com/featureplug/featureplug/plugin/health"
	"github.com/featureplug/featureplug/plugin/health/healthtest"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
	"github.com/featureplug/featureplug/rules/plan"
)

// testTimeout bounds every wait in the socket tests.
const testTimeout = 20 * time.Second

// gpuUUID is the UUID of fake GPU i.
func gpuUUID(i int) string { return fmt.Sprintf("GPU-%08x-1111-2222-3333-444444444444", i) }

// migUUID is the UUID of fake MIG device j of GPU i.
func migUUID(i, j int) string { return fmt.Sprintf("MIG-%08x-%04x-2222-3333-444444444444", i, j) }

// gpuDevice is whole GPU i of a node whose GPUs 0..n/2-1 sit on NUMA node
// 0 and the rest on node 1 (for n = 8: 0-3 and 4-7).
func gpuDevice(i int) plan.Device {
	return plan.Device{
		ID: gpuUUID(i), Kind: plan.DeviceGPU, GPUUUID: gpuUUID(i), GPUIndex: i,
		Index: fmt.Sprint(i), NUMANode: i / 4, MemoryMiB: 81559, Rule: "h100",
	}
}

// migDevice is MIG device j of GPU i.
func migDevice(i, j int) plan.Device {
	return plan.Device{
		ID: migUUID(i, j), Kind: plan.DeviceMIG, GPUUUID: gpuUUID(i), GPUIndex: i,
		Index: fmt.Sprintf("%d:%d", i, j), NUMANode: i / 4, Profile: "1g.10gb", MemoryMiB: 9728, Rule: "mig",
	}
}

// gpus returns whole GPU devices for the given indexes.
func gpus(idx ...int) []plan.Device {
	out := make([]plan.Device, len(idx))
	for i, x := range idx {
		out[i] = gpuDevice(x)
	}
	return out
}

// nvlinkGroups is an n-GPU link matrix with NVLink groups of size group
// (18 links within a group) and SYS paths between groups.
func nvlinkGroups(n, group int) discovery.LinkMatrix {
	m := make(discovery.LinkMatrix, n)
	for i := range n {
		m[i] = make([]discovery.Link, n)
		for j := range n {
			switch {
			case i == j:
			case i/group == j/group:
				m[i][j] = discovery.Link{NVLinks: 18, PCIe: discovery.PCIeNode}
			default:
				m[i][j] = discovery.Link{PCIe: discovery.PCIeSystem}
			}
		}
	}
	return m
}

// h100Plan is the 8x H100 node with two NVLink groups of four, all GPUs
// in one resource.
func h100Plan(name string) *plan.Plan {
	return &plan.Plan{
		Resources: []plan.Resource{{Name: name, Devices: gpus(0, 1, 2, 3, 4, 5, 6, 7)}},
		Links:     nvlinkGroups(8, 4),
	}
}

// newFakeClock is the clock of the health tests.
func newFakeClock() *healthtest.Clock { return healthtest.NewClock() }

// withHealth gives opts a health tracker on clk (nil: the real clock) that
// recovers after recovery and keeps its records in stateDir ("": none),
// with its metrics on reg (nil: none), and returns it.
func withHealth(t testing.TB, opts *Options, clk clock.WithDelayedExecution, recovery time.Duration, stateDir string, reg prometheus.Registerer) *health.Tracker {
	t.Helper()
	tr, err := health.New(health.Options{Recovery: recovery, StateDir: statedir.Dir(stateDir), Clock: clk, Logger: opts.Logger, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	opts.Health = tr
	return tr
}

// runWatcher runs a file watcher with o until the test ends, for a
// manager given it in Options.Watcher.
func runWatcher(t testing.TB, o fswatch.Options) *fswatch.Watcher {
	t.Helper()
	w := fswatch.New(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return w
}

// env is a running manager and simulated kubelet over one directory.
type env struct {
	t       testing.TB
	dir     string
	kubelet *kubeletsim.Kubelet
	m       *Manager
	cancel  context.CancelFunc
	done    chan error
}

// startEnv starts a simulated kubelet and a manager serving plan.
func startEnv(t testing.TB, opts Options, plan *plan.Plan) *env {
	t.Helper()
	e := &env{t: t, dir: kubeletsim.ShortTempDir(t)}
	k, err := kubeletsim.Start(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	e.kubelet = k
	t.Cleanup(k.Stop)
	e.startManager(opts, plan)
	return e
}

// startManager starts the manager in e.dir.
func (e *env) startManager(opts Options, plan *plan.Plan) {
	e.t.Helper()
	opts.KubeletDir = e.dir
	m, err := NewManager(opts)
	if err != nil {
		e.t.Fatal(err)
	}
	if plan != nil {
		if err := m.Apply(plan); err != nil {
			e.t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.m, e.cancel, e.done = m, cancel, make(chan error, 1)
	go func() { e.done <- m.Run(ctx) }()
	e.t.Cleanup(e.stop)
}

// stop cancels Run and waits for it.
func (e *env) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	e.cancel = nil
	select {
	case err := <-e.done:
		if err != nil {
			e.t.Errorf("Run returned %v", err)
		}
	case <-time.After(testTimeout):
		e.t.Errorf("Run did not return after cancel")
	}
}

// ctx returns a context bounded by testTimeout.
func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	e.t.Cleanup(cancel)
	return ctx
}

// waitRegistered waits until each resource has at least n registrations
// and a device list from a live stream.
func (e *env) waitRegistered(n int, resources ...string) {
	e.t.Helper()
	err := e.kubelet.WaitUntil(e.ctx(), func() bool {
		for _, r := range resources {
			if e.kubelet.Registrations(r) < n || !e.kubelet.Streaming(r) || e.kubelet.Devices(r) == nil {
				return false
			}
		}
		return true
	})
	if err != nil {
		for _, r := range resources {
			e.t.Logf("%s: registrations %d, streaming %v", r, e.kubelet.Registrations(r), e.kubelet.Streaming(r))
		}
		e.t.Fatal(err)
	}
	// The plugin marks itself registered when Register returns, just after
	// the kubelet counted it.
	deadline := time.Now().Add(testTimeout)
	for _, r := range resources {
		for !e.m.Registered(r) {
			if time.Now().After(deadline) {
				e.t.Fatalf("%s: the kubelet accepted it but the manager does not report it registered", r)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// waitDevices waits until resource's list satisfies pred.
func (e *env) waitDevices(resource string, what string, pred func([]*pluginapi.Device) bool) {
	e.t.Helper()
	if err := e.kubelet.WaitFor(e.ctx(), resource, pred); err != nil {
		e.t.Fatalf("%s: %s: %v (have %v)", resource, what, err, e.kubelet.Devices(resource))
	}
}

// healthOf returns the health of every device ID of a list.
func healthOf(devs []*pluginapi.Device) map[string]string {
	out := make(map[string]string, len(devs))
	for _, d := range devs {
		out[d.GetID()] = d.GetHealth()
	}
	return out
}
