package fakenode_test

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/fakenode"
)

// fields reads the recovery action and NVLink lane link's state and
// recovery failures of GPU i in one GetFieldValues call.
func fields(t *testing.T, n *fakenode.Node, i, link int) (action, state, failures uint32, ret nvml.Return) {
	t.Helper()
	dev, _ := n.NVML().DeviceGetHandleByIndex(i)
	values := []nvml.FieldValue{
		{FieldId: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION},
		{FieldId: nvml.FI_DEV_NVLINK_GET_STATE, ScopeId: uint32(link)},
		{FieldId: nvml.FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS, ScopeId: uint32(link)},
	}
	if ret := dev.GetFieldValues(values); ret != nvml.SUCCESS {
		return 0, 0, 0, ret
	}
	for _, v := range values {
		if r := nvml.Return(v.NvmlReturn); r != nvml.SUCCESS {
			t.Fatalf("field %d: %v", v.FieldId, r)
		}
	}
	u := func(v nvml.FieldValue) uint32 { return binary.NativeEndian.Uint32(v.Value[:4]) }
	return u(values[0]), u(values[1]), u(values[2]), nvml.SUCCESS
}

// TestFaultHooks plays every fault hook on one GPU and checks what NVML
// answers, then that ResetGPU clears them as nvidia-smi -r would.
func TestFaultHooks(t *testing.T) {
	n, err := fakenode.Named("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	set := listen(t, n, nvml.EventTypeGpuRecoveryAction|nvml.EventTypeGpuUnavailableError|nvml.EventTypeDramRetirementFailure)
	defer freeSet(t, set)
	dev, _ := n.NVML().DeviceGetHandleByIndex(2)
	next := func(want uint64) {
		t.Helper()
		ev, ret := set.Wait(1000)
		if ret != nvml.SUCCESS || ev.EventType != want || ev.Device != dev {
			t.Errorf("event %+v (%v), want type %#x on GPU 2", ev, ret, want)
		}
	}

	if err := n.SetRecoveryAction(2, nvml.GPU_RECOVERY_ACTION_DRAIN_AND_RESET); err != nil {
		t.Fatal(err)
	}
	next(nvml.EventTypeGpuRecoveryAction)
	if err := n.SetNVLinkDown(2, 7, true); err != nil {
		t.Fatal(err)
	}
	if action, state, failures, _ := fields(t, n, 2, 7); action != uint32(nvml.GPU_RECOVERY_ACTION_DRAIN_AND_RESET) || state != 0 || failures != 1 {
		t.Errorf("fields = action %d, state %d, failures %d; want 4, 0, 1", action, state, failures)
	}
	if s, ret := dev.GetNvLinkState(7); s != nvml.FEATURE_DISABLED || ret != nvml.SUCCESS {
		t.Errorf("GetNvLinkState(7) = %v %v, want disabled", s, ret)
	}
	if err := n.SetNVLinkDown(2, 7, true); err != nil { // already down: no new failure
		t.Fatal(err)
	}
	if err := n.SetHealth(2, fakenode.HealthSpec{RowRemapPending: true}); err != nil {
		t.Fatal(err)
	}
	if err := n.InjectPageRetirementFailure(2); err != nil {
		t.Fatal(err)
	}
	next(nvml.EventTypeDramRetirementFailure)

	if err := n.SetGPULost(2, true); err != nil {
		t.Fatal(err)
	}
	next(nvml.EventTypeGpuUnavailableError)
	if _, _, _, _, ret := dev.GetRemappedRows(); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("GetRemappedRows on a lost GPU: %v", ret)
	}
	if _, _, _, ret := fields(t, n, 2, 0); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("GetFieldValues on a lost GPU: %v", ret)
	}
	if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("RegisterEvents on a lost GPU: %v", ret)
	}

	if err := n.ResetGPU(2); err != nil {
		t.Fatal(err)
	}
	if action, state, failures, ret := fields(t, n, 2, 7); ret != nvml.SUCCESS || action != 0 || state != 1 || failures != 0 {
		t.Errorf("after the reset: action %d, state %d, failures %d (%v); want 0, 1, 0", action, state, failures, ret)
	}
	if _, _, pending, _, ret := dev.GetRemappedRows(); pending || ret != nvml.SUCCESS {
		t.Errorf("after the reset the remapping is still pending (%v)", ret)
	}
	// Nothing else was delivered: the second link-down and the reset send
	// no event.
	if ev, ret := set.Wait(0); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("extra event %+v", ev)
	}
}

func TestFaultHookErrors(t *testing.T) {
	n, err := fakenode.Named("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"link past the last", n.SetNVLinkDown(0, 18, true), "fake node dgx-h100: GPU 0 has no NVLink 18 (it has 18)"},
		{"no such GPU", n.SetGPULost(8, true), "fake node dgx-h100 has no GPU 8 (it has 8)"},
		{"action past NVML's", n.SetRecoveryAction(0, 99), "fake node dgx-h100: 99 is not an NVML recovery action (0-7)"},
		{"evidence the product cannot have", n.SetHealth(0, fakenode.HealthSpec{RetiredPagesPending: true}),
			"fake node dgx-h100: gpus[0].health.retiredPagesPending: H100-80GB-HBM3 retires no pages (it remaps rows); use rowRemapPending"},
		{"unknown action", n.SetHealth(0, fakenode.HealthSpec{RecoveryAction: "reboot"}), `"reboot" is not a recovery action`},
	} {
		if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, tt.err, tt.want)
		}
	}
}

// TestRecoveryActionFromFile: health.recoveryAction is what NVML answers
// from the start.
func TestRecoveryActionFromFile(t *testing.T) {
	n, err := fakenode.Parse("node.yaml", []byte(`name: one-l40s
driverVersion: "570.86.15"
cudaVersion: "12.8"
gpus:
  - product: L40S
    health: {recoveryAction: node-reboot}
`))
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := n.NVML().DeviceGetHandleByIndex(0)
	values := []nvml.FieldValue{{FieldId: nvml.FI_DEV_GET_GPU_RECOVERY_ACTION}, {FieldId: nvml.FI_DEV_NVLINK_GET_STATE}}
	if ret := dev.GetFieldValues(values); ret != nvml.SUCCESS ||
		binary.NativeEndian.Uint32(values[0].Value[:4]) != uint32(nvml.GPU_RECOVERY_ACTION_NODE_REBOOT) ||
		nvml.Return(values[1].NvmlReturn) != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("fields %+v (%v), want node-reboot and no NVLink", values, ret)
	}
}
