package fakenode

// The fake's handle types embed the empty stub types in stubs_gen.go
// (unsupportedLibrary, unsupportedDevice, unsupportedGpuInstance,
// unsupportedComputeInstance, unsupportedEventSet) and define the methods
// the fake implements, which shadow the stubs'. Every other method of the
// NVML API answers ERROR_NOT_SUPPORTED (with zero values), as a driver does
// for a feature the hardware lacks. The library forwards handle-first calls
// (DeviceGetName(device)) to the handle's method (device.GetName()), as the
// real library does.
//
// The stubs are generated methods rather than go-nvml's moq mocks with
// every func field set: a mock appends the arguments of every call to a
// slice it never trims, so a fake node's heap grew by about 16 bytes per
// NVML call for the life of the process (TestCallsRetainNothing). Before
// the mocks, reflect.MakeFunc stubs cost 1-3 ms of start-up CPU and a
// reflective call per forwarded NVML query.

//go:generate go run ./internal/genstubs -o stubs_gen.go
