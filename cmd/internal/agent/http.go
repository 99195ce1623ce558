package agent

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func listenTCP(addr string) (net.Listener, error) {
	return net.Listen("tcp", addr)
}

// faultSource is a GPU source that plays GPU failures on request (a fake
// node): the agent serves its fault hooks (/fake/xid, /fake/ecc) and its
// own, /fake/stall. A real node serves no /fake/* at all.
type faultSource interface {
	FaultHandler() http.Handler
}

// handler serves the probes, the metrics, the sinks' own endpoints and, on
// a fake node, the fault hooks that tests and benchmarks use.
func (a *Agent) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{Registry: a.registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.live.Check(); err != nil {
			http.Error(w, "not live: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	for _, s := range a.sinks {
		if e, ok := s.(Endpoints); ok {
			e.Endpoints(mux)
		}
	}
	if e, ok := a.health.(Endpoints); ok {
		e.Endpoints(mux) // GET /debug/health: featureplug health
	}
	if f, ok := a.cfg.Source.(faultSource); ok {
		mux.Handle("POST /fake/", f.FaultHandler())
		mux.HandleFunc("POST /fake/stall", a.stallLoop)
	}
	return mux
}

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
