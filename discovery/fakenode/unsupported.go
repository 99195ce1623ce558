package fakenode

import (
	"reflect"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// The fake's devices embed go-nvml's mock structs and override the methods
// the fake implements. The mocks panic on any method whose func field is
// unset; stubs fills every func field so that the rest of the NVML API
// answers ERROR_NOT_SUPPORTED (with zero values) instead, as a driver does
// for a feature the hardware lacks.

// stubs holds, per mock struct type, a function value for each of its func
// fields. It is built once, on first use, and only read afterwards.
type stubs struct {
	byType map[reflect.Type][]stubField
}

// stubField is the value for one func field of a mock struct.
type stubField struct {
	index int
	fn    reflect.Value
}

// forwardTargets are the handle types whose package-level NVML calls
// (nvml.Interface's DeviceGetName(device), GpuInstanceGetInfo(gi), ...) the
// fake's library forwards to the handle's method, as the real library does.
func forwardTargets() map[string]reflect.Type {
	return map[string]reflect.Type{
		"Device":          reflect.TypeFor[nvml.Device](),
		"GpuInstance":     reflect.TypeFor[nvml.GpuInstance](),
		"ComputeInstance": reflect.TypeFor[nvml.ComputeInstance](),
		"EventSet":        reflect.TypeFor[nvml.EventSet](),
	}
}

// sharedStubs returns the stub tables, built once: they depend only on
// go-nvml's types, and building them costs far more than building a node.
var sharedStubs = sync.OnceValue(newStubs)

func newStubs() *stubs {
	s := &stubs{byType: map[reflect.Type][]stubField{}}
	s.add(reflect.TypeFor[mock.Interface](), true)
	s.add(reflect.TypeFor[mock.Device](), false)
	s.add(reflect.TypeFor[mock.GpuInstance](), false)
	s.add(reflect.TypeFor[mock.ComputeInstance](), false)
	s.add(reflect.TypeFor[mock.EventSet](), false)
	return s
}

// add builds the stub table of mock struct type t. With forward, a method
// that takes a handle first is forwarded to that handle's method of the same
// name.
func (s *stubs) add(t reflect.Type, forward bool) {
	targets := forwardTargets()
	var fields []stubField
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type.Kind() != reflect.Func || !strings.HasSuffix(f.Name, "Func") {
			continue
		}
		method := strings.TrimSuffix(f.Name, "Func")
		fn := unsupportedFunc(f.Type)
		if forward {
			if fwd, ok := forwarder(targets, method, f.Type); ok {
				fn = fwd
			}
		}
		fields = append(fields, stubField{index: i, fn: fn})
	}
	s.byType[t] = fields
}

// fill sets every func field of the mock struct m points to.
func (s *stubs) fill(m any) {
	v := reflect.ValueOf(m).Elem()
	for _, f := range s.byType[v.Type()] {
		v.Field(f.index).Set(f.fn)
	}
}

// unsupportedFunc returns a function of type ft that returns zero values
// and ERROR_NOT_SUPPORTED in every nvml.Return result.
func unsupportedFunc(ft reflect.Type) reflect.Value {
	return reflect.MakeFunc(ft, func([]reflect.Value) []reflect.Value {
		return results(ft, nvml.ERROR_NOT_SUPPORTED)
	})
}

// results builds zero results of ft with ret in every nvml.Return result.
func results(ft reflect.Type, ret nvml.Return) []reflect.Value {
	returnType := reflect.TypeFor[nvml.Return]()
	out := make([]reflect.Value, ft.NumOut())
	for i := range out {
		if ft.Out(i) == returnType {
			out[i] = reflect.ValueOf(ret)
		} else {
			out[i] = reflect.Zero(ft.Out(i))
		}
	}
	return out
}

// forwarder returns, for a library method like DeviceGetName(nvml.Device)
// whose handle type has a matching method GetName(), a function that calls
// the handle's method (ERROR_INVALID_ARGUMENT for a nil handle).
func forwarder(targets map[string]reflect.Type, method string, ft reflect.Type) (reflect.Value, bool) {
	if ft.NumIn() == 0 {
		return reflect.Value{}, false
	}
	for prefix, target := range targets {
		name, ok := strings.CutPrefix(method, prefix)
		if !ok || ft.In(0) != target {
			continue
		}
		m, ok := target.MethodByName(name)
		if !ok || !sameSignature(m.Type, ft) {
			continue
		}
		return reflect.MakeFunc(ft, func(args []reflect.Value) []reflect.Value {
			if args[0].IsNil() {
				return results(ft, nvml.ERROR_INVALID_ARGUMENT)
			}
			return args[0].MethodByName(name).Call(args[1:])
		}), true
	}
	return reflect.Value{}, false
}

// sameSignature reports whether method type m (without receiver) equals the
// library function type ft without its first (handle) parameter.
func sameSignature(m, ft reflect.Type) bool {
	if m.NumIn() != ft.NumIn()-1 || m.NumOut() != ft.NumOut() || m.IsVariadic() != ft.IsVariadic() {
		return false
	}
	for i := range m.NumIn() {
		if m.In(i) != ft.In(i+1) {
			return false
		}
	}
	for i := range m.NumOut() {
		if m.Out(i) != ft.Out(i) {
			return false
		}
	}
	return true
}
