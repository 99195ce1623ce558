package fakenode

import (
	"fmt"
	"net/http"
	"strconv"
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
//
// A parameter that is not a number or out of range is refused (400,
// naming it and its value); success is 204.
func FaultHandler(node Injector) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /fake/xid", func(w http.ResponseWriter, r *http.Request) { inject(node, w, r) })
	mux.HandleFunc("POST /fake/ecc", func(w http.ResponseWriter, r *http.Request) { inject(node, w, r) })
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
		err = injectAt(node, r.URL.Path, gpu, num, q.Has("gi"))
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// injectAt plays the event of path on gpu, reading its other parameters
// with num.
func injectAt(node Injector, path string, gpu int, num func(string) (int, error), mig bool) error {
	if path == "/fake/ecc" {
		return node.InjectECCDoubleBit(gpu)
	}
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
