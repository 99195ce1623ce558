package fakenode_test

import (
	"reflect"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/fakenode"
)

// handles returns one value of each NVML handle type from a fresh node:
// the library, a GPU, a MIG device, a GPU instance, a compute instance and
// an event set.
func handles(t *testing.T) map[string]any {
	t.Helper()
	n, err := fakenode.Named("a100-80gb-mixed")
	if err != nil {
		t.Fatal(err)
	}
	lib := n.NVML()
	gpu, _ := lib.DeviceGetHandleByIndex(0)
	mig, ret := gpu.GetMigDeviceHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	giID, _ := mig.GetGpuInstanceId()
	ciID, _ := mig.GetComputeInstanceId()
	gi, ret := gpu.GetGpuInstanceById(giID)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	ci, ret := gi.GetComputeInstanceById(ciID)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	set, _ := lib.EventSetCreate()
	return map[string]any{
		"Interface":       lib,
		"Device":          gpu,
		"MIGDevice":       mig,
		"GpuInstance":     gi,
		"ComputeInstance": ci,
		"EventSet":        set,
	}
}

// handleInterfaces maps the handles above to the NVML interface whose
// methods the test calls.
func handleInterfaces() map[string]reflect.Type {
	return map[string]reflect.Type{
		"Interface":       reflect.TypeFor[nvml.Interface](),
		"Device":          reflect.TypeFor[nvml.Device](),
		"MIGDevice":       reflect.TypeFor[nvml.Device](),
		"GpuInstance":     reflect.TypeFor[nvml.GpuInstance](),
		"ComputeInstance": reflect.TypeFor[nvml.ComputeInstance](),
		"EventSet":        reflect.TypeFor[nvml.EventSet](),
	}
}

// TestEveryMethodAnswers calls every method of every NVML interface the fake
// returns, with zero arguments, and checks that none panics: what the fake
// does not implement answers ERROR_NOT_SUPPORTED.
func TestEveryMethodAnswers(t *testing.T) {
	ifaces := handleInterfaces()
	for name, h := range handles(t) {
		it := ifaces[name]
		v := reflect.ValueOf(h)
		calls := 0
		for i := range it.NumMethod() {
			m := it.Method(i)
			args := make([]reflect.Value, m.Type.NumIn())
			for k := range args {
				args[k] = reflect.Zero(m.Type.In(k))
			}
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s.%s panicked: %v", name, m.Name, r)
					}
				}()
				v.MethodByName(m.Name).Call(args)
				calls++
			}()
		}
		if calls != it.NumMethod() || calls == 0 {
			t.Errorf("%s: %d of %d methods answered", name, calls, it.NumMethod())
		}
	}
}

// TestUnimplementedIsNotSupported checks what a few methods the fake does
// not implement answer, and that the library forwards handle-first calls to
// the handle.
func TestUnimplementedIsNotSupported(t *testing.T) {
	h := handles(t)
	lib := h["Interface"].(nvml.Interface)
	gpu := h["Device"].(nvml.Device)
	gi := h["GpuInstance"].(nvml.GpuInstance)

	tests := []struct {
		name string
		call func() (any, nvml.Return)
		want any
		ret  nvml.Return
	}{
		{"Device.GetTemperature", func() (any, nvml.Return) { return gpu.GetTemperature(nvml.TEMPERATURE_GPU) }, uint32(0), nvml.ERROR_NOT_SUPPORTED},
		{"Device.GetSerial", func() (any, nvml.Return) { return gpu.GetSerial() }, "", nvml.ERROR_NOT_SUPPORTED},
		{"Device.GetPowerUsage", func() (any, nvml.Return) { return gpu.GetPowerUsage() }, uint32(0), nvml.ERROR_NOT_SUPPORTED},
		{"Interface.SystemGetProcessName", func() (any, nvml.Return) { return lib.SystemGetProcessName(1) }, "", nvml.ERROR_NOT_SUPPORTED},
		{"Interface.UnitGetCount", func() (any, nvml.Return) { return lib.UnitGetCount() }, 0, nvml.ERROR_NOT_SUPPORTED},
		{"GpuInstance.GetActiveVgpus", func() (any, nvml.Return) { return gi.GetActiveVgpus() }, nvml.ActiveVgpuInstanceInfo{}, nvml.ERROR_NOT_SUPPORTED},
		// Forwarded to the handle.
		{"Interface.DeviceGetName", func() (any, nvml.Return) { return lib.DeviceGetName(gpu) }, "NVIDIA A100-SXM4-80GB", nvml.SUCCESS},
		{"Interface.DeviceGetTemperature", func() (any, nvml.Return) { return lib.DeviceGetTemperature(gpu, nvml.TEMPERATURE_GPU) }, uint32(0), nvml.ERROR_NOT_SUPPORTED},
		{"Interface.DeviceGetName(nil)", func() (any, nvml.Return) { return lib.DeviceGetName(nil) }, "", nvml.ERROR_INVALID_ARGUMENT},
		{"Interface.GpuInstanceGetInfo", func() (any, nvml.Return) {
			info, ret := lib.GpuInstanceGetInfo(gi)
			return info.ProfileId, ret
		}, uint32(9), nvml.SUCCESS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ret := tt.call()
			if ret != tt.ret || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, %v; want %v, %v", got, ret, tt.want, tt.ret)
			}
		})
	}
	if s := lib.ErrorString(nvml.ERROR_NOT_SUPPORTED); s != "ERROR_NOT_SUPPORTED" {
		t.Errorf("ErrorString = %q", s)
	}
	if err := lib.Extensions().LookupSymbol("nvmlDeviceGetMigMode"); err != nil {
		t.Errorf("LookupSymbol: %v", err)
	}
}
