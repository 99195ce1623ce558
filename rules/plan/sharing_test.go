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
		{SharingSpec{Strategy: SharingMPS, Replicas: ptr(2), MPS: &MPSSpec{ActiveThreadPercentage: ptr(101)}}, DeviceGPU, `sharing.mps.activeThreadPercentage: Invalid value: 101: must be between 0 and 100`},
		{SharingSpec{Strategy: SharingMPS, Replicas: ptr(2), MPS: &MPSSpec{ActiveThreadPercentage: ptr(-5)}}, DeviceGPU, `sharing.mps.activeThreadPercentage: Invalid value: -5: must be between 0 and 100`},
		{SharingSpec{Strategy: SharingMPS, Replicas: ptr(2), MPS: &MPSSpec{PinnedMemoryLimitMiB: ptr[int64](-5)}}, DeviceGPU, `sharing.mps.pinnedMemoryLimitMiB: Invalid value: -5: must be between 0 and 16777216`},
		{SharingSpec{Strategy: SharingMPS, Replicas: ptr(2), MPS: &MPSSpec{PinnedMemoryLimitMiB: ptr[int64](1 << 30)}}, DeviceGPU, `sharing.mps.pinnedMemoryLimitMiB: Invalid value: 1073741824: must be between 0 and 16777216`},
		{SharingSpec{Strategy: SharingMPS, Replicas: ptr(2), FailRequestsGreaterThanOne: ptr(false)}, DeviceGPU, `sharing.failRequestsGreaterThanOne: Invalid value: false: must be true for strategy mps`},
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
	wantMounts := []Mount{
		{ContainerPath: "/mps/example.com_mps/pipe", HostPath: "/mps/example.com_mps/pipe"},
		{ContainerPath: "/dev/shm", HostPath: "/mps/shm"},
	}
	if !slices.Equal(got.Mounts, wantMounts) {
		t.Errorf("mounts = %+v, want the pipe directory and the shared /dev/shm %+v", got.Mounts, wantMounts)
	}
	for _, name := range []SharingStrategy{SharingNone, SharingTimeSlicing} {
		if s, _ := Lookup(name); s.Container != nil {
			t.Errorf("strategy %s edits containers", name)
		}
	}
}

// TestCompileMPSDefaults checks the MPS semantics NVIDIA's device plugin
// has: 0 (or absent) per-replica limits mean the default, so the skeleton
// of the package documentation loads, and failRequestsGreaterThanOne is
// true for mps unless written, and may only be written true.
func TestCompileMPSDefaults(t *testing.T) {
	for _, tt := range []struct {
		name string
		spec SharingSpec
		want Sharing // after WithDefaults(40960)
	}{
		{"skeleton zeros", SharingSpec{Strategy: SharingMPS, Replicas: ptr(4), MPS: &MPSSpec{PinnedMemoryLimitMiB: ptr[int64](0), ActiveThreadPercentage: ptr(0)}},
			Sharing{Strategy: SharingMPS, Replicas: 4, FailRequestsGreaterThanOne: true, MPS: &MPSLimits{PinnedMemoryLimitMiB: 10240, ActiveThreadPercentage: 25}}},
		{"absent", SharingSpec{Strategy: SharingMPS, Replicas: ptr(4)},
			Sharing{Strategy: SharingMPS, Replicas: 4, FailRequestsGreaterThanOne: true, MPS: &MPSLimits{PinnedMemoryLimitMiB: 10240, ActiveThreadPercentage: 25}}},
		{"written true", SharingSpec{Strategy: SharingMPS, Replicas: ptr(2), FailRequestsGreaterThanOne: ptr(true), MPS: &MPSSpec{PinnedMemoryLimitMiB: ptr[int64](8000), ActiveThreadPercentage: ptr(100)}},
			Sharing{Strategy: SharingMPS, Replicas: 2, FailRequestsGreaterThanOne: true, MPS: &MPSLimits{PinnedMemoryLimitMiB: 8000, ActiveThreadPercentage: 100}}},
		{"time-slicing default false", SharingSpec{Strategy: SharingTimeSlicing, Replicas: ptr(4)},
			Sharing{Strategy: SharingTimeSlicing, Replicas: 4}},
		{"time-slicing written false", SharingSpec{Strategy: SharingTimeSlicing, Replicas: ptr(4), FailRequestsGreaterThanOne: ptr(false)},
			Sharing{Strategy: SharingTimeSlicing, Replicas: 4}},
		{"time-slicing written true", SharingSpec{Strategy: SharingTimeSlicing, Replicas: ptr(4), FailRequestsGreaterThanOne: ptr(true)},
			Sharing{Strategy: SharingTimeSlicing, Replicas: 4, FailRequestsGreaterThanOne: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, errs := tt.spec.Compile(field.NewPath("sharing"), DeviceGPU)
			if len(errs) > 0 {
				t.Fatalf("Compile = %v", errs.ToAggregate())
			}
			if got := s.WithDefaults(40960); !got.Equal(tt.want) {
				t.Errorf("Compile+WithDefaults = %+v (mps %+v), want %+v (mps %+v)", got, got.MPS, tt.want, tt.want.MPS)
			}
		})
	}
	// A plan that did not come from the rules still gets one replica per
	// MPS container, and the implied flag is not printed.
	s := Sharing{Strategy: SharingMPS, Replicas: 2}
	if !s.OneReplicaPerContainer() || !s.Same(Sharing{Strategy: SharingMPS, Replicas: 2, FailRequestsGreaterThanOne: true}) {
		t.Errorf("mps without the flag: OneReplicaPerContainer = %v, want true and the same as with it", s.OneReplicaPerContainer())
	}
	if got := s.String(); got != "mps x2" {
		t.Errorf("String = %q, want %q", got, "mps x2")
	}
	if (Sharing{Strategy: SharingTimeSlicing, Replicas: 2}).OneReplicaPerContainer() {
		t.Error("time-slicing without the flag allows one replica per container")
	}
}

// TestCheckDeviceMemory checks that a per-replica limit above a GPU's
// memory is refused with both values, and that the limit itself, no
// limit, and unknown memory pass.
func TestCheckDeviceMemory(t *testing.T) {
	s := Sharing{Strategy: SharingMPS, Replicas: 2, MPS: &MPSLimits{PinnedMemoryLimitMiB: 50000}}
	err := s.CheckDeviceMemory(40960)
	if err == nil || !strings.Contains(err.Error(), "50000 MiB") || !strings.Contains(err.Error(), "40960 MiB") {
		t.Errorf("CheckDeviceMemory(40960) = %v, want an error naming 50000 MiB and 40960 MiB", err)
	}
	for _, mem := range []uint64{50000, 81920, 0} {
		if err := s.CheckDeviceMemory(mem); err != nil {
			t.Errorf("CheckDeviceMemory(%d) = %v, want nil", mem, err)
		}
	}
	if err := (Sharing{Strategy: SharingMPS, Replicas: 2}).CheckDeviceMemory(1); err != nil {
		t.Errorf("no MPS limits: CheckDeviceMemory = %v", err)
	}
}
