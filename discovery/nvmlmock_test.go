package discovery

// NVML error paths, tested with go-nvml's generated mock: a
// healthy 4-GPU node (mockNode) whose calls a test breaks one at a time.
// Internal tests: they also check initError, which needs no driver.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	testingclock "k8s.io/utils/clock/testing"
)

// mockGPUs is the number of GPUs of mockNode.
const mockGPUs = 4

// mockNode is a node of four PCIe GPUs without NVLink (two per NUMA node)
// built from go-nvml's mock: every call discovery and the health watcher
// make answers as a healthy GPU would. Tests replace single funcs.
type mockNode struct {
	lib  *mock.Interface
	gpus []*mock.Device
	// events feeds the event set's Wait; a closed channel ends nothing.
	events chan waitResult
}

// waitResult is one answer of EventSet.Wait.
type waitResult struct {
	data nvml.EventData
	ret  nvml.Return
}

func mockUUID(i int) string { return fmt.Sprintf("GPU-0000000%d-aaaa-bbbb-cccc-dddddddddddd", i) }

func mockBusID(i int) string { return fmt.Sprintf("00000000:%02X:00.0", 0x10+i) }

func newMockNode() *mockNode {
	n := &mockNode{events: make(chan waitResult, 16)}
	for i := range mockGPUs {
		n.gpus = append(n.gpus, newMockGPU(n, i))
	}
	n.lib = &mock.Interface{
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "570.86.15", nvml.SUCCESS },
		SystemGetNVMLVersionFunc:       func() (string, nvml.Return) { return "12.570.86.15", nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 12080, nvml.SUCCESS },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return mockGPUs, nvml.SUCCESS },
		// An older driver: no GetPciInfoExt, no GetGpuFabricInfo (mode.go).
		ExtensionsFunc: func() nvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(name string) error {
				return fmt.Errorf("%s: %w", name, nvml.ERROR_FUNCTION_NOT_FOUND)
			}}
		},
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= mockGPUs {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return n.gpus[i], nvml.SUCCESS
		},
		DeviceGetHandleByUUIDFunc: func(uuid string) (nvml.Device, nvml.Return) {
			for i := range mockGPUs {
				if mockUUID(i) == uuid {
					return n.gpus[i], nvml.SUCCESS
				}
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
		EventSetCreateFunc: func() (nvml.EventSet, nvml.Return) {
			return &mock.EventSet{
				WaitFunc: func(timeout uint32) (nvml.EventData, nvml.Return) {
					select {
					case r := <-n.events:
						return r.data, r.ret
					case <-time.After(time.Duration(timeout) * time.Millisecond):
						return nvml.EventData{}, nvml.ERROR_TIMEOUT
					}
				},
				FreeFunc: func() nvml.Return { return nvml.SUCCESS },
			}, nvml.SUCCESS
		},
	}
	return n
}

func newMockGPU(n *mockNode, i int) *mock.Device {
	d := &mock.Device{}
	var pci nvml.PciInfo
	for k, c := range mockBusID(i) {
		pci.BusId[k] = int8(c)
	}
	*d = mock.Device{
		GetUUIDFunc:                  func() (string, nvml.Return) { return mockUUID(i), nvml.SUCCESS },
		GetNameFunc:                  func() (string, nvml.Return) { return "NVIDIA H100 PCIe", nvml.SUCCESS },
		GetMinorNumberFunc:           func() (int, nvml.Return) { return i, nvml.SUCCESS },
		GetBrandFunc:                 func() (nvml.BrandType, nvml.Return) { return nvml.BRAND_NVIDIA, nvml.SUCCESS },
		GetArchitectureFunc:          func() (nvml.DeviceArchitecture, nvml.Return) { return nvml.DEVICE_ARCH_HOPPER, nvml.SUCCESS },
		GetCudaComputeCapabilityFunc: func() (int, int, nvml.Return) { return 9, 0, nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 81559 * mib, Free: 81559 * mib}, nvml.SUCCESS
		},
		GetPciInfoFunc:    func() (nvml.PciInfo, nvml.Return) { return pci, nvml.SUCCESS },
		GetNumaNodeIdFunc: func() (int, nvml.Return) { return i / 2, nvml.SUCCESS },
		GetComputeModeFunc: func() (nvml.ComputeMode, nvml.Return) {
			return nvml.COMPUTEMODE_DEFAULT, nvml.SUCCESS
		},
		GetMigModeFunc: func() (int, int, nvml.Return) {
			return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS
		},
		// PCIe cards: NVLink not supported, in both ways of asking.
		GetFieldValuesFunc: func(values []nvml.FieldValue) nvml.Return {
			for k := range values {
				values[k].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			}
			return nvml.SUCCESS
		},
		GetNvLinkStateFunc: func(int) (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
		GetTopologyCommonAncestorFunc: func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			j := slices.Index(n.gpus, other.(*mock.Device))
			if i/2 == j/2 {
				return nvml.TOPOLOGY_HOSTBRIDGE, nvml.SUCCESS
			}
			return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
		},
		GetSupportedEventTypesFunc: func() (uint64, nvml.Return) {
			return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError, nvml.SUCCESS
		},
		RegisterEventsFunc:               func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS },
		GetRetiredPagesPendingStatusFunc: func() (nvml.EnableState, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
		GetRemappedRowsFunc:              func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS },
		GetTotalEccErrorsFunc: func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
			return 0, nvml.SUCCESS
		},
	}
	return d
}

// discoverMock discovers n with a sysfs root that has no NUMA files.
func discoverMock(t *testing.T, n *mockNode) (*Inventory, error) {
	t.Helper()
	return Discover(n.lib, WithSysfsRoot(t.TempDir()))
}

func gpuIndexes(inv *Inventory) []int {
	var out []int
	for _, g := range inv.GPUs {
		out = append(out, g.Index)
	}
	return out
}

// collectEvidence runs ReadEvidence with a watcher over n.
func collectEvidence(n *mockNode, inv *Inventory) ([]HealthEvent, []EvidenceProblem) {
	w := NewHealthWatcher(n.lib, HealthOptions{Clock: testingclock.NewFakePassiveClock(time.Time{})})
	return w.ReadEvidence(inv)
}

func TestMockHealthyNode(t *testing.T) {
	n := newMockNode()
	inv, err := discoverMock(t, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.GPUs) != mockGPUs || len(inv.LostGPUs) != 0 || inv.GPUs[3].NUMANode != 1 || inv.GPUs[0].NVLinks != 0 {
		t.Fatalf("inventory = %+v", inv)
	}
	if got := inv.Links[0][1].PCIe; got != PCIeHostBridge {
		t.Errorf("PCIe 0-1 = %q, want PHB", got)
	}
	if evs, problems := collectEvidence(n, inv); len(evs)+len(problems) != 0 {
		t.Errorf("evidence on a healthy node: %+v %+v", evs, problems)
	}
}

// TestMockGPULostDuringDiscovery: a GPU lost while it is read is kept
// (Lost, with what was read before) and reported unhealthy at once; one
// lost before it could be named is left out. The others are complete.
func TestMockGPULostDuringDiscovery(t *testing.T) {
	n := newMockNode()
	n.gpus[1].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
	n.gpus[1].GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
		return 0, nvml.ERROR_GPU_IS_LOST
	}
	byIndex := n.lib.DeviceGetHandleByIndexFunc
	n.lib.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 2 {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return byIndex(i)
	}
	inv, err := discoverMock(t, n)
	if err != nil {
		t.Fatalf("Discover with lost GPUs: %v", err)
	}
	if got := gpuIndexes(inv); !slices.Equal(got, []int{0, 1, 3}) || !slices.Equal(inv.LostGPUs, []int{2}) {
		t.Fatalf("GPUs %v, lost %v; want [0 1 3], lost [2]", got, inv.LostGPUs)
	}
	g1 := inv.GPUs[1]
	if !g1.Lost || g1.UUID != mockUUID(1) || g1.Product != "NVIDIA H100 PCIe" || g1.MemoryMiB != 0 || g1.NUMANode != NoNUMANode || g1.ComputeMode != Unknown {
		t.Errorf("lost GPU 1 = %+v, want Lost with UUID and product, no memory", g1)
	}
	for _, k := range []int{0, 2} {
		if g := inv.GPUs[k]; g.Lost || g.MemoryMiB != 81559 || g.ComputeMode != "Default" {
			t.Errorf("GPU %d affected by the lost ones: %+v", g.Index, g)
		}
	}
	if len(inv.Links) != mockGPUs || inv.Links[0][3].PCIe != PCIeSystem || inv.Links[0][1].PCIe != PCIeUnknown || inv.Links[0][2] != (Link{}) {
		t.Errorf("links = %+v", inv.Links)
	}
	f := Features(inv)
	if got := f.Attributes[FeatureDriver].Elements[AttrGPUCount]; got != "3" {
		t.Errorf("gpu.count = %s, want 3", got)
	}
	if got := len(f.Instances[FeatureGPU].Elements); got != 3 {
		t.Errorf("%d nvidia.gpu instances, want 3", got)
	}
	evs, problems := collectEvidence(n, inv)
	want := []HealthEvent{{GPUUUID: mockUUID(1), Kind: EventGPULost}}
	if !slices.Equal(evs, want) || len(problems) != 0 {
		t.Errorf("evidence = %+v %+v, want %+v", evs, problems, want)
	}
}

// TestMockGPULostDuringWatch: an event wait that fails with
// ERROR_GPU_IS_LOST reports the GPU that answers lost, and only that one;
// events on the other GPUs keep coming.
func TestMockGPULostDuringWatch(t *testing.T) {
	n := newMockNode()
	inv, err := discoverMock(t, n)
	if err != nil {
		t.Fatal(err)
	}
	var gone atomic.Bool
	n.gpus[3].GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
		if gone.Load() {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return 0, nvml.SUCCESS
	}
	events, stop := runMockWatcher(t, n, inv)
	defer stop()
	// A first event proves the watcher is past its start-up evidence.
	n.events <- waitResult{data: nvml.EventData{Device: n.gpus[0], EventType: nvml.EventTypeDoubleBitEccError, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}}
	if got, want := nextEvent(t, events), (HealthEvent{GPUUUID: mockUUID(0), Kind: EventECCDoubleBit}); got != want {
		t.Fatalf("event %+v, want %+v", got, want)
	}

	gone.Store(true)
	n.events <- waitResult{ret: nvml.ERROR_GPU_IS_LOST}
	n.events <- waitResult{data: nvml.EventData{Device: n.gpus[2], EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}}
	want := []HealthEvent{
		{GPUUUID: mockUUID(3), Kind: EventGPULost},
		{GPUUUID: mockUUID(2), Kind: EventXID, XID: 79},
	}
	for _, w := range want {
		if got := nextEvent(t, events); got != w {
			t.Fatalf("event %+v, want %+v", got, w)
		}
	}
}

// TestMockGPULostWithoutCulprit: when no GPU answers lost, every GPU is
// reported (NVML said one was lost, not which).
func TestMockGPULostWithoutCulprit(t *testing.T) {
	n := newMockNode()
	inv, err := discoverMock(t, n)
	if err != nil {
		t.Fatal(err)
	}
	events, stop := runMockWatcher(t, n, inv)
	defer stop()
	n.events <- waitResult{ret: nvml.ERROR_GPU_IS_LOST}
	for i := range mockGPUs {
		if got, want := nextEvent(t, events), (HealthEvent{GPUUUID: mockUUID(i), Kind: EventGPULost}); got != want {
			t.Fatalf("event %+v, want %+v", got, want)
		}
	}
}

// TestMockOptionalNotSupported: every optional query answering
// NOT_SUPPORTED leaves the fact unknown or absent, without an error.
func TestMockOptionalNotSupported(t *testing.T) {
	n := newMockNode()
	n.lib.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	for _, d := range n.gpus {
		d.GetMinorNumberFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetFieldValuesFunc = func([]nvml.FieldValue) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
		d.GetTopologyCommonAncestorFunc = func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		d.GetBrandFunc = func() (nvml.BrandType, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.ERROR_NOT_SUPPORTED }
		d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
	}
	inv, err := discoverMock(t, n)
	if err != nil {
		t.Fatalf("NOT_SUPPORTED optional facts must not fail discovery: %v", err)
	}
	g := inv.GPUs[0]
	if inv.CUDADriverVersion != Unknown || g.Minor != -1 || g.NUMANode != NoNUMANode || g.ComputeMode != Unknown ||
		g.MIGCapable || g.Brand != Unknown || g.NVLinks != 0 || inv.Links[0][1].PCIe != PCIeUnknown {
		t.Errorf("inventory = %+v, links %+v", inv, inv.Links[0])
	}
	f := Features(inv)
	a := f.Instances[FeatureGPU].Elements[0].Attributes
	for k, want := range map[string]string{AttrNUMA: "-1", AttrComputeMode: Unknown, AttrNVLinks: "0", AttrNVLinkPeers: "0", AttrMIGCapable: "false"} {
		if a[k] != want {
			t.Errorf("nvidia.gpu[0].%s = %q, want %q", k, a[k], want)
		}
	}
	if _, ok := f.Flags[FeatureCapabilities].Elements[FlagMIG]; ok {
		t.Error("mig capability flag set without MIG support")
	}
	if _, ok := f.Attributes[FeatureDriver].Elements[AttrCUDAMajor]; ok {
		t.Error("cuda.major set for an unknown CUDA version")
	}
	if evs, problems := collectEvidence(n, inv); len(evs)+len(problems) != 0 {
		t.Errorf("NOT_SUPPORTED evidence queries gave %+v %+v, want nothing", evs, problems)
	}
}

// TestMockNoPermission: a required query denied is an error that says what
// to do in one sentence; an evidence query denied is a problem, not a
// failure, and leaves the GPU healthy.
func TestMockNoPermission(t *testing.T) {
	n := newMockNode()
	n.gpus[2].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_NO_PERMISSION }
	_, err := discoverMock(t, n)
	want := "reading memory of GPU 2: NVML denied access; featureplug needs read-write access to /dev/nvidiactl and /dev/nvidia* (run it as root or privileged) (ERROR_NO_PERMISSION)"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant %s", err, want)
	}
	if !errors.Is(err, nvml.ERROR_NO_PERMISSION) {
		t.Errorf("error %v does not wrap ERROR_NO_PERMISSION", err)
	}

	n = newMockNode()
	n.gpus[0].GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) {
		return 0, 0, false, false, nvml.ERROR_NO_PERMISSION
	}
	inv, err := discoverMock(t, n)
	if err != nil {
		t.Fatal(err)
	}
	evs, problems := collectEvidence(n, inv)
	if len(evs) != 0 || len(problems) != 1 || problems[0].GPUUUID != mockUUID(0) ||
		problems[0].Err.Error() != "reading remapped rows of GPU "+mockUUID(0)+": NVML denied access; featureplug needs read-write access to /dev/nvidiactl and /dev/nvidia* (run it as root or privileged) (ERROR_NO_PERMISSION)" {
		t.Errorf("evidence = %+v, problems = %+v", evs, problems)
	}
}

// TestMockLibraryOlderThanDriver: FUNCTION_NOT_FOUND (a library without
// the function) on optional queries means "absent"; a library that does not
// match the kernel driver is an error that says so.
func TestMockLibraryOlderThanDriver(t *testing.T) {
	n := newMockNode()
	for i, d := range n.gpus {
		d.GetFieldValuesFunc = func([]nvml.FieldValue) nvml.Return { return nvml.ERROR_FUNCTION_NOT_FOUND }
		// The link-by-link fallback still finds an NVLink bridge 0-1.
		d.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
			if i > 1 || l >= 4 {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		peer := mockBusID(1 - i)
		d.GetNvLinkRemotePciInfoFunc = func(int) (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for k, c := range peer {
				p.BusId[k] = int8(c)
			}
			return p, nvml.SUCCESS
		}
		d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) {
			return 0, 0, false, false, nvml.ERROR_FUNCTION_NOT_FOUND
		}
	}
	inv, err := discoverMock(t, n)
	if err != nil {
		t.Fatal(err)
	}
	if inv.GPUs[0].NVLinks != 4 || inv.Links[0][1].NVLinks != 4 || inv.GPUs[2].NVLinks != 0 || inv.Links[1][2].NVLinks != 0 {
		t.Errorf("NVLinks through the fallback: GPU 0 %d, 0-1 %d, GPU 2 %d", inv.GPUs[0].NVLinks, inv.Links[0][1].NVLinks, inv.GPUs[2].NVLinks)
	}
	if a := Features(inv).Instances[FeatureGPU].Elements[1].Attributes; a[AttrNVLinks] != "4" || a[AttrNVLinkPeers] != "1" {
		t.Errorf("nvlinks %s, nvlink.peers %s; want 4 and 1", a[AttrNVLinks], a[AttrNVLinkPeers])
	}
	if evs, problems := collectEvidence(n, inv); len(evs)+len(problems) != 0 {
		t.Errorf("FUNCTION_NOT_FOUND evidence gave %+v %+v", evs, problems)
	}

	n = newMockNode()
	n.lib.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "", nvml.ERROR_LIB_RM_VERSION_MISMATCH }
	_, err = discoverMock(t, n)
	want := "reading driver version: the NVML library does not match the loaded NVIDIA kernel driver; after a driver upgrade reload the nvidia kernel modules (or reboot), and mount the host's libnvidia-ml.so.1 rather than a copy of another version (ERROR_LIB_RM_VERSION_MISMATCH)"
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant %s", err, want)
	}
	if got := initError("/usr/lib/libnvidia-ml.so.1", nvml.ERROR_LIB_RM_VERSION_MISMATCH).Error(); got != "initializing NVML from /usr/lib/libnvidia-ml.so.1: the NVML library does not match the loaded NVIDIA kernel driver; after a driver upgrade reload the nvidia kernel modules (or reboot), and mount the host's libnvidia-ml.so.1 rather than a copy of another version (ERROR_LIB_RM_VERSION_MISMATCH)" {
		t.Errorf("initError = %s", got)
	}
}

// migMockNode turns GPU 0 of n into a MIG GPU with seven slots whose
// handles answer handle(slot).
func migMockNode(n *mockNode, handle func(int) (nvml.Device, nvml.Return)) {
	g := n.gpus[0]
	g.GetMigModeFunc = func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS }
	g.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	g.GetMigDeviceHandleByIndexFunc = handle
}

// TestMockMIGHandleErrors: empty slots are skipped; a GPU lost while its
// MIG devices are read is Lost with none; any other MIG handle error fails
// discovery naming the MIG device.
func TestMockMIGHandleErrors(t *testing.T) {
	t.Run("empty slots", func(t *testing.T) {
		n := newMockNode()
		migMockNode(n, func(j int) (nvml.Device, nvml.Return) {
			if j%2 == 0 {
				return nil, nvml.ERROR_NOT_FOUND
			}
			return nil, nvml.ERROR_INVALID_ARGUMENT
		})
		inv, err := discoverMock(t, n)
		if err != nil {
			t.Fatal(err)
		}
		if g := inv.GPUs[0]; !g.MIGEnabled || len(g.MIGDevices) != 0 || g.Lost {
			t.Errorf("GPU 0 = %+v, want MIG enabled without devices", g)
		}
		if f := Features(inv); len(f.Instances[FeatureMIG].Elements) != 0 || f.Instances[FeatureGPU].Elements[0].Attributes[AttrMIGCount] != "0" {
			t.Errorf("features = %+v", f.Instances)
		}
	})
	t.Run("GPU lost", func(t *testing.T) {
		n := newMockNode()
		migMockNode(n, func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_GPU_IS_LOST })
		inv, err := discoverMock(t, n)
		if err != nil {
			t.Fatal(err)
		}
		if g := inv.GPUs[0]; !g.Lost || len(g.MIGDevices) != 0 || inv.GPUs[1].Lost {
			t.Errorf("GPUs = %+v", inv.GPUs[:2])
		}
		evs, _ := collectEvidence(n, inv)
		if want := []HealthEvent{{GPUUUID: mockUUID(0), Kind: EventGPULost}}; !slices.Equal(evs, want) {
			t.Errorf("evidence = %+v, want %+v", evs, want)
		}
	})
	t.Run("MIG device attributes fail", func(t *testing.T) {
		n := newMockNode()
		mig := &mock.Device{
			GetUUIDFunc:              func() (string, nvml.Return) { return "MIG-0", nvml.SUCCESS },
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return 1, nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return 0, nvml.SUCCESS },
			GetAttributesFunc:        func() (nvml.DeviceAttributes, nvml.Return) { return nvml.DeviceAttributes{}, nvml.ERROR_UNKNOWN },
		}
		migMockNode(n, func(j int) (nvml.Device, nvml.Return) {
			if j == 0 {
				return mig, nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		})
		_, err := discoverMock(t, n)
		if err == nil || err.Error() != "reading attributes of GPU 0 MIG device 0: ERROR_UNKNOWN" {
			t.Errorf("error = %v", err)
		}
	})
	t.Run("MIG handle fails", func(t *testing.T) {
		n := newMockNode()
		migMockNode(n, func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_NO_PERMISSION })
		_, err := discoverMock(t, n)
		if err == nil || !errors.Is(err, nvml.ERROR_NO_PERMISSION) || err.Error()[:40] != "reading handle of GPU 0 MIG device 0: NV" {
			t.Errorf("error = %v", err)
		}
	})
}

// runMockWatcher starts a health watcher over n and returns its events.
func runMockWatcher(t *testing.T, n *mockNode, inv *Inventory) (<-chan HealthEvent, func()) {
	t.Helper()
	w := NewHealthWatcher(n.lib, HealthOptions{WaitTimeout: 10 * time.Millisecond, EvidenceInterval: -1, Clock: testingclock.NewFakePassiveClock(time.Time{})})
	events := make(chan HealthEvent, 16)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := w.Run(ctx, func() *Inventory { return inv }, events); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	return events, func() { cancel(); wg.Wait() }
}

func nextEvent(t *testing.T, events <-chan HealthEvent) HealthEvent {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no health event")
		return HealthEvent{}
	}
}

// TestMockGPULostAtRegistration: a GPU lost when the watcher registers for
// its events is reported once, and the watcher serves the other GPUs.
func TestMockGPULostAtRegistration(t *testing.T) {
	n := newMockNode()
	inv, err := discoverMock(t, n)
	if err != nil {
		t.Fatal(err)
	}
	n.gpus[2].RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_GPU_IS_LOST }
	n.gpus[2].GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
		return 0, nvml.ERROR_GPU_IS_LOST
	}
	events, stop := runMockWatcher(t, n, inv)
	defer stop()
	n.events <- waitResult{data: nvml.EventData{Device: n.gpus[0], EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}}
	for _, w := range []HealthEvent{
		{GPUUUID: mockUUID(2), Kind: EventGPULost},
		{GPUUUID: mockUUID(0), Kind: EventXID, XID: 79},
	} {
		if got := nextEvent(t, events); got != w {
			t.Fatalf("event %+v, want %+v", got, w)
		}
	}
}
