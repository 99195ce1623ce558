package fakenode

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Injector plays NVML events on a fake node: a Node, or a source that
// hands out the current one.
type Injector interface {
	// InjectXID plays an XID error on the GPU with the given index.
	InjectXID(gpu int, xid uint64) error
	// InjectMIGXID plays an XID error on one MIG device of a GPU.
	InjectMIGXID(gpu, gi, ci int, xid uint64) error
	// InjectECCDoubleBit plays a double-bit ECC error on a GPU.
	InjectECCDoubleBit(gpu int) error
	// ResetGPU resets a GPU as nvidia-smi --gpu-reset does.
	ResetGPU(gpu int) error
	// SetRecoveryAction sets the recovery action the driver asks for.
	SetRecoveryAction(gpu int, action nvml.DeviceGpuRecoveryAction) error
	// SetHealth replaces a GPU's failure evidence.
	SetHealth(gpu int, h HealthSpec) error
	// SetNVMLFailure makes every NVML call answer ret (SUCCESS: none).
	SetNVMLFailure(ret nvml.Return)
}

var _ Injector = (*Node)(nil)

// Bounds of the numbers FaultHandler takes: XIDs are small positive
// numbers in NVIDIA's tables; GPU, GPU-instance and compute-instance
// indexes are far below maxFaultIndex.
const (
	maxFaultXID   = 1<<16 - 1
	maxFaultIndex = 1<<16 - 1
)

// FaultHandler serves the fault hooks that tests and benchmarks use to
// play a GPU failure on node:
//
//	POST /fake/xid?gpu=3&xid=79[&gi=1&ci=0]
//	POST /fake/ecc?gpu=3
//	POST /fake/reset?gpu=3                      the GPU is reset
//	POST /fake/recovery-action?gpu=3&action=gpu-reset
//	POST /fake/health?gpu=3  {"retiredPagesPending": true}   (the file's gpus[].health)
//	POST /fake/nvml?fail=unknown                every NVML call fails; no fail: answers again
//
// A parameter that is not a number or out of range, an unknown name or a
// bad body is refused (400, naming it and its value); success is 204.
func FaultHandler(node Injector) http.Handler {
	mux := http.NewServeMux()
	for _, path := range []string{"/fake/xid", "/fake/ecc", "/fake/reset", "/fake/recovery-action", "/fake/health"} {
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) { inject(node, w, r) })
	}
	mux.HandleFunc("POST /fake/nvml", func(w http.ResponseWriter, r *http.Request) {
		ret, err := NVMLFailureByName(r.URL.Query().Get("fail"))
		if err != nil {
			http.Error(w, "query parameter fail: "+err.Error(), http.StatusBadRequest)
			return
		}
		node.SetNVMLFailure(ret)
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// inject plays the event a fault request asks for.
func inject(node Injector, w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	num := func(name string) (int, error) {
		v, err := strconv.Atoi(q.Get(name))
		if err != nil {
			return 0, fmt.Errorf("query parameter %s: %q is not a number", name, q.Get(name))
		}
		limit := maxFaultIndex
		if name == "xid" {
			limit = maxFaultXID
		}
		if v < 0 || v > limit {
			return 0, fmt.Errorf("query parameter %s: %d is out of range (0..%d)", name, v, limit)
		}
		return v, nil
	}
	gpu, err := num("gpu")
	if err == nil {
		err = injectAt(node, r, gpu, num)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// maxHealthBody bounds the body of POST /fake/health.
const maxHealthBody = 64 << 10

// injectAt plays the fault of r's path on gpu, reading its other
// parameters with num.
func injectAt(node Injector, r *http.Request, gpu int, num func(string) (int, error)) error {
	switch r.URL.Path {
	case "/fake/ecc":
		return node.InjectECCDoubleBit(gpu)
	case "/fake/reset":
		return node.ResetGPU(gpu)
	case "/fake/recovery-action":
		name := r.URL.Query().Get("action")
		action, ok := recoveryActionByName(name)
		if !ok {
			return fmt.Errorf("query parameter action: %q is not a recovery action (%v)", name, recoveryActionNames)
		}
		return node.SetRecoveryAction(gpu, action)
	case "/fake/health":
		var h HealthSpec
		dec := json.NewDecoder(io.LimitReader(r.Body, maxHealthBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&h); err != nil {
			return fmt.Errorf("body: the GPU's health as the fake node file's gpus[].health: %w", err)
		}
		return node.SetHealth(gpu, h)
	}
	mig := r.URL.Query().Has("gi")
	xid, err := num("xid")
	if err != nil {
		return err
	}
	if !mig {
		return node.InjectXID(gpu, uint64(xid))
	}
	gi, err := num("gi")
	if err != nil {
		return err
	}
	ci, err := num("ci")
	if err != nil {
		return err
	}
	return node.InjectMIGXID(gpu, gi, ci, uint64(xid))
}
