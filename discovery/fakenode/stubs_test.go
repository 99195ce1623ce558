package fakenode

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/featureplug/featureplug/discovery/fakenode/internal/stubgen"
)

// TestStubsUpToDate regenerates stubs_gen.go in-process and compares it
// with the file on disk, so that a go-nvml upgrade that adds NVML calls
// fails here instead of panicking in a mock at run time.
func TestStubsUpToDate(t *testing.T) {
	want, err := stubgen.Generate()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("stubs_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("stubs_gen.go is out of date: run go generate ./discovery/fakenode")
	}
}

// stubsHandleTypes maps the NVML handle interfaces to the prefix of the
// library calls that take them first (DeviceGetName(device)).
var stubsHandleTypes = []struct {
	prefix string
	typ    reflect.Type
}{
	{"Device", reflect.TypeFor[nvml.Device]()},
	{"GpuInstance", reflect.TypeFor[nvml.GpuInstance]()},
	{"ComputeInstance", reflect.TypeFor[nvml.ComputeInstance]()},
	{"EventSet", reflect.TypeFor[nvml.EventSet]()},
}

// stubsForwarded returns the mock.Interface func fields that must forward
// to a handle, by field name, with the handle method they call: for every
// method M of a handle type H, the library call <prefix>M whose type is M's
// with an H parameter in front.
func stubsForwarded() map[string]string {
	lib := reflect.TypeFor[mock.Interface]()
	out := map[string]string{}
	for _, h := range stubsHandleTypes {
		for i := range h.typ.NumMethod() {
			m := h.typ.Method(i)
			in := []reflect.Type{h.typ}
			for k := range m.Type.NumIn() {
				in = append(in, m.Type.In(k))
			}
			outs := make([]reflect.Type, m.Type.NumOut())
			for k := range outs {
				outs[k] = m.Type.Out(k)
			}
			want := reflect.FuncOf(in, outs, m.Type.IsVariadic())
			name := h.prefix + m.Name + "Func"
			if f, ok := lib.FieldByName(name); ok && f.Type == want {
				out[name] = m.Name
			}
		}
	}
	return out
}

// stubsCall calls fn with args (zero values after the given ones) and
// checks that it returns zero values and ret in every nvml.Return result
// (and does not panic, as an unset mock method does).
func stubsCall(t *testing.T, name string, fn reflect.Value, ret nvml.Return, args ...reflect.Value) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", name, r)
		}
	}()
	ft := fn.Type()
	for k := len(args); k < ft.NumIn(); k++ {
		args = append(args, reflect.Zero(ft.In(k)))
	}
	var out []reflect.Value
	if ft.IsVariadic() {
		out = fn.CallSlice(args)
	} else {
		out = fn.Call(args)
	}
	for k, v := range out {
		if v.Type() == reflect.TypeFor[nvml.Return]() {
			if got := v.Interface().(nvml.Return); got != ret {
				t.Errorf("%s: result %d = %v, want %v", name, k, got, ret)
			}
		} else if !v.IsZero() {
			t.Errorf("%s: result %d = %v, want the zero value", name, k, v)
		}
	}
}

// TestFillSetsEveryFunc fills each mock struct the fake embeds and calls
// every func field with zero arguments: none is nil, each answers zero
// values and ERROR_NOT_SUPPORTED, and the library's handle-first calls
// answer ERROR_INVALID_ARGUMENT for a nil handle.
func TestFillSetsEveryFunc(t *testing.T) {
	forwarded := stubsForwarded()
	lib, dev, gi, ci, set := &mock.Interface{}, &mock.Device{}, &mock.GpuInstance{}, &mock.ComputeInstance{}, &mock.EventSet{}
	tests := []struct {
		name string
		mock any
		fill func()
	}{
		{"Interface", lib, func() { fillInterface(lib) }},
		{"Device", dev, func() { fillDevice(dev) }},
		{"GpuInstance", gi, func() { fillGpuInstance(gi) }},
		{"ComputeInstance", ci, func() { fillComputeInstance(ci) }},
		{"EventSet", set, func() { fillEventSet(set) }},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fill()
			v := reflect.ValueOf(tt.mock).Elem()
			funcs := 0
			for i := range v.NumField() {
				f := v.Type().Field(i)
				if f.Type.Kind() != reflect.Func {
					continue
				}
				funcs++
				fn := v.Field(i)
				if fn.IsNil() {
					t.Errorf("%s.%s is nil after fill", tt.name, f.Name)
					continue
				}
				ret := nvml.ERROR_NOT_SUPPORTED
				if _, ok := forwarded[f.Name]; ok && tt.name == "Interface" {
					ret = nvml.ERROR_INVALID_ARGUMENT
				}
				stubsCall(t, tt.name+"."+f.Name, fn, ret)
			}
			if funcs == 0 {
				t.Errorf("mock.%s has no func fields", tt.name)
			}
		})
	}
}

// TestFillForwardsToHandle calls every library call that takes a handle
// first with a filled mock handle: the forwarded ones reach the handle's
// method once (the mock records the call) and answer what it answers; the
// others do not reach the handle.
func TestFillForwardsToHandle(t *testing.T) {
	forwarded := stubsForwarded()
	for _, name := range []string{"DeviceGetNameFunc", "DeviceGetMigDeviceHandleByIndexFunc", "GpuInstanceGetInfoFunc", "ComputeInstanceGetInfoFunc", "EventSetWaitFunc"} {
		if _, ok := forwarded[name]; !ok {
			t.Errorf("%s is not among the forwarded calls", name)
		}
	}

	lib := &mock.Interface{}
	fillInterface(lib)
	v := reflect.ValueOf(lib).Elem()
	checked := 0
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Type.Kind() != reflect.Func || f.Type.NumIn() == 0 {
			continue
		}
		// A fresh filled handle per call, so that its call record holds only this call.
		var handle any
		switch f.Type.In(0) {
		case reflect.TypeFor[nvml.Device]():
			m := &mock.Device{}
			fillDevice(m)
			handle = m
		case reflect.TypeFor[nvml.GpuInstance]():
			m := &mock.GpuInstance{}
			fillGpuInstance(m)
			handle = m
		case reflect.TypeFor[nvml.ComputeInstance]():
			m := &mock.ComputeInstance{}
			fillComputeInstance(m)
			handle = m
		case reflect.TypeFor[nvml.EventSet]():
			m := &mock.EventSet{}
			fillEventSet(m)
			handle = m
		default:
			continue
		}
		stubsCall(t, f.Name, v.Field(i), nvml.ERROR_NOT_SUPPORTED, reflect.ValueOf(handle))
		calls := 0
		hv := reflect.ValueOf(handle)
		for k := range hv.NumMethod() {
			if strings.HasSuffix(hv.Type().Method(k).Name, "Calls") {
				calls += hv.Method(k).Call(nil)[0].Len()
			}
		}
		method, ok := forwarded[f.Name]
		switch {
		case ok && calls != 1:
			t.Errorf("%s: handle got %d calls, want 1 (to %s)", f.Name, calls, method)
		case ok:
			if n := hv.MethodByName(method + "Calls").Call(nil)[0].Len(); n != 1 {
				t.Errorf("%s: %s got %d calls, want 1", f.Name, method, n)
			}
		case calls != 0:
			t.Errorf("%s: not a forwarded call, but the handle got %d calls", f.Name, calls)
		}
		checked++
	}
	if checked < len(forwarded) {
		t.Errorf("checked %d handle-first calls, fewer than the %d forwarded ones", checked, len(forwarded))
	}
}

// BenchmarkFillDevice measures filling one GPU or MIG device handle's mock,
// which a node does for every GPU and MIG device it builds.
func BenchmarkFillDevice(b *testing.B) {
	for b.Loop() {
		fillDevice(&mock.Device{})
	}
}

// BenchmarkForwardedCall measures a library call the fake forwards to a
// handle (DeviceGetName(gpu) -> gpu.GetName()).
func BenchmarkForwardedCall(b *testing.B) {
	n, err := Named("dgx-a100")
	if err != nil {
		b.Fatal(err)
	}
	lib := n.NVML()
	gpu, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		b.Fatal(ret)
	}
	for b.Loop() {
		if _, ret := lib.DeviceGetName(gpu); ret != nvml.SUCCESS {
			b.Fatal(ret)
		}
	}
}
