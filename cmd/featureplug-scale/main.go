// Command featureplug-scale runs many featureplug agents in one process, each
// a simulated GPU node against a real API server: the driver of `make scale`
// (test/scale), which measures what N agents cost one control plane.
//
// Every agent is the real agent (cmd/internal/agent) with its own API
// client and connection, its own fake node (the bundled machines in turn)
// and its own NodeFeature; the agent package is internal to cmd/, so the
// test module runs this command rather than importing it. Device-plugin
// serving is off except for the first --serve agents, whose kubelet
// directories are --kubelet-root/<node> (the test puts a kubelet-side peer
// there). The rules file is shared; only the first --inotify agents watch
// it with inotify (an instance each, and the machine's limit is shared),
// the rest check it every --file-check-interval, as an agent does when its
// node has no inotify instance left.
//
// GET /status on --status-addr answers what each agent last did, as JSON
// (see status), read from the agents' own log records.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/featureplug/featureplug/cmd/internal/agent"
	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/cmd/internal/kube"
	"github.com/featureplug/featureplug/cmd/internal/rulesengine"
	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/discovery/gpusource"
	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
)

type options struct {
	kubeconfig         string
	nodes              int
	prefix             string
	namespace          string
	fakeNodes          string
	rules              string
	rediscoverInterval time.Duration
	resyncInterval     time.Duration
	fileCheckInterval  time.Duration
	healthWait         time.Duration
	inotify            int
	serve              int
	kubeletRoot        string
	statusAddr         string
	logFile            string
	startSpread        time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the API server (required)")
	flag.IntVar(&o.nodes, "nodes", 50, "number of simulated nodes (agents)")
	flag.StringVar(&o.prefix, "prefix", "scale-", "node name prefix: nodes are <prefix>00000, <prefix>00001, ...")
	flag.StringVar(&o.namespace, "namespace", "featureplug", "namespace of the NodeFeature objects")
	flag.StringVar(&o.fakeNodes, "fake-nodes", strings.Join(fakenode.BundledNames(), ","), "fake nodes given to the agents in turn (bundled names or files)")
	flag.StringVar(&o.rules, "rules", "", "rules file (or builtin) every agent uses")
	flag.DurationVar(&o.rediscoverInterval, "rediscover-interval", agentconfig.DefaultRediscoverInterval, "each agent's re-discovery period")
	flag.DurationVar(&o.resyncInterval, "resync-interval", agentconfig.DefaultResyncInterval, "each agent's NodeFeature resync period")
	flag.DurationVar(&o.fileCheckInterval, "file-check-interval", agentconfig.DefaultFileCheckInterval, "period of the rules file check of the agents without inotify")
	flag.DurationVar(&o.healthWait, "health-wait", 0, "bound of one NVML event wait of the health watchers (0: the agent's default)")
	flag.IntVar(&o.inotify, "inotify", 0, "number of agents that watch the rules file with inotify")
	flag.IntVar(&o.serve, "serve", 0, "number of agents that serve device plugins")
	flag.StringVar(&o.kubeletRoot, "kubelet-root", "", "parent of the serving agents' kubelet directories (<root>/<node>)")
	flag.StringVar(&o.statusAddr, "status-addr", "127.0.0.1:0", "address of GET /status")
	flag.StringVar(&o.logFile, "log-file", "", "file for warnings and errors of the agents and client-go (default stderr)")
	flag.DurationVar(&o.startSpread, "start-spread", 0, "spread the agents' starts evenly over this long (0: all at once)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "featureplug-scale:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	switch {
	case o.kubeconfig == "":
		return errors.New("--kubeconfig: empty")
	case o.nodes < 1:
		return fmt.Errorf("--nodes: %d, want at least 1", o.nodes)
	case o.serve > 0 && o.kubeletRoot == "":
		return errors.New("--serve needs --kubelet-root")
	}
	fakes := splitList(o.fakeNodes)
	if len(fakes) == 0 {
		return errors.New("--fake-nodes: empty")
	}
	raiseFileLimit()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	logOut := os.Stderr
	if o.logFile != "" {
		f, err := os.OpenFile(o.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("--log-file: %w", err)
		}
		defer func() { _ = f.Close() }() // the log's last lines are best effort
		logOut = f
	}
	base := slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelWarn})
	// client-go's logs (reflector errors while the API server is away) go
	// to the same place, warnings and errors only.
	klog.SetSlogLogger(slog.New(base).With("component", "client-go"))

	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig %s: %w", o.kubeconfig, err)
	}
	cfg.UserAgent = "featureplug-scale"

	st := &status{agents: make([]*agentStatus, o.nodes)}
	agents := make([]*agent.Agent, o.nodes)
	for i := range o.nodes {
		name := fmt.Sprintf("%s%05d", o.prefix, i)
		as := &agentStatus{Node: name, Fake: fakes[i%len(fakes)]}
		st.agents[i] = as
		a, err := newAgent(o, cfg, i, as, slog.New(&recordHandler{next: base, st: as, mu: &st.mu}).With("node", name))
		if err != nil {
			return fmt.Errorf("agent %s: %w", name, err)
		}
		agents[i] = a
		st.registries = append(st.registries, a.Registry())
	}

	ln, err := net.Listen("tcp", o.statusAddr)
	if err != nil {
		return fmt.Errorf("--status-addr %s: %w", o.statusAddr, err)
	}
	srv := &http.Server{Handler: st, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	fmt.Printf("status http://%s/status\n", ln.Addr())

	var wg sync.WaitGroup
	errs := make(chan error, o.nodes)
	for i, a := range agents {
		if o.startSpread > 0 && i > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(o.startSpread / time.Duration(o.nodes)):
			}
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st.set(i, func(s *agentStatus) { s.Started = time.Now() })
			if err := a.Run(ctx); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("agent %s: %w", st.agents[i].Node, err)
			}
		}()
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errs:
		cancel()
	}
	wg.Wait()
	return runErr
}

// newAgent makes agent i: its own fake node, API clients on their own
// connection, and either device plugins under kubeletRoot or none.
func newAgent(o options, base *rest.Config, i int, as *agentStatus, log *slog.Logger) (*agent.Agent, error) {
	src, err := gpusource.OpenFake(as.Fake)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(base)
	// A Proxy function keeps client-go from sharing one cached transport
	// (and so one HTTP/2 connection) between all agents: each has its
	// own, as on a real node.
	cfg.Proxy = http.ProxyFromEnvironment
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("HTTP client: %w", err)
	}
	// The agent's own API client (package kube), as featureplug run makes it.
	api, err := kube.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	serve := i < o.serve
	popts := deviceplugin.Options{}
	if serve {
		popts.KubeletDir = o.kubeletRoot + "/" + as.Node
	}
	return agent.New(agentconfig.Config{
		NodeName:    as.Node,
		Namespace:   o.namespace,
		Source:      src,
		Rules:       o.rules,
		RulesEngine: rulesengine.New(),
		Publish:     labeler.PublishNodeFeature,
		// A simulated node has no agent Pod to own its NodeFeature.
		Owner:              kube.OwnerConfig{Mode: kube.OwnerNode},
		ResyncInterval:     o.resyncInterval,
		RediscoverInterval: o.rediscoverInterval,
		Kube:               api,
		Plugin:             popts,
		NoDevicePlugins:    !serve,
		Health:             discovery.HealthOptions{WaitTimeout: o.healthWait},
		FileCheckInterval:  o.fileCheckInterval,
		NoInotify:          i >= o.inotify, // featureplug-scale --inotify
		Logger:             log,
	})
}

// raiseFileLimit lifts the soft limit of open files to the hard one: each
// agent holds a connection and a few files.
func raiseFileLimit() {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// status is what GET /status answers: one agentStatus per agent.
type status struct {
	mu     sync.Mutex
	agents []*agentStatus
	// registries are the agents' metric registries, in the same order.
	registries []prometheus.Gatherer
}

// agentStatus is what one agent last did, taken from its log records.
type agentStatus struct {
	// Node and Fake name the simulated node and its fake machine.
	Node string `json:"node"`
	Fake string `json:"fake"`
	// Started is when its Run began.
	Started time.Time `json:"started"`
	// Resources are the resource names of the last plan applied, sorted,
	// and PlanAt when it was applied; Plans counts plans applied.
	Resources []string  `json:"resources"`
	PlanAt    time.Time `json:"planAt"`
	Plans     int       `json:"plans"`
	// Writes counts NodeFeature creates and updates, WrittenAt is the
	// last one.
	Writes    int       `json:"writes"`
	WrittenAt time.Time `json:"writtenAt"`
	// Failing is set while publishing fails; Failures counts the runs of
	// failures, RecoveredAt is when the last run ended.
	Failing     bool      `json:"failing"`
	Failures    int       `json:"failures"`
	RecoveredAt time.Time `json:"recoveredAt"`
	// Errors counts records at error level.
	Errors int `json:"errors"`
	// Discoveries and Publishes are the agent's
	// featureplug_discoveries_total{result="ok"} and
	// featureplug_publish_attempts_total by result, read at each request.
	Discoveries float64            `json:"discoveries"`
	Publishes   map[string]float64 `json:"publishes"`
}

func (s *status) set(i int, f func(*agentStatus)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.agents[i])
}

// ServeHTTP answers GET /status.
func (s *status) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/status" {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	out := make([]agentStatus, len(s.agents))
	for i, a := range s.agents {
		out[i] = *a
	}
	s.mu.Unlock()
	for i := range out {
		if i < len(s.registries) && s.registries[i] != nil {
			out[i].Discoveries, out[i].Publishes = counters(s.registries[i])
		}
	}
	body, err := json.Marshal(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// counters reads an agent's discovery and publish counters.
func counters(g prometheus.Gatherer) (discoveries float64, publishes map[string]float64) {
	families, err := g.Gather()
	if err != nil {
		return 0, nil
	}
	publishes = map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			result := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					result = l.GetValue()
				}
			}
			switch f.GetName() {
			case "featureplug_discoveries_total":
				if result == "ok" {
					discoveries += m.GetCounter().GetValue()
				}
			case "featureplug_publish_attempts_total":
				publishes[result] += m.GetCounter().GetValue()
			}
		}
	}
	return discoveries, publishes
}

// recordHandler keeps what an agent's log records say it did (plans,
// writes, publish failures) in its agentStatus and passes records at
// warning level and above on.
type recordHandler struct {
	next  slog.Handler
	st    *agentStatus
	mu    *sync.Mutex
	attrs []slog.Attr
}

// Enabled implements slog.Handler: info records are needed for the
// status, debug ones are not.
func (h *recordHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

// Handle implements slog.Handler.
func (h *recordHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	s := h.st
	switch r.Message {
	case "plan applied":
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "resources" {
				if m, ok := a.Value.Any().(map[string]int); ok {
					s.Resources = slices.Sorted(maps.Keys(m))
				}
				return false
			}
			return true
		})
		s.PlanAt, s.Plans = r.Time, s.Plans+1
	case "created NodeFeature", "updated NodeFeature":
		s.Writes, s.WrittenAt = s.Writes+1, r.Time
		if s.Failing {
			s.Failing, s.RecoveredAt = false, r.Time
		}
	case "publish failed; will retry":
		s.Failing, s.Failures = true, s.Failures+1
	case "published after failures":
		s.Failing, s.RecoveredAt = false, r.Time
	}
	if r.Level >= slog.LevelError {
		s.Errors++
	}
	h.mu.Unlock()
	if r.Level < slog.LevelWarn {
		return nil
	}
	if len(h.attrs) > 0 {
		r = r.Clone()
		r.AddAttrs(h.attrs...)
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *recordHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(slices.Clip(h.attrs), attrs...)
	return &c
}

// WithGroup implements slog.Handler; groups are flattened (only the
// records' messages and top-level attributes are read).
func (h *recordHandler) WithGroup(string) slog.Handler { return h }
