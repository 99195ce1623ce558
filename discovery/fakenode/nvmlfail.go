package fakenode

import (
	"fmt"
	"sync/atomic"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlFailures are the errors SetNVMLFailure plays, by the name the fault
// hook takes: what NVML answers with its driver unloaded or hung, or with
// every GPU fallen off the bus.
var nvmlFailures = map[string]nvml.Return{
	"unknown":           nvml.ERROR_UNKNOWN,
	"gpu-is-lost":       nvml.ERROR_GPU_IS_LOST,
	"uninitialized":     nvml.ERROR_UNINITIALIZED,
	"driver-not-loaded": nvml.ERROR_DRIVER_NOT_LOADED,
}

// NVMLFailureByName returns the error of a SetNVMLFailure name
// ("unknown", "gpu-is-lost", "uninitialized", "driver-not-loaded"); ""
// is SUCCESS, NVML answering.
func NVMLFailureByName(name string) (nvml.Return, error) {
	if name == "" {
		return nvml.SUCCESS, nil
	}
	if r, ok := nvmlFailures[name]; ok {
		return r, nil
	}
	return nvml.SUCCESS, fmt.Errorf("%q is not an NVML failure (unknown, gpu-is-lost, uninitialized, driver-not-loaded; empty: none)", name)
}

// nvmlFailure is the error every NVML call answers now; SUCCESS while
// NVML answers.
type nvmlFailure struct{ ret atomic.Int32 }

// get returns the error NVML answers now, SUCCESS for none.
func (f *nvmlFailure) get() nvml.Return { return nvml.Return(f.ret.Load()) }

// SetNVMLFailure makes NVML fail as a node whose driver was unloaded, hung
// or lost every GPU does: with ret other than SUCCESS, the library's calls
// (Init, the system queries, the device count and handles, event sets) and
// the waits of event sets already made answer ret, so that neither
// discovery nor the health watcher reaches a GPU. SUCCESS makes NVML answer
// again, with the same GPUs and UUIDs.
func (n *Node) SetNVMLFailure(ret nvml.Return) {
	n.nvmlFail.ret.Store(int32(ret))
}
