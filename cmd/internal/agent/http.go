package agent

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func listenTCP(addr string) (net.Listener, error) {
	return net.Listen("tcp", addr)
}

// handler serves the probes, the metrics and, on a source that implements
// EventInjector (a fake node), the event
// injection endpoints that tests and benchmarks use to play a GPU failure.
func (a *Agent) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{Registry: a.registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.live.check(); err != nil {
			http.Error(w, "not live: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.manager.Ready() {
			http.Error(w, "not ready: not every resource of the current plan is registered with the kubelet", http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /debug/content", func(w http.ResponseWriter, _ *http.Request) {
		c := a.publisher.content()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c)
	})
	// The test hooks exist only on a source that plays events (a fake
	// node); a real node does not serve /fake/* at all.
	if inj, ok := a.cfg.Source.(EventInjector); ok {
		mux.HandleFunc("POST /fake/xid", func(w http.ResponseWriter, r *http.Request) { injectFake(inj, w, r) })
		mux.HandleFunc("POST /fake/ecc", func(w http.ResponseWriter, r *http.Request) { injectFake(inj, w, r) })
		mux.HandleFunc("POST /fake/stall", a.stallLoop)
	}
	return mux
}

// Bounds of the numbers /fake/xid and /fake/ecc take: XIDs are small
// positive numbers in NVIDIA's tables; GPU, GPU-instance and
// compute-instance indexes are far below maxFakeIndex.
const (
	maxFakeXID   = 1<<16 - 1
	maxFakeIndex = 1<<16 - 1
)

// stallRequestTimeout bounds how long /fake/stall waits for the loop.
const stallRequestTimeout = 10 * time.Second

// stallLoop holds the agent loop still until released, on a fake node
// only: the test hook that shows /healthz failing when the loop makes no
// progress.
//
//	POST /fake/stall          hold the loop (returns once it is held)
//	POST /fake/stall?release  let it go
func (a *Agent) stallLoop(w http.ResponseWriter, r *http.Request) {
	ch, what := a.stall, "hold"
	if r.URL.Query().Has("release") {
		ch, what = a.unstall, "release"
	}
	select {
	case ch <- struct{}{}:
		w.WriteHeader(http.StatusNoContent)
	case <-r.Context().Done():
	case <-time.After(stallRequestTimeout):
		http.Error(w, fmt.Sprintf("the agent loop did not take the %s request within %s", what, stallRequestTimeout), http.StatusConflict)
	}
}

// injectFake injects an NVML event into the fake node:
//
//	POST /fake/xid?gpu=3&xid=79[&gi=1&ci=0]
//	POST /fake/ecc?gpu=3
func injectFake(node EventInjector, w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	num := func(name string) (int, error) {
		v, err := strconv.Atoi(q.Get(name))
		if err != nil {
			return 0, fmt.Errorf("query parameter %s: %q is not a number", name, q.Get(name))
		}
		limit := maxFakeIndex
		if name == "xid" {
			limit = maxFakeXID
		}
		if v < 0 || v > limit {
			return 0, fmt.Errorf("query parameter %s: %d is out of range (0..%d)", name, v, limit)
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
