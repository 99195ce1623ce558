package fakenode

// The fake's devices embed go-nvml's mock structs and override the methods
// the fake implements (a method of the fake's handle type shadows the
// mock's). The mocks panic on any method whose func field is unset; the
// generated fill functions in stubs_gen.go (fillInterface, fillDevice,
// fillGpuInstance, fillComputeInstance, fillEventSet) set every func field
// so that the rest of the NVML API answers ERROR_NOT_SUPPORTED (with zero
// values) instead, as a driver does for a feature the hardware lacks. The
// library forwards handle-first calls (DeviceGetName(device)) to the
// handle's method (device.GetName()), as the real library does.
//
// They are generated rather than built with reflect.MakeFunc at run time:
// building the reflective stubs cost 1-3 ms of start-up CPU, filling
// them by reflection about 20 µs per handle, and every forwarded call went
// through reflect.Value.Call.

//go:generate go run ./internal/genstubs -o stubs_gen.go
