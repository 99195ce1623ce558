package health

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/statedir"
	"github.com/featureplug/featureplug/plugin/health/healthtest"
	"github.com/featureplug/featureplug/rules/plan"
)

// unhealthyKeys returns the keys tr holds Unhealthy.
func unhealthyKeys(tr *Tracker) []string {
	var out []string
	for _, d := range tr.Unhealthy() {
		out = append(out, d.Key)
	}
	return out
}

// TestResolutionClasses: each effect of the default policy does what the
// catalog says, ended by what NVML shows and not by time: XID 94 is
// counted and leaves the GPU Healthy; XID 109 with a reset pending holds
// it until the reset is seen (EventResetCleared), also for its MIG
// devices; XID 79 holds it until a new boot, which a reset does not end.
func TestResolutionClasses(t *testing.T) {
	clock := healthtest.NewClock()
	dir := statedir.Dir(t.TempDir())
	tr := newTracker(t, Options{Recovery: time.Minute, StateDir: dir, Clock: clock, BootID: "boot-1"})
	xid := func(gpu, mig string, n uint64, pending bool) {
		tr.Record(discovery.HealthEvent{GPUUUID: gpu, MIGUUID: mig, Kind: discovery.EventXID, XID: n, ResetPending: pending})
	}
	cleared := func(gpu string) {
		tr.Record(discovery.HealthEvent{GPUUUID: gpu, Kind: discovery.EventResetCleared})
	}

	xid("GPU-a", "", 94, false)
	if got := unhealthyKeys(tr); len(got) != 0 {
		t.Errorf("XID 94 made %v Unhealthy; the catalog restarts the application only", got)
	}
	if got := counter(t, tr.metrics.events, "xid", "94", "count"); got != 1 {
		t.Errorf("health_events_total{xid=94,effect=count} = %v, want 1", got)
	}

	xid("GPU-b", "", 109, true)
	xid("GPU-c", "MIG-c1", 109, true)
	xid("GPU-d", "", 79, false)
	clock.Advance(24 * time.Hour)
	if got, want := unhealthyKeys(tr), []string{"GPU-b", "GPU-d", "MIG-c1"}; !slices.Equal(got, want) {
		t.Fatalf("a day later: %v, want %v (time ends neither a reset nor a reboot hold)", got, want)
	}
	if d := tr.Unhealthy()[0]; d.Effect != discovery.EffectUntilReset || d.Reason != "xid-109" || !d.Until.IsZero() || d.WaitsFor == "" {
		t.Errorf("GPU-b: %+v, want until-reset, reason xid-109, no deadline", d)
	}
	cleared("GPU-b")
	cleared("GPU-c")
	cleared("GPU-d")
	if got, want := unhealthyKeys(tr), []string{"GPU-d"}; !slices.Equal(got, want) {
		t.Errorf("after the resets: %v, want %v (a reset does not end a reboot hold)", got, want)
	}

	same := newTracker(t, Options{Recovery: time.Minute, StateDir: dir, Clock: clock, BootID: "boot-1"})
	if got := unhealthyKeys(same); !slices.Equal(got, []string{"GPU-d"}) {
		t.Errorf("restarted in the same boot: %v, want GPU-d", got)
	}
	rebooted := newTracker(t, Options{Recovery: time.Minute, StateDir: dir, Clock: clock, BootID: "boot-2"})
	if got := unhealthyKeys(rebooted); len(got) != 0 {
		t.Errorf("restarted after a reboot: %v, want none", got)
	}
}

// TestResetHoldSurvivesRestart: XID 48 followed by pending retired pages
// holds the GPU until its reset across a restart; without NVML's evidence
// of a pending reset, the same XID is held for the quiet period only.
func TestResetHoldSurvivesRestart(t *testing.T) {
	clock := healthtest.NewClock()
	dir := statedir.Dir(t.TempDir())
	tr := newTracker(t, Options{Recovery: time.Minute, StateDir: dir, Clock: clock})
	tr.Record(discovery.HealthEvent{GPUUUID: "GPU-a", Kind: discovery.EventXID, XID: 48, ResetPending: true})
	tr.Record(discovery.HealthEvent{GPUUUID: "GPU-a", Kind: discovery.EventRetiredPagesPending, ResetPending: true})
	tr.Record(discovery.HealthEvent{GPUUUID: "GPU-b", Kind: discovery.EventXID, XID: 48})
	tr.Close()

	clock.Advance(time.Hour)
	restarted := newTracker(t, Options{Recovery: time.Minute, StateDir: dir, Clock: clock})
	got := restarted.Unhealthy()
	if len(got) != 1 || got[0].Key != "GPU-a" || got[0].Effect != discovery.EffectUntilReset {
		t.Fatalf("an hour after a restart: %+v, want GPU-a until-reset (GPU-b's quiet period passed)", got)
	}
	if got[0].Reason != "retired-pages-pending" {
		t.Errorf("GPU-a's reason %q, want the latest event's, retired-pages-pending", got[0].Reason)
	}
	restarted.Record(discovery.HealthEvent{GPUUUID: "GPU-a", Kind: discovery.EventResetCleared})
	if got := unhealthyKeys(restarted); len(got) != 0 {
		t.Errorf("after the reset: %v", got)
	}
}

// TestPolicyOverride: the node's policy (SetPolicy) changes what the
// events to come do; holds taken before keep what they wait for.
func TestPolicyOverride(t *testing.T) {
	clock := healthtest.NewClock()
	tr := newTracker(t, Options{Recovery: time.Minute, Clock: clock})
	tr.Record(discovery.HealthEvent{GPUUUID: "GPU-a", Kind: discovery.EventXID, XID: 61})
	q := discovery.Period(time.Hour)
	tr.SetPolicy(&discovery.HealthPolicy{XIDs: map[uint64]discovery.HealthEffect{94: discovery.EffectUntilQuiet}, QuietPeriod: &q})
	tr.Record(discovery.HealthEvent{GPUUUID: "GPU-b", Kind: discovery.EventXID, XID: 94})
	clock.Advance(time.Minute)
	if got := unhealthyKeys(tr); !slices.Equal(got, []string{"GPU-b"}) {
		t.Errorf("a minute later: %v, want GPU-b (XID 94 held an hour by the override; GPU-a kept its minute)", got)
	}
	tr.SetPolicy(nil)
	tr.Record(discovery.HealthEvent{GPUUUID: "GPU-c", Kind: discovery.EventXID, XID: 94})
	if got := unhealthyKeys(tr); !slices.Equal(got, []string{"GPU-b"}) {
		t.Errorf("without the override: %v, want GPU-b only", got)
	}
}

// TestNVMLFence: while NVML fails, every device of the GPUs it cannot
// reach is Unhealthy with the reason nvml-unavailable, also the devices
// already held; when it answers they are Healthy again, except those a
// hold keeps. A policy without the fence leaves them Healthy.
func TestNVMLFence(t *testing.T) {
	clock := healthtest.NewClock()
	tr := newTracker(t, Options{Recovery: time.Hour, Clock: clock})
	tr.Record(discovery.HealthEvent{GPUUUID: "GPU-a", Kind: discovery.EventXID, XID: 61})
	tr.NVMLFailing([]string{"GPU-a", "GPU-b"}, errors.New("ERROR_UNKNOWN"))
	got := tr.Unhealthy()
	if len(got) != 2 || got[1].Key != "GPU-b" || got[1].Reason != ReasonNVMLUnavailable || got[1].WaitsFor != "NVML answering again" {
		t.Fatalf("NVML failing: %+v, want GPU-a and GPU-b, GPU-b nvml-unavailable", got)
	}
	if since, err := tr.NVMLFailure(); err == nil || !since.Equal(clock.Now()) {
		t.Errorf("NVMLFailure() = %v, %v", since, err)
	}
	tr.NVMLAnswers()
	if got := unhealthyKeys(tr); !slices.Equal(got, []string{"GPU-a"}) {
		t.Errorf("NVML answering: %v, want GPU-a (its hold)", got)
	}
	off := false
	tr.SetPolicy(&discovery.HealthPolicy{FenceOnNVMLFailure: &off})
	tr.NVMLFailing([]string{"GPU-b"}, errors.New("ERROR_UNKNOWN"))
	if got := unhealthyKeys(tr); !slices.Equal(got, []string{"GPU-a"}) {
		t.Errorf("NVML failing without the fence: %v, want GPU-a only", got)
	}
	tr.SetPolicy(nil) // the fence is back, at once
	if got := unhealthyKeys(tr); !slices.Equal(got, []string{"GPU-a", "GPU-b"}) {
		t.Errorf("fence back on: %v", got)
	}
}

// TestDeviceHealthMetric: featureplug_device_health has one series per
// device of the plan, 1 with reason healthy or 0 with the bounded reason
// of what holds it, also for a MIG device held through its GPU.
func TestDeviceHealthMetric(t *testing.T) {
	clock := healthtest.NewClock()
	reg := prometheus.NewRegistry()
	tr := newTracker(t, Options{Recovery: time.Minute, Clock: clock, Registerer: reg})
	tr.SetPlan(&plan.Plan{Resources: []plan.Resource{
		{Name: "nvidia.com/gpu", Devices: []plan.Device{
			{ID: "GPU-a", GPUUUID: "GPU-a", Kind: plan.DeviceGPU}, {ID: "GPU-b", GPUUUID: "GPU-b", Kind: plan.DeviceGPU}}},
		{Name: "nvidia.com/mig-1g.10gb", Devices: []plan.Device{
			{ID: "MIG-c0", GPUUUID: "GPU-c", Kind: plan.DeviceMIG}, {ID: "MIG-c1", GPUUUID: "GPU-c", Kind: plan.DeviceMIG}}},
	}})
	tr.Record(discovery.HealthEvent{GPUUUID: "GPU-b", Kind: discovery.EventXID, XID: 61})
	tr.Record(discovery.HealthEvent{GPUUUID: "GPU-c", MIGUUID: "MIG-c1", Kind: discovery.EventXID, XID: 4242})
	tr.NVMLFailing([]string{"GPU-a"}, errors.New("ERROR_UNKNOWN"))
	tr.NVMLAnswers()
	tr.Record(discovery.HealthEvent{GPUUUID: "GPU-c", Kind: discovery.EventECCDoubleBit})

	want := map[string]string{
		"nvidia.com/gpu GPU-a healthy":                 "1",
		"nvidia.com/gpu GPU-b xid-61":                  "0",
		"nvidia.com/mig-1g.10gb MIG-c0 ecc-double-bit": "0",
		"nvidia.com/mig-1g.10gb MIG-c1 xid-other":      "0",
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		if mf.GetName() != "featureplug_device_health" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			got[l["resource"]+" "+l["device"]+" "+l["reason"]] = fmt.Sprint(m.GetGauge().GetValue())
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("featureplug_device_health:\n got %v\nwant %v", got, want)
	}
	states := tr.DeviceHealth()
	if len(states) != 4 || states[1].Device.Effect != discovery.EffectUntilQuiet || states[1].Device.Until.IsZero() || states[1].Device.Message == "" {
		t.Errorf("DeviceHealth()[1] = %+v, want GPU-b until-quiet with a deadline and a message", states[1])
	}
}
