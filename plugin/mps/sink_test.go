package mps

import (
	"context"
	"reflect"
	"testing"

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
	want := []Daemon{{
		Resource:               "example.com/gpu.mps",
		ActiveThreadPercentage: 25,
		Devices: []Device{
			{UUID: "GPU-b", Index: 1, PinnedMemoryLimitMiB: 20000},
			{UUID: "GPU-c", Index: 2, PinnedMemoryLimitMiB: 20000},
		},
	}}
	if got := Daemons(p); !reflect.DeepEqual(got, want) {
		t.Errorf("mpsDaemons = %+v\nwant %+v", got, want)
	}
	if got := Daemons(&plan.Plan{}); got != nil {
		t.Errorf("mpsDaemons of an empty plan = %+v", got)
	}
}

// TestSinkReady: the Allocate gate lets through every resource but an MPS
// resource of the plan applied last whose daemon is not up.
func TestSinkReady(t *testing.T) {
	s, err := NewSink(Options{Root: t.TempDir(), ControlBinary: "/nonexistent/nvidia-cuda-mps-control"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.sup.Stop()
	if ok, _ := s.Ready("example.com/gpu.mps"); !ok {
		t.Error("the gate holds back a resource before any plan is applied")
	}
	p := &plan.Plan{Resources: []plan.Resource{
		{Name: "nvidia.com/gpu", Devices: []plan.Device{{ID: "GPU-a", GPUUUID: "GPU-a"}}},
		{Name: "example.com/gpu.mps", Sharing: plan.Sharing{Strategy: plan.SharingMPS, Replicas: 2},
			Devices: []plan.Device{{ID: "GPU-b", GPUUUID: "GPU-b"}}},
	}}
	if err := s.Apply(context.Background(), nil, p); err != nil {
		t.Fatal(err)
	}
	if ok, reason := s.Ready("nvidia.com/gpu"); !ok {
		t.Errorf("the gate holds back a resource without MPS: %s", reason)
	}
	if ok, reason := s.Ready("example.com/gpu.mps"); ok || reason == "" {
		t.Errorf("the gate lets an MPS resource without a daemon through (reason %q)", reason)
	}
	held := s.Hold(p)
	if len(held) != 1 || held["example.com/gpu.mps"] == "" {
		t.Errorf("Hold = %v, want the MPS resource alone, with why", held)
	}
}

// TestMPSHeldLogsTransitions: an MPS resource held back is reported when
// holding back starts, when its reason changes and when it ends, not at
// every plan while its daemon stays down; a resource that left the plan
// and comes back held is reported again.
func TestMPSHeldLogsTransitions(t *testing.T) {
	var h heldLog
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

// TestMPSCDIEdits: only a device of an MPS resource served through DRA
// gets MPS edits in its CDI entry, the per-client limits of one replica
// (the rule's, or the device's share when the rule gives none); the
// device plugin adds its own edits to the others.
func TestMPSCDIEdits(t *testing.T) {
	s, err := NewSink(Options{Root: "/run/mps-test", ControlBinary: "/nonexistent/nvidia-cuda-mps-control"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.sup.Stop()
	edits := s.CDIEdits
	dev := plan.Device{ID: "GPU-a", GPUUUID: "GPU-a", MemoryMiB: 81920}
	mpsSharing := plan.Sharing{Strategy: plan.SharingMPS, Replicas: 4}
	pipe := "/run/mps-test/example.com_a/pipe"
	for _, tt := range []struct {
		name string
		r    plan.Resource
		env  map[string]string
	}{
		{"MPS through DRA", plan.Resource{Name: "example.com/a", Serve: plan.ServeDRA, Sharing: mpsSharing},
			map[string]string{"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20480M"}},
		{"MPS through the device plugin", plan.Resource{Name: "example.com/a", Serve: plan.ServeDevicePlugin, Sharing: mpsSharing}, nil},
		{"time-slicing through DRA", plan.Resource{Name: "example.com/a", Serve: plan.ServeDRA,
			Sharing: plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 4}}, nil},
		{"unshared through DRA", plan.Resource{Name: "example.com/a", Serve: plan.ServeDRA}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := edits(&tt.r, dev)
			if len(got.Env) != len(tt.env) {
				t.Errorf("env %v, want %v", got.Env, tt.env)
			}
			for k, v := range tt.env {
				if got.Env[k] != v {
					t.Errorf("env %s=%q, want %q", k, got.Env[k], v)
				}
			}
			wantMounts := 0
			if tt.env != nil {
				wantMounts = 2
			}
			if len(got.Mounts) != wantMounts {
				t.Errorf("mounts %+v, want %d", got.Mounts, wantMounts)
			}
		})
	}
}
