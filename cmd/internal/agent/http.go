package agent

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func listenTCP(addr string) (net.Listener, error) {
	return net.Listen("tcp", addr)
}

// handler serves the probes, the metrics and, on a fake node, the event
// injection endpoints that tests and benchmarks use to play a GPU failure.
func (a *Agent) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{Registry: a.registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.manager.Ready() {
			http.Error(w, "not ready: resources of the first plan are not all registered with the kubelet", http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /debug/content", func(w http.ResponseWriter, _ *http.Request) {
		a.mu.Lock()
		c := a.published
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c)
	})
	mux.HandleFunc("POST /fake/xid", a.injectFake)
	mux.HandleFunc("POST /fake/ecc", a.injectFake)
	return mux
}

// injectFake injects an NVML event into the fake node:
//
//	POST /fake/xid?gpu=3&xid=79[&gi=1&ci=0]
//	POST /fake/ecc?gpu=3
func (a *Agent) injectFake(w http.ResponseWriter, r *http.Request) {
	node := a.cfg.Source.Fake()
	if node == nil {
		http.Error(w, "event injection needs a fake node (--fake-node)", http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	num := func(name string) (int, error) {
		v, err := strconv.Atoi(q.Get(name))
		if err != nil {
			return 0, fmt.Errorf("query parameter %s: %q is not a number", name, q.Get(name))
		}
		return v, nil
	}
	gpu, err := num("gpu")
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch r.URL.Path {
	case "/fake/ecc":
		err = node.InjectECCDoubleBit(gpu)
	default:
		var xid int
		if xid, err = num("xid"); err != nil {
			break
		}
		if q.Has("gi") {
			var gi, ci int
			if gi, err = num("gi"); err != nil {
				break
			}
			if ci, err = num("ci"); err != nil {
				break
			}
			err = node.InjectMIGXID(gpu, gi, ci, uint64(xid))
		} else {
			err = node.InjectXID(gpu, uint64(xid))
		}
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
