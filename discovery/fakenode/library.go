package fakenode

import (
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// library is the node's nvml.Interface. The methods below are what the fake
// implements; every other one comes from the embedded stub and answers
// ERROR_NOT_SUPPORTED, or is forwarded to the handle it is called with.
type library struct {
	unsupportedLibrary
	node          *Node
	driverVersion string
	nvmlVersion   string
	cudaVersion   int
}

var _ nvml.Interface = (*library)(nil)

func newLibrary(n *Node, l *layout) *library {
	return &library{
		node:          n,
		driverVersion: l.driverVersion,
		nvmlVersion:   strconv.Itoa(l.cudaMajor) + "." + l.driverVersion,
		cudaVersion:   l.cudaVersion,
	}
}

// Init succeeds (the fake needs no driver; calls made without Init work
// too), unless NVML fails (SetNVMLFailure).
func (l *library) Init() nvml.Return { return l.node.nvmlFail.get() }

// InitWithFlags answers like Init.
func (l *library) InitWithFlags(uint32) nvml.Return { return l.node.nvmlFail.get() }

// Shutdown succeeds; the node keeps its state.
func (l *library) Shutdown() nvml.Return { return nvml.SUCCESS }

// ErrorString names a return code.
func (l *library) ErrorString(r nvml.Return) string { return r.Error() }

// Extensions reports every NVML symbol as present: go-nvlib then calls the
// method, which answers for itself.
func (l *library) Extensions() nvml.ExtendedInterface { return extensions{} }

// extensions is the fake library's nvml.ExtendedInterface.
type extensions struct{}

// LookupSymbol reports every symbol as present.
func (extensions) LookupSymbol(string) error { return nil }

// SystemGetDriverVersion returns the file's driverVersion.
func (l *library) SystemGetDriverVersion() (string, nvml.Return) {
	return l.driverVersion, l.node.nvmlFail.get()
}

// SystemGetNVMLVersion returns "<CUDA major>.<driver version>", as NVML does.
func (l *library) SystemGetNVMLVersion() (string, nvml.Return) {
	return l.nvmlVersion, l.node.nvmlFail.get()
}

// SystemGetCudaDriverVersion returns the CUDA version as an int, 12080 for 12.8.
func (l *library) SystemGetCudaDriverVersion() (int, nvml.Return) {
	return l.cudaVersion, l.node.nvmlFail.get()
}

// SystemGetCudaDriverVersion_v2 is SystemGetCudaDriverVersion.
func (l *library) SystemGetCudaDriverVersion_v2() (int, nvml.Return) {
	return l.cudaVersion, l.node.nvmlFail.get()
}

// DeviceGetCount returns the number of GPUs.
func (l *library) DeviceGetCount() (int, nvml.Return) {
	if ret := l.node.nvmlFail.get(); ret != nvml.SUCCESS {
		return 0, ret
	}
	return len(l.node.gpus), nvml.SUCCESS
}

// DeviceGetHandleByIndex returns GPU index; the same handle every time.
func (l *library) DeviceGetHandleByIndex(index int) (nvml.Device, nvml.Return) {
	if ret := l.node.nvmlFail.get(); ret != nvml.SUCCESS {
		return nil, ret
	}
	if index < 0 || index >= len(l.node.gpus) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return l.node.gpus[index].handle, nvml.SUCCESS
}

// DeviceGetHandleByUUID returns the GPU or MIG device with the given UUID.
func (l *library) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	if ret := l.node.nvmlFail.get(); ret != nvml.SUCCESS {
		return nil, ret
	}
	if uuid == "" {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	for _, g := range l.node.gpus {
		if g.uuid == uuid {
			return g.handle, nvml.SUCCESS
		}
	}
	if strings.HasPrefix(uuid, "MIG-") {
		l.node.mu.RLock()
		defer l.node.mu.RUnlock()
		for _, g := range l.node.gpus {
			for _, ci := range g.computeInstancesLocked() {
				if ci.uuid == uuid {
					return ci.handle, nvml.SUCCESS
				}
			}
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// DeviceGetHandleByPciBusId returns the GPU at a PCI address, given in
// either NVML form ("00000000:07:00.0" or "0000:07:00.0"), any case.
func (l *library) DeviceGetHandleByPciBusId(busID string) (nvml.Device, nvml.Return) {
	if ret := l.node.nvmlFail.get(); ret != nvml.SUCCESS {
		return nil, ret
	}
	id := strings.ToUpper(busID)
	for _, g := range l.node.gpus {
		if id == g.addr.String() || id == g.addr.legacy() {
			return g.handle, nvml.SUCCESS
		}
	}
	if busID == "" {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// EventSetCreate returns a new, empty event set.
func (l *library) EventSetCreate() (nvml.EventSet, nvml.Return) {
	if ret := l.node.nvmlFail.get(); ret != nvml.SUCCESS {
		return nil, ret
	}
	return newEventSet(l.node), nvml.SUCCESS
}
