package fakenode_test

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/fakenode"
)

// profileInfo returns GPU instance profile enum of dev.
func profileInfo(t *testing.T, dev nvml.Device, enum int) nvml.GpuInstanceProfileInfo {
	t.Helper()
	info, ret := dev.GetGpuInstanceProfileInfo(enum)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetGpuInstanceProfileInfo(%d): %v", enum, ret)
	}
	return info
}

// createStep is one GPU instance creation and what NVML answers.
type createStep struct {
	enum  int
	start int // -1: CreateGpuInstance, else CreateGpuInstanceWithPlacement
	ret   nvml.Return
	id    uint32 // GPU instance ID on success
}

// TestGPUInstanceCapacity creates GPU instances one after another on an
// empty MIG-enabled A100 and checks that NVML accepts exactly what the
// hardware holds.
func TestGPUInstanceCapacity(t *testing.T) {
	const (
		p1g   = nvml.GPU_INSTANCE_PROFILE_1_SLICE
		p1gme = nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1
		p1gw  = nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2
		p2g   = nvml.GPU_INSTANCE_PROFILE_2_SLICE
		p3g   = nvml.GPU_INSTANCE_PROFILE_3_SLICE
		p4g   = nvml.GPU_INSTANCE_PROFILE_4_SLICE
		p7g   = nvml.GPU_INSTANCE_PROFILE_7_SLICE
	)
	tests := []struct {
		name  string
		steps []createStep
	}{
		{"eighth 1g slice fails", []createStep{
			{p1g, -1, nvml.SUCCESS, 7}, {p1g, -1, nvml.SUCCESS, 8}, {p1g, -1, nvml.SUCCESS, 9},
			{p1g, -1, nvml.SUCCESS, 10}, {p1g, -1, nvml.SUCCESS, 11}, {p1g, -1, nvml.SUCCESS, 12},
			{p1g, -1, nvml.SUCCESS, 13}, {p1g, -1, nvml.ERROR_INSUFFICIENT_RESOURCES, 0},
		}},
		{"one 1g+me per GPU", []createStep{
			{p1gme, -1, nvml.SUCCESS, 7}, {p1gme, -1, nvml.ERROR_INSUFFICIENT_RESOURCES, 0}, {p1g, -1, nvml.SUCCESS, 8},
		}},
		{"7g takes the whole GPU", []createStep{
			{p7g, -1, nvml.SUCCESS, 0}, {p1g, -1, nvml.ERROR_INSUFFICIENT_RESOURCES, 0},
		}},
		{"7g does not fit next to a 1g", []createStep{
			{p1g, 6, nvml.SUCCESS, 13}, {p7g, -1, nvml.ERROR_INSUFFICIENT_RESOURCES, 0},
		}},
		{"4g plus 3g", []createStep{
			{p4g, -1, nvml.SUCCESS, 2}, {p3g, -1, nvml.SUCCESS, 1}, {p1g, -1, nvml.ERROR_INSUFFICIENT_RESOURCES, 0},
		}},
		{"three 2g and a 1g", []createStep{
			{p2g, -1, nvml.SUCCESS, 5}, {p2g, -1, nvml.SUCCESS, 4}, {p2g, -1, nvml.SUCCESS, 3},
			{p2g, -1, nvml.ERROR_INSUFFICIENT_RESOURCES, 0}, {p1g, -1, nvml.SUCCESS, 13},
		}},
		{"four wide 1g", []createStep{
			{p1gw, -1, nvml.SUCCESS, 5}, {p1gw, -1, nvml.SUCCESS, 4}, {p1gw, -1, nvml.SUCCESS, 3},
			{p1gw, -1, nvml.SUCCESS, 6}, {p1gw, -1, nvml.ERROR_INSUFFICIENT_RESOURCES, 0},
		}},
		{"placement taken", []createStep{
			{p3g, 4, nvml.SUCCESS, 1}, {p2g, 4, nvml.ERROR_INSUFFICIENT_RESOURCES, 0}, {p2g, 2, nvml.SUCCESS, 4},
		}},
		{"placement not offered", []createStep{
			{p3g, 2, nvml.ERROR_INVALID_ARGUMENT, 0}, {p2g, 1, nvml.ERROR_INVALID_ARGUMENT, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev, _ := migNode(t, "A100-SXM4-40GB").NVML().DeviceGetHandleByIndex(0)
			for i, s := range tt.steps {
				info := profileInfo(t, dev, s.enum)
				var gi nvml.GpuInstance
				var ret nvml.Return
				if s.start < 0 {
					gi, ret = dev.CreateGpuInstance(&info)
				} else {
					gi, ret = dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(s.start), Size: placementSize(t, dev, info)})
				}
				if ret != s.ret {
					t.Fatalf("step %d (profile %d): got %v, want %v", i, s.enum, ret, s.ret)
				}
				if ret != nvml.SUCCESS {
					continue
				}
				got, ret := gi.GetInfo()
				if ret != nvml.SUCCESS || got.Id != s.id || got.ProfileId != info.Id {
					t.Fatalf("step %d: GPU instance info %+v (%v), want ID %d profile %d", i, got, ret, s.id, info.Id)
				}
			}
		})
	}
}

// placementSize is the size of the profile's placements.
func placementSize(t *testing.T, dev nvml.Device, info nvml.GpuInstanceProfileInfo) uint32 {
	t.Helper()
	p, ret := dev.GetGpuInstancePossiblePlacements(&info)
	if ret != nvml.SUCCESS || len(p) == 0 {
		t.Fatalf("placements of profile %d: %v", info.Id, ret)
	}
	return p[0].Size
}

// TestPossiblePlacementsAndCapacity checks the static placements and the
// remaining capacity as instances are created.
func TestPossiblePlacementsAndCapacity(t *testing.T) {
	dev, _ := migNode(t, "H200-141GB").NVML().DeviceGetHandleByIndex(0)
	tests := []struct {
		enum   int
		starts []uint32
		size   uint32
	}{
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE, []uint32{0, 1, 2, 3, 4, 5, 6}, 1},
		{nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, []uint32{0, 2, 4, 6}, 2},
		{nvml.GPU_INSTANCE_PROFILE_2_SLICE, []uint32{0, 2, 4}, 2},
		{nvml.GPU_INSTANCE_PROFILE_3_SLICE, []uint32{0, 4}, 4},
		{nvml.GPU_INSTANCE_PROFILE_4_SLICE, []uint32{0}, 4},
		{nvml.GPU_INSTANCE_PROFILE_7_SLICE, []uint32{0}, 8},
	}
	for _, tt := range tests {
		info := profileInfo(t, dev, tt.enum)
		got, ret := dev.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS || len(got) != len(tt.starts) {
			t.Fatalf("profile %d: placements %v (%v), want starts %v", tt.enum, got, ret, tt.starts)
		}
		for i, p := range got {
			if p.Start != tt.starts[i] || p.Size != tt.size {
				t.Errorf("profile %d placement %d = %+v, want start %d size %d", tt.enum, i, p, tt.starts[i], tt.size)
			}
		}
	}
	oneSlice := profileInfo(t, dev, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	threeSlice := profileInfo(t, dev, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	for _, step := range []struct {
		create       *nvml.GpuInstanceProfileInfo
		want1, want3 int
	}{
		{nil, 7, 2},
		{&threeSlice, 3, 1},
		{&threeSlice, 0, 0},
	} {
		if step.create != nil {
			if _, ret := dev.CreateGpuInstance(step.create); ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
		}
		got1, _ := dev.GetGpuInstanceRemainingCapacity(&oneSlice)
		got3, _ := dev.GetGpuInstanceRemainingCapacity(&threeSlice)
		if got1 != step.want1 || got3 != step.want3 {
			t.Errorf("remaining capacity 1g %d, 3g %d; want %d, %d", got1, got3, step.want1, step.want3)
		}
	}
}

// TestMIGLifecycle creates and destroys GPU and compute instances through
// NVML and checks the MIG device handles that follow.
func TestMIGLifecycle(t *testing.T) {
	n := migNode(t, "A100-SXM4-80GB")
	lib := n.NVML()
	dev, _ := lib.DeviceGetHandleByIndex(0)

	if count, ret := dev.GetMaxMigDeviceCount(); count != 7 || ret != nvml.SUCCESS {
		t.Fatalf("GetMaxMigDeviceCount = %d, %v; want 7", count, ret)
	}
	if _, ret := dev.GetMigDeviceHandleByIndex(0); ret != nvml.ERROR_NOT_FOUND {
		t.Fatalf("MIG device 0 of an empty GPU: %v, want ERROR_NOT_FOUND", ret)
	}
	info := profileInfo(t, dev, nvml.GPU_INSTANCE_PROFILE_7_SLICE)
	gi, ret := dev.CreateGpuInstance(&info)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	ci2, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE, 0)
	ci3, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, 0)
	if ci2.SliceCount != 2 || ci2.MultiprocessorCount != 28 || ci2.InstanceCount != 3 {
		t.Errorf("2-slice compute instance profile = %+v", ci2)
	}
	if _, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE, 0); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("6-slice compute instance profile: %v, want ERROR_NOT_SUPPORTED", ret)
	}
	a, _ := gi.CreateComputeInstance(&ci2)
	b, _ := gi.CreateComputeInstance(&ci3)
	if _, ret := gi.CreateComputeInstance(&ci3); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("third compute instance: %v, want ERROR_INSUFFICIENT_RESOURCES", ret)
	}
	if left, _ := gi.GetComputeInstanceRemainingCapacity(&ci2); left != 1 {
		t.Errorf("remaining 2-slice compute instances = %d, want 1", left)
	}
	if ret := gi.Destroy(); ret != nvml.ERROR_IN_USE {
		t.Errorf("destroying a GPU instance with compute instances: %v, want ERROR_IN_USE", ret)
	}

	m1, ret := dev.GetMigDeviceHandleByIndex(1)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	attrs, _ := m1.GetAttributes()
	want := nvml.DeviceAttributes{MultiprocessorCount: 42, SharedCopyEngineCount: 7, SharedDecoderCount: 5, SharedJpegCount: 1,
		SharedOfaCount: 1, GpuInstanceSliceCount: 7, ComputeInstanceSliceCount: 3, MemorySizeMB: 80384}
	if attrs != want {
		t.Errorf("attributes = %+v, want %+v", attrs, want)
	}
	if idx, _ := m1.GetIndex(); idx != 1 {
		t.Errorf("MIG device index = %d, want 1", idx)
	}
	uuid, _ := m1.GetUUID()
	if h, ret := lib.DeviceGetHandleByUUID(uuid); ret != nvml.SUCCESS || h != m1 {
		t.Errorf("DeviceGetHandleByUUID(%s) = %v, %v; want the MIG device", uuid, h, ret)
	}
	if parent, _ := m1.GetDeviceHandleFromMigDeviceHandle(); parent != dev {
		t.Errorf("parent of the MIG device is %v, want GPU 0", parent)
	}

	if ret := a.Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if idx, _ := m1.GetIndex(); idx != 0 {
		t.Errorf("after destroying compute instance 0, MIG device index = %d, want 0", idx)
	}
	if ret := b.Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := m1.GetUUID(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("UUID of a destroyed MIG device: %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if mode, _ := dev.SetMigMode(nvml.DEVICE_MIG_DISABLE); mode != nvml.SUCCESS {
		t.Fatalf("disabling MIG: %v", mode)
	}
	if count, _ := dev.GetMaxMigDeviceCount(); count != 0 {
		t.Errorf("GetMaxMigDeviceCount with MIG disabled = %d, want 0", count)
	}
	if _, ret := dev.CreateGpuInstance(&info); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("creating a GPU instance with MIG disabled: %v, want ERROR_NOT_SUPPORTED (nvml.h)", ret)
	}
}

// TestNotMIGCapable checks what a GPU without MIG answers.
func TestNotMIGCapable(t *testing.T) {
	n, err := fakenode.Named("workstation")
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := n.NVML().DeviceGetHandleByIndex(0)
	if _, _, ret := dev.GetMigMode(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GetMigMode: %v, want ERROR_NOT_SUPPORTED", ret)
	}
	if _, ret := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GetGpuInstanceProfileInfo: %v, want ERROR_NOT_SUPPORTED", ret)
	}
	if _, ret := dev.GetMaxMigDeviceCount(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GetMaxMigDeviceCount: %v, want ERROR_NOT_SUPPORTED", ret)
	}
}
