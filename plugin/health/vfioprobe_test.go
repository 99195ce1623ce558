package health

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/discovery/statedir"
	"github.com/featureplug/featureplug/plugin/health/healthtest"
	"github.com/featureplug/featureplug/rules/plan"
)

// vfioProbeNode lays out the bundled l40s-vfio node's sysfs tree and
// returns the node, its root and a plan of its four VFIO GPUs.
func vfioProbeNode(t *testing.T) (*fakenode.Node, string, *plan.Plan) {
	t.Helper()
	node, err := fakenode.Named("l40s-vfio")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := node.WriteSysfs(root); err != nil {
		t.Fatal(err)
	}
	s, err := discovery.ReadSysfs(root)
	if err != nil {
		t.Fatal(err)
	}
	r := plan.Resource{Name: "nvidia.com/AD102GL_L40S"}
	for _, d := range s.VFIO {
		r.Devices = append(r.Devices, plan.Device{ID: d.PCIAddress, Kind: plan.DeviceVFIO, GPUUUID: d.PCIAddress, GPUIndex: -1,
			VFIO: &plan.VFIODevice{PCIAddress: d.PCIAddress, IOMMUGroup: d.IOMMUGroup, DevicePaths: d.DevicePaths()}})
	}
	return node, root, &plan.Plan{VFIO: []plan.Resource{r}}
}

// TestVFIOProbe: a GPU unbound from vfio-pci, or removed from the bus, is
// Unhealthy at the probe's next look, with its kind, and Healthy at the
// first look that finds it bound again; subscribers hear of each change
// and of nothing else. A GPU the plan no longer holds is not watched.
func TestVFIOProbe(t *testing.T) {
	node, root, p := vfioProbeNode(t)
	tr := newTracker(t, Options{Recovery: time.Hour})
	var notified atomic.Int32
	tr.Subscribe(func() { notified.Add(1) })
	probe := NewVFIOProbe(tr, root, time.Hour)
	if err := probe.Apply(context.Background(), nil, p); err != nil {
		t.Fatal(err)
	}
	if f := tr.Func(); f != nil || notified.Load() != 0 {
		t.Fatalf("every GPU bound: Func %v, %d notifications", f != nil, notified.Load())
	}
	dev := func(i int) *plan.Device { return &p.VFIO[0].Devices[i] }
	set := func(i int, s fakenode.VFIOState) {
		t.Helper()
		if err := node.SetVFIOState(i, s); err != nil {
			t.Fatal(err)
		}
		probe.probe()
	}

	set(1, fakenode.VFIOUnbound)
	set(2, fakenode.VFIORemoved)
	f := tr.Func()
	if f == nil || f(dev(0)) || !f(dev(1)) || !f(dev(2)) || f(dev(3)) {
		t.Fatalf("after unbinding GPU 1 and removing GPU 2: Func = %v", f != nil)
	}
	bad := tr.Unhealthy()
	if len(bad) != 2 || bad[0].Key != dev(1).GPUUUID || bad[0].Kind != discovery.EventVFIOUnbound || bad[1].Kind != discovery.EventVFIOGone {
		t.Errorf("Unhealthy = %+v", bad)
	}
	for kind, want := range map[discovery.HealthEventKind]float64{discovery.EventVFIOUnbound: 1, discovery.EventVFIOGone: 1, discovery.EventVFIONoGroupNode: 0} {
		if got := conditionGauge(t, tr, kind); got != want {
			t.Errorf("featureplug_plugin_unhealthy_conditions{kind=%q} = %v, want %v", kind, got, want)
		}
	}
	n := notified.Load()
	probe.probe() // nothing changed
	if notified.Load() != n {
		t.Errorf("a look that changed nothing notified")
	}

	set(1, fakenode.VFIOBound)
	set(2, fakenode.VFIOBound)
	if f := tr.Func(); f != nil {
		t.Errorf("after re-binding: some device still Unhealthy: %+v", tr.Unhealthy())
	}
	if notified.Load() != n+2 {
		t.Errorf("%d notifications for two recoveries", notified.Load()-n)
	}
	if got := conditionGauge(t, tr, discovery.EventVFIOUnbound); got != 0 {
		t.Errorf("featureplug_plugin_unhealthy_conditions{kind=vfio-unbound} = %v after re-binding", got)
	}

	// A plan without GPU 3: its removal is not the tracker's business.
	p2 := &plan.Plan{VFIO: []plan.Resource{{Name: p.VFIO[0].Name, Devices: p.VFIO[0].Devices[:3]}}}
	if err := probe.Apply(context.Background(), nil, p2); err != nil {
		t.Fatal(err)
	}
	set(3, fakenode.VFIORemoved)
	if f := tr.Func(); f != nil {
		t.Errorf("GPU 3 outside the plan is Unhealthy: %+v", tr.Unhealthy())
	}
}

// TestConditionBesideEvent: a device held by an event and by a condition
// stays Unhealthy until both end; conditions are not written to the state
// file.
func TestConditionBesideEvent(t *testing.T) {
	clk := healthtest.NewClock()
	dir := t.TempDir()
	tr := newTracker(t, Options{Recovery: time.Minute, Clock: clk, StateDir: statedir.Dir(dir)})
	d := &plan.Device{ID: "0000:47:00.0", Kind: plan.DeviceVFIO, GPUUUID: "0000:47:00.0"}
	tr.Record(discovery.HealthEvent{GPUUUID: d.GPUUUID, Kind: discovery.EventGPULost})
	tr.SetConditions("vfio", map[string]Condition{d.GPUUUID: {Kind: discovery.EventVFIOUnbound, Reason: "bound to no driver"}})
	clk.Advance(2 * time.Minute)
	if f := tr.Func(); f == nil || !f(d) {
		t.Fatal("the event's quiet period ended the condition's hold")
	}
	if got := tr.Unhealthy(); len(got) != 1 || got[0].Kind != discovery.EventVFIOUnbound {
		t.Errorf("Unhealthy = %+v", got)
	}
	tr.SetConditions("vfio", nil)
	if f := tr.Func(); f != nil {
		t.Error("still Unhealthy after the condition ended")
	}
	tr.Close()
	again := newTracker(t, Options{Recovery: time.Minute, Clock: clk, StateDir: statedir.Dir(dir)})
	if got := again.Unhealthy(); len(got) != 0 {
		t.Errorf("a restarted tracker holds %+v", got)
	}
}

// conditionGauge reads the conditions gauge's series of kind.
func conditionGauge(t *testing.T, tr *Tracker, kind discovery.HealthEventKind) float64 {
	t.Helper()
	var m dto.Metric
	if err := tr.metrics.conditions.WithLabelValues(string(kind)).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}
