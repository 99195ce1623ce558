package agent

import (
	"reflect"
	"testing"

	"github.com/featureplug/featureplug/plugin/mps"
	"github.com/featureplug/featureplug/rules/plan"
)

func TestMPSDaemons(t *testing.T) {
	p := &plan.Plan{Resources: []plan.Resource{
		{Name: "nvidia.com/gpu", Devices: []plan.Device{{ID: "GPU-a", GPUUUID: "GPU-a", GPUIndex: 0}}},
		{
			Name: "example.com/gpu.mps",
			Sharing: plan.Sharing{Strategy: plan.SharingMPS, Replicas: 4,
				MPS: &plan.MPSLimits{PinnedMemoryLimitMiB: 20000, ActiveThreadPercentage: 25}},
			Devices: []plan.Device{{ID: "GPU-b", GPUUUID: "GPU-b", GPUIndex: 1}, {ID: "GPU-c", GPUUUID: "GPU-c", GPUIndex: 2}},
		},
		{Name: "example.com/ts", Sharing: plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 2},
			Devices: []plan.Device{{ID: "GPU-d", GPUUUID: "GPU-d", GPUIndex: 3}}},
	}}
	want := []mps.Daemon{{
		Resource:               "example.com/gpu.mps",
		ActiveThreadPercentage: 25,
		Devices: []mps.Device{
			{UUID: "GPU-b", Index: 1, PinnedMemoryLimitMiB: 20000},
			{UUID: "GPU-c", Index: 2, PinnedMemoryLimitMiB: 20000},
		},
	}}
	if got := mpsDaemons(p); !reflect.DeepEqual(got, want) {
		t.Errorf("mpsDaemons = %+v\nwant %+v", got, want)
	}
	if got := mpsDaemons(&plan.Plan{}); got != nil {
		t.Errorf("mpsDaemons of an empty plan = %+v", got)
	}
}

func TestMPSGate(t *testing.T) {
	sup, err := mps.New(mps.Options{Root: t.TempDir(), ControlBinary: "/nonexistent/nvidia-cuda-mps-control"})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Stop()
	a := &devicePluginSink{mps: sup}
	if ok, _ := a.mpsGate("example.com/gpu.mps"); !ok {
		t.Error("the gate holds back a resource before any plan is served")
	}
	a.served.Store(&plan.Plan{Resources: []plan.Resource{
		{Name: "nvidia.com/gpu"},
		{Name: "example.com/gpu.mps", Sharing: plan.Sharing{Strategy: plan.SharingMPS, Replicas: 2}},
	}})
	if ok, reason := a.mpsGate("nvidia.com/gpu"); !ok {
		t.Errorf("the gate holds back a resource without MPS: %s", reason)
	}
	if ok, reason := a.mpsGate("example.com/gpu.mps"); ok || reason == "" {
		t.Errorf("the gate lets an MPS resource without a daemon through (reason %q)", reason)
	}
}

// TestMPSHeldLogsTransitions: an MPS resource held back is reported when
// holding back starts, when its reason changes and when it ends, not at
// every plan while its daemon stays down; a resource that left the plan
// and comes back held is reported again.
func TestMPSHeldLogsTransitions(t *testing.T) {
	var h mpsHeld
	steps := []struct {
		held   bool
		reason string
		want   bool
	}{
		{false, "", false},                       // served from the start: nothing to say
		{true, "daemon starting", true},          // held back
		{true, "daemon starting", false},         // the next plan, same reason
		{true, "daemon exited: status 1", true},  // another reason
		{true, "daemon exited: status 1", false}, // and again
		{false, "", true},                        // served again
		{false, "", false},                       // still served
		{true, "daemon exited: status 1", true},  // held back again
	}
	for i, s := range steps {
		if got := h.note("example.com/mps", s.held, s.reason); got != s.want {
			t.Errorf("step %d (held %v, %q): changed = %v, want %v", i, s.held, s.reason, got, s.want)
		}
	}
	h.keep(nil) // the resource left the plan
	if !h.note("example.com/mps", true, "daemon exited: status 1") {
		t.Error("a resource back in the plan, held, was not reported")
	}
}
