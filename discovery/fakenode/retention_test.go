package fakenode_test

import (
	"runtime"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/fakenode"
)

// retentionCalls is how many times TestCallsRetainNothing makes each call:
// enough that a record of 16 bytes per call (an interface argument) would
// retain 1.6 MB, far above the test's bound and the heap's noise.
const retentionCalls = 100_000

// retentionLimit bounds the live heap a node may gain from
// retentionCalls × len(calls) NVML calls: the fake keeps no per-call state.
const retentionLimit = 512 << 10

// retentionHeap returns the live heap after a full collection.
func retentionHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestCallsRetainNothing makes many NVML calls through a fake node's
// library and handles, both forwarded (DeviceGetName(gpu)) and unsupported
// ones, and checks that the live heap does not grow with the number of
// calls: a process that runs a fake node for days (featureplug demo, the
// scale test's agents) must not keep a record of every call it made.
func TestCallsRetainNothing(t *testing.T) {
	n, err := fakenode.Named("a100-80gb-mixed")
	if err != nil {
		t.Fatal(err)
	}
	lib := n.NVML()
	gpu, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	mig, ret := gpu.GetMigDeviceHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	giID, _ := mig.GetGpuInstanceId()
	gi, ret := gpu.GetGpuInstanceById(giID)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	calls := []struct {
		name string
		call func() nvml.Return
		want nvml.Return
	}{
		{"Interface.DeviceGetName", func() nvml.Return { _, r := lib.DeviceGetName(gpu); return r }, nvml.SUCCESS},
		{"Interface.DeviceGetTemperature", func() nvml.Return { _, r := lib.DeviceGetTemperature(gpu, nvml.TEMPERATURE_GPU); return r }, nvml.ERROR_NOT_SUPPORTED},
		{"Device.GetClockInfo", func() nvml.Return { _, r := gpu.GetClockInfo(nvml.CLOCK_SM); return r }, nvml.ERROR_NOT_SUPPORTED},
		{"MIGDevice.GetClockInfo", func() nvml.Return { _, r := mig.GetClockInfo(nvml.CLOCK_SM); return r }, nvml.ERROR_NOT_SUPPORTED},
		{"GpuInstance.CreateComputeInstanceWithPlacement", func() nvml.Return {
			_, r := gi.CreateComputeInstanceWithPlacement(nil, nil)
			return r
		}, nvml.ERROR_NOT_SUPPORTED},
	}
	// One round first, so that lazily built state is not counted.
	for _, c := range calls {
		if got := c.call(); got != c.want {
			t.Fatalf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	before := retentionHeap()
	for _, c := range calls {
		for range retentionCalls {
			if got := c.call(); got != c.want {
				t.Fatalf("%s = %v, want %v", c.name, got, c.want)
			}
		}
	}
	after := retentionHeap()
	runtime.KeepAlive(n)
	if after > before && after-before > retentionLimit {
		t.Errorf("live heap grew by %d bytes over %d calls (limit %d): the fake keeps per-call state",
			after-before, retentionCalls*len(calls), retentionLimit)
	}
	t.Logf("live heap %d -> %d bytes over %d calls", before, after, retentionCalls*len(calls))
}
