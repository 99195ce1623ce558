package plan

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestStrategyTable checks what each strategy of the table says, as every
// consumer reads it.
func TestStrategyTable(t *testing.T) {
	var names []SharingStrategy
	for _, s := range Strategies() {
		names = append(names, s.Name)
		if s.Label == "" {
			t.Errorf("strategy %s has no label", s.Name)
		}
		if s.Daemon && !s.WholeGPUOnly {
			t.Errorf("strategy %s needs an MPS daemon but allows MIG devices", s.Name)
		}
	}
	if want := []SharingStrategy{SharingNone, SharingTimeSlicing, SharingMPS}; !slices.Equal(names, want) {
		t.Errorf("strategies = %v, want %v", names, want)
	}
	if s, ok := Lookup(""); !ok || s.Name != SharingNone {
		t.Errorf(`Lookup("") = %+v, %v, want none`, s, ok)
	}
	if _, ok := Lookup("exclusive"); ok {
		t.Error(`Lookup("exclusive") found a strategy`)
	}
	for _, tt := range []struct {
		s            Sharing
		replicas     int
		label        string
		deviceCopies int
	}{
		{Sharing{}, 1, "none", 1},
		{Sharing{Strategy: SharingTimeSlicing, Replicas: 4}, 4, "time-slicing", 4},
		{Sharing{Strategy: SharingTimeSlicing, Replicas: 1}, 1, "none", 1},
		{Sharing{Strategy: SharingMPS, Replicas: 2}, 2, "mps", 2},
		{Sharing{Strategy: "unknown", Replicas: 3}, 3, "none", 1},
	} {
		if r, l := tt.s.Label(); r != tt.replicas || l != tt.label {
			t.Errorf("%v.Label() = %d, %q, want %d, %q", tt.s, r, l, tt.replicas, tt.label)
		}
		if n := tt.s.DeviceReplicas(); n != tt.deviceCopies {
			t.Errorf("%v.DeviceReplicas() = %d, want %d", tt.s, n, tt.deviceCopies)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestCompileErrors checks that Compile names the field and value of each
// mistake.
func TestCompileErrors(t *testing.T) {
	for _, tt := range []struct {
		spec SharingSpec
		kind DeviceKind
		want string
	}{
		{SharingSpec{Strategy: "exclusive"}, DeviceGPU, `sharing.strategy: Invalid value: "exclusive": must be "none", "time-slicing" or "mps"`},
		{SharingSpec{Strategy: SharingMPS, Replicas: ptr(2)}, DeviceMIG, `sharing.strategy: Invalid value: "mps": mps is only for devices: gpu`},
		{SharingSpec{Strategy: SharingTimeSlicing}, DeviceGPU, `sharing.replicas: Required value: required for strategy time-slicing`},
		{SharingSpec{Strategy: SharingNone, Replicas: ptr(2)}, DeviceGPU, `sharing.replicas: Invalid value: 2: strategy none shares nothing: set strategy time-slicing or mps, or replicas 1`},
		{SharingSpec{Strategy: SharingTimeSlicing, Replicas: ptr(2000)}, DeviceGPU, `sharing.replicas: Invalid value: 2000: must be at most 1024 (plan.MaxReplicas)`},
		{SharingSpec{Strategy: SharingTimeSlicing, Replicas: ptr(2), MPS: &MPSSpec{}}, DeviceGPU, `sharing.mps: Forbidden: only for strategy mps (have strategy time-slicing)`},
		{SharingSpec{Strategy: SharingMPS, Replicas: ptr(2), MPS: &MPSSpec{ActiveThreadPercentage: ptr(101)}}, DeviceGPU, `sharing.mps.activeThreadPercentage: Invalid value: 101: must be between 1 and 100`},
	} {
		_, errs := tt.spec.Compile(field.NewPath("sharing"), tt.kind)
		if err := errs.ToAggregate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Compile(%+v) = %v, want %q", tt.spec, err, tt.want)
		}
	}
	s, errs := (&SharingSpec{Strategy: SharingMPS, Replicas: ptr(4)}).Compile(field.NewPath("sharing"), DeviceGPU)
	if len(errs) > 0 || s.MPS == nil {
		t.Fatalf("Compile(mps x4) = %+v, %v", s, errs)
	}
	if got := s.WithDefaults(40960); got.MPS.PinnedMemoryLimitMiB != 10240 || got.MPS.ActiveThreadPercentage != 25 {
		t.Errorf("WithDefaults = %+v, want 10240 MiB and 25%%", *got.MPS)
	}
}

// TestMPSContainer checks the container edits of the mps strategy.
func TestMPSContainer(t *testing.T) {
	spec, _ := Lookup(SharingMPS)
	got := spec.Container(Allocation{
		Resource: "example.com/mps",
		Sharing:  Sharing{Strategy: SharingMPS, Replicas: 4},
		Devices:  []AllocatedDevice{{MemoryMiB: 40960, Replicas: 2}, {MemoryMiB: 81920, Replicas: 1}},
		MPS:      MPSLayout{Root: "/mps"},
	})
	want := map[string]string{
		EnvMPSPipeDirectory:          "/mps/example.com_mps/pipe",
		EnvMPSActiveThreadPercentage: "50",
		EnvMPSPinnedDeviceMemLimit:   "0=20480M,1=20480M",
	}
	if !maps.Equal(got.Env, want) {
		t.Errorf("env = %v, want %v", got.Env, want)
	}
	if len(got.Mounts) != 1 || got.Mounts[0] != (Mount{ContainerPath: "/mps/example.com_mps/pipe", HostPath: "/mps/example.com_mps/pipe"}) {
		t.Errorf("mounts = %+v, want the pipe directory", got.Mounts)
	}
	for _, name := range []SharingStrategy{SharingNone, SharingTimeSlicing} {
		if s, _ := Lookup(name); s.Container != nil {
			t.Errorf("strategy %s edits containers", name)
		}
	}
}
