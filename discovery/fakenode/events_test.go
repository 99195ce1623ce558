package fakenode_test

import (
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/fakenode"
)

// listen registers a new event set for the given types on every GPU of n.
func listen(t *testing.T, n *fakenode.Node, types uint64) nvml.EventSet {
	t.Helper()
	lib := n.NVML()
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	count, _ := lib.DeviceGetCount()
	for i := range count {
		dev, _ := lib.DeviceGetHandleByIndex(i)
		supported, ret := dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS || supported&types != types {
			t.Fatalf("GPU %d supports events %#x (%v), want %#x", i, supported, ret, types)
		}
		if ret := dev.RegisterEvents(types, set); ret != nvml.SUCCESS {
			t.Fatalf("RegisterEvents on GPU %d: %v", i, ret)
		}
	}
	return set
}

// freeSet frees an event set.
func freeSet(t *testing.T, set nvml.EventSet) {
	t.Helper()
	if ret := set.Free(); ret != nvml.SUCCESS {
		t.Errorf("Free: %v", ret)
	}
}

// TestInjectedEvents checks that injected events arrive through
// EventSet.Wait as NVML reports them.
func TestInjectedEvents(t *testing.T) {
	const none = 0xFFFFFFFF
	tests := []struct {
		name     string
		inject   func(*fakenode.Node) error
		gpu      int
		typ      uint64
		data     uint64
		gi, ci   uint32
		listenOn uint64
	}{
		{"XID on a GPU", func(n *fakenode.Node) error { return n.InjectXID(5, 79) }, 5, nvml.EventTypeXidCriticalError, 79, none, none, nvml.EventTypeXidCriticalError},
		{"XID on a MIG device", func(n *fakenode.Node) error { return n.InjectMIGXID(0, 9, 0, 48) }, 0, nvml.EventTypeXidCriticalError, 48, 9, 0, nvml.EventTypeXidCriticalError},
		{"double-bit ECC", func(n *fakenode.Node) error { return n.InjectECCDoubleBit(3) }, 3, nvml.EventTypeDoubleBitEccError, 0, none, none,
			nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := fakenode.Named("dgx-a100")
			if err != nil {
				t.Fatal(err)
			}
			set := listen(t, n, tt.listenOn)
			defer freeSet(t, set)
			if err := tt.inject(n); err != nil {
				t.Fatal(err)
			}
			ev, ret := set.Wait(1000)
			if ret != nvml.SUCCESS {
				t.Fatalf("Wait: %v", ret)
			}
			want, _ := n.NVML().DeviceGetHandleByIndex(tt.gpu)
			if ev.Device != want || ev.EventType != tt.typ || ev.EventData != tt.data ||
				ev.GpuInstanceId != tt.gi || ev.ComputeInstanceId != tt.ci {
				t.Errorf("event = %+v, want GPU %d type %#x data %d GI %#x CI %#x", ev, tt.gpu, tt.typ, tt.data, tt.gi, tt.ci)
			}
			if _, ret := set.Wait(0); ret != nvml.ERROR_TIMEOUT {
				t.Errorf("second Wait: %v, want ERROR_TIMEOUT", ret)
			}
		})
	}
}

// TestPendingEvents checks that an event injected while no set listens for
// it reaches the first set that registers for it, and only that one.
func TestPendingEvents(t *testing.T) {
	n, err := fakenode.Named("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.InjectXID(0, 79); err != nil {
		t.Fatalf("XID without a listener: %v", err)
	}
	ecc := listen(t, n, nvml.EventTypeDoubleBitEccError)
	if ev, ret := ecc.Wait(0); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("an ECC-only set received %+v (%v)", ev, ret)
	}
	xid := listen(t, n, nvml.EventTypeXidCriticalError)
	if ev, ret := xid.Wait(0); ret != nvml.SUCCESS || ev.EventData != 79 {
		t.Errorf("the first XID set got %+v (%v), want the pending XID 79", ev, ret)
	}
	late := listen(t, n, nvml.EventTypeXidCriticalError)
	if ev, ret := late.Wait(0); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("a later XID set also received %+v (%v)", ev, ret)
	}
	if err := n.InjectECCDoubleBit(0); err != nil {
		t.Fatal(err)
	}
	if ev, ret := ecc.Wait(0); ret != nvml.SUCCESS || ev.EventType != nvml.EventTypeDoubleBitEccError {
		t.Errorf("the ECC set got %+v (%v)", ev, ret)
	}
	for _, s := range []nvml.EventSet{ecc, xid, late} {
		freeSet(t, s)
	}
	if err := n.InjectECCDoubleBit(0); err != nil {
		t.Fatal(err)
	}
	again := listen(t, n, nvml.EventTypeDoubleBitEccError)
	if ev, ret := again.Wait(0); ret != nvml.SUCCESS || ev.EventType != nvml.EventTypeDoubleBitEccError {
		t.Errorf("an event injected after every set was freed reached a new set as %+v (%v)", ev, ret)
	}
}

// TestInjectErrors checks injections that name no device.
func TestInjectErrors(t *testing.T) {
	n, err := fakenode.Named("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.InjectXID(8, 79); err == nil || err.Error() != "fake node dgx-a100 has no GPU 8 (it has 8)" {
		t.Errorf("XID on GPU 8: %v", err)
	}
	if err := n.InjectECCDoubleBit(-1); err == nil || err.Error() != "fake node dgx-a100 has no GPU -1 (it has 8)" {
		t.Errorf("ECC on GPU -1: %v", err)
	}
	if err := n.InjectMIGXID(4, 1, 0, 79); err == nil || err.Error() != "fake node dgx-a100: GPU 4 has no MIG device with GPU instance 1 and compute instance 0" {
		t.Errorf("MIG XID on a GPU without MIG: %v", err)
	}
}

// TestEventSetWait checks Wait's timeout, its wake-up on an event, and
// Free ending a Wait in progress.
func TestEventSetWait(t *testing.T) {
	n, err := fakenode.Named("workstation")
	if err != nil {
		t.Fatal(err)
	}
	set := listen(t, n, nvml.EventTypeXidCriticalError)
	if _, ret := set.Wait(10); ret != nvml.ERROR_TIMEOUT {
		t.Fatalf("Wait without events: %v, want ERROR_TIMEOUT", ret)
	}

	// Inject only once Wait blocks, so that the event wakes it.
	blocked := make(chan struct{}, 2)
	fakenode.OnWaitBlocks(set, func() {
		select {
		case blocked <- struct{}{}:
		default:
		}
	})
	var wg sync.WaitGroup
	results := make(chan nvml.Return, 2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		ev, ret := set.Wait(60_000)
		if ret == nvml.SUCCESS && ev.EventData != 13 {
			ret = nvml.ERROR_UNKNOWN
		}
		results <- ret
		_, ret = set.Wait(60_000)
		results <- ret
	}()
	<-blocked
	if err := n.InjectXID(0, 13); err != nil {
		t.Fatal(err)
	}
	if ret := <-results; ret != nvml.SUCCESS {
		t.Fatalf("Wait woken by an event: %v", ret)
	}
	<-blocked // the second Wait blocks, so Free ends a Wait in progress
	if ret := set.Free(); ret != nvml.SUCCESS {
		t.Fatalf("Free: %v", ret)
	}
	if ret := <-results; ret != nvml.ERROR_UNINITIALIZED {
		t.Errorf("Wait ended by Free: %v, want ERROR_UNINITIALIZED", ret)
	}
	wg.Wait()
	if ret := set.Free(); ret != nvml.ERROR_UNINITIALIZED {
		t.Errorf("second Free: %v, want ERROR_UNINITIALIZED", ret)
	}
	dev, _ := n.NVML().DeviceGetHandleByIndex(0)
	if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("RegisterEvents on a freed set: %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	other, _ := n.NVML().EventSetCreate()
	if ret := dev.RegisterEvents(nvml.EventTypePowerSourceChange, other); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("RegisterEvents for an unsupported type: %v, want ERROR_NOT_SUPPORTED", ret)
	}
	m, _ := fakenode.Named("h200-mig")
	foreign, _ := m.NVML().EventSetCreate()
	if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, foreign); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("RegisterEvents with another node's set: %v, want ERROR_INVALID_ARGUMENT", ret)
	}
}
