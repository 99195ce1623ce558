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

// stubsForwarded returns the nvml.Interface methods that must forward to a
// handle, by name, with the handle method they call: for every method M of
// a handle type H, the library call <prefix>M whose type is M's with an H
// parameter in front.
func stubsForwarded() map[string]string {
	lib := reflect.TypeFor[nvml.Interface]()
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
			name := h.prefix + m.Name
			if f, ok := lib.MethodByName(name); ok && f.Type == want {
				out[name] = m.Name
			}
		}
	}
	return out
}

// stubsCall calls fn with args (zero values after the given ones) and
// checks that it returns zero values and ret in every nvml.Return result
// (and does not panic).
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

// TestStubsAnswerEveryMethod calls every method of each generated stub
// type with zero arguments: the type has exactly its NVML interface's
// methods, each answers zero values and ERROR_NOT_SUPPORTED, and the
// library's handle-first calls answer ERROR_INVALID_ARGUMENT for a nil
// handle.
func TestStubsAnswerEveryMethod(t *testing.T) {
	forwarded := stubsForwarded()
	tests := []struct {
		name  string
		stub  any
		iface reflect.Type
	}{
		{"Interface", unsupportedLibrary{}, reflect.TypeFor[nvml.Interface]()},
		{"Device", unsupportedDevice{}, reflect.TypeFor[nvml.Device]()},
		{"GpuInstance", unsupportedGpuInstance{}, reflect.TypeFor[nvml.GpuInstance]()},
		{"ComputeInstance", unsupportedComputeInstance{}, reflect.TypeFor[nvml.ComputeInstance]()},
		{"EventSet", unsupportedEventSet{}, reflect.TypeFor[nvml.EventSet]()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := reflect.ValueOf(tt.stub)
			if v.NumMethod() != tt.iface.NumMethod() || tt.iface.NumMethod() == 0 {
				t.Errorf("%T has %d methods, %s has %d", tt.stub, v.NumMethod(), tt.iface, tt.iface.NumMethod())
			}
			for i := range tt.iface.NumMethod() {
				m := tt.iface.Method(i)
				ret := nvml.ERROR_NOT_SUPPORTED
				if _, ok := forwarded[m.Name]; ok && tt.name == "Interface" {
					ret = nvml.ERROR_INVALID_ARGUMENT
				}
				stubsCall(t, tt.name+"."+m.Name, v.MethodByName(m.Name), ret)
			}
		})
	}
}

// stubsRecorder returns a go-nvml mock of handle type typ whose every func
// field answers zero values and ERROR_NOT_SUPPORTED; the mock records the
// calls it gets.
func stubsRecorder(t *testing.T, typ reflect.Type) (any, bool) {
	t.Helper()
	var m any
	switch typ {
	case reflect.TypeFor[nvml.Device]():
		m = &mock.Device{}
	case reflect.TypeFor[nvml.GpuInstance]():
		m = &mock.GpuInstance{}
	case reflect.TypeFor[nvml.ComputeInstance]():
		m = &mock.ComputeInstance{}
	case reflect.TypeFor[nvml.EventSet]():
		m = &mock.EventSet{}
	default:
		return nil, false
	}
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() != reflect.Func {
			continue
		}
		ft := f.Type()
		f.Set(reflect.MakeFunc(ft, func([]reflect.Value) []reflect.Value {
			out := make([]reflect.Value, ft.NumOut())
			for k := range out {
				out[k] = reflect.Zero(ft.Out(k))
				if ft.Out(k) == reflect.TypeFor[nvml.Return]() {
					out[k] = reflect.ValueOf(nvml.ERROR_NOT_SUPPORTED)
				}
			}
			return out
		}))
	}
	return m, true
}

// TestStubsForwardToHandle calls every library call that takes a handle
// first with a recording handle: the forwarded ones reach the handle's
// method once and answer what it answers; the others do not reach the
// handle.
func TestStubsForwardToHandle(t *testing.T) {
	forwarded := stubsForwarded()
	for _, name := range []string{"DeviceGetName", "DeviceGetMigDeviceHandleByIndex", "GpuInstanceGetInfo", "ComputeInstanceGetInfo", "EventSetWait"} {
		if _, ok := forwarded[name]; !ok {
			t.Errorf("%s is not among the forwarded calls", name)
		}
	}

	lib := reflect.ValueOf(unsupportedLibrary{})
	checked := 0
	for i := range lib.NumMethod() {
		m := lib.Type().Method(i)
		fn := lib.Method(i)
		if fn.Type().NumIn() == 0 {
			continue
		}
		// A fresh handle per call, so that its call record holds only this call.
		handle, ok := stubsRecorder(t, fn.Type().In(0))
		if !ok {
			continue
		}
		stubsCall(t, m.Name, fn, nvml.ERROR_NOT_SUPPORTED, reflect.ValueOf(handle))
		calls := 0
		hv := reflect.ValueOf(handle)
		for k := range hv.NumMethod() {
			if strings.HasSuffix(hv.Type().Method(k).Name, "Calls") {
				calls += hv.Method(k).Call(nil)[0].Len()
			}
		}
		method, ok := forwarded[m.Name]
		switch {
		case ok && calls != 1:
			t.Errorf("%s: handle got %d calls, want 1 (to %s)", m.Name, calls, method)
		case ok:
			if n := hv.MethodByName(method + "Calls").Call(nil)[0].Len(); n != 1 {
				t.Errorf("%s: %s got %d calls, want 1", m.Name, method, n)
			}
		case calls != 0:
			t.Errorf("%s: not a forwarded call, but the handle got %d calls", m.Name, calls)
		}
		checked++
	}
	if checked < len(forwarded) {
		t.Errorf("checked %d handle-first calls, fewer than the %d forwarded ones", checked, len(forwarded))
	}
}

// TestHandlesEmbedStubs checks that no handle type of the fake embeds a
// go-nvml mock, which records every call it gets (see
// TestCallsRetainNothing): each embeds its generated stub type by value.
func TestHandlesEmbedStubs(t *testing.T) {
	mockPkg := reflect.TypeFor[mock.Device]().PkgPath()
	for _, h := range []struct {
		typ  reflect.Type
		stub reflect.Type
	}{
		{reflect.TypeFor[library](), reflect.TypeFor[unsupportedLibrary]()},
		{reflect.TypeFor[gpuHandle](), reflect.TypeFor[unsupportedDevice]()},
		{reflect.TypeFor[migHandle](), reflect.TypeFor[unsupportedDevice]()},
		{reflect.TypeFor[gpuInstance](), reflect.TypeFor[unsupportedGpuInstance]()},
		{reflect.TypeFor[computeInstance](), reflect.TypeFor[unsupportedComputeInstance]()},
		{reflect.TypeFor[eventSet](), reflect.TypeFor[unsupportedEventSet]()},
	} {
		embeds := false
		for i := range h.typ.NumField() {
			f := h.typ.Field(i)
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.PkgPath() == mockPkg {
				t.Errorf("%s.%s is a go-nvml mock (%s)", h.typ.Name(), f.Name, f.Type)
			}
			if f.Anonymous && f.Type == h.stub {
				embeds = true
			}
		}
		if !embeds {
			t.Errorf("%s does not embed %s", h.typ.Name(), h.stub.Name())
		}
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
	b.ReportAllocs()
	for b.Loop() {
		if _, ret := lib.DeviceGetName(gpu); ret != nvml.SUCCESS {
			b.Fatal(ret)
		}
	}
}
