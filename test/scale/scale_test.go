// Package scale runs N simulated GPU nodes, each a real featureplug agent,
// against one real kube-apiserver, etcd and nfd-master, and measures what
// they cost the control plane (docs/scale.md). The agents run in one
// process, cmd/featureplug-scale, which the test builds from the product
// module (the agent package is internal to cmd/).
//
// TestScale is the smoke test of the suite at SCALE_NODES=50 (the default
// here): it asserts that at steady state the agents write nothing and read
// no Node or NodeFeature, however often they re-discover, and that every
// node gets labelled and re-labelled after a rules change. `make scale`
// runs it at 1,000 nodes with SCALE_FULL=1, which adds the API-server
// restart and a longer steady window, and prints the table.
// TestNodeFeatureSize holds every bundled machine's NodeFeature, as
// stored, to a recorded budget (size_test.go).
package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/test/harness"
)

// Settings of a run, from the environment.
const (
	scaleNodesEnv  = "SCALE_NODES"  // number of simulated nodes (default 50)
	scaleFullEnv   = "SCALE_FULL"   // "1": the benchmark run (restart, longer window)
	scaleSteadyEnv = "SCALE_STEADY" // minimum steady-state window (default 20s, 120s full)
	scaleOutEnv    = "SCALE_OUT"    // file to write the table to (markdown)
	// scaleNFDParallelismEnv sets nfd-master's -nfd-api-parallelism
	// (default scaleNFDParallelism; "10" is nfd-master's own default).
	scaleNFDParallelismEnv = "SCALE_NFD_PARALLELISM"
)

// scaleNFDParallelism is the -nfd-api-parallelism nfd-master runs with:
// the setting docs/scale.md recommends for large clusters. Each of
// nfd-master's node updaters has its own API client at client-go's default
// 5 requests/s and spends two requests (GET and PATCH of the Node) per
// node, so nfd-master relabels at most 2.5 nodes/s per updater: 25 nodes/s
// with its default of 10, 125 with 50.
const scaleNFDParallelism = 50

// scaleNamespace holds the agents' NodeFeatures.
const scaleNamespace = "featureplug"

// scaleMaster is the Node nfd-master runs "on".
const scaleMaster = "scale-master"

// scalePrefix starts the simulated nodes' names.
const scalePrefix = "scale-"

// scaleCGOFlags is the CGO_CFLAGS value every build in the project uses.
const scaleCGOFlags = "-O2 -g -Wno-deprecated-declarations"

// scaleRules is the rules file: every GPU and MIG device becomes resource.
func scaleRules(resource string) string {
	return fmt.Sprintf(`apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: gpu
  devices: gpu
  resource: %[1]s
- name: mig
  devices: mig
  resource: %[1]s
`, resource)
}

// scaleCountLabel is the node label that says a node's plan serves resource.
func scaleCountLabel(resource string) string { return resource + ".count" }

// scaleNFRLabel is the label the test's NodeFeatureRule gives every GPU node.
const scaleNFRLabel = nfdv1alpha1.FeatureLabelNs + "/scale-nfr"

// scaleRun is one run: the control plane, the driver and the figures.
type scaleRun struct {
	t       *testing.T
	ctx     context.Context
	n       int
	full    bool
	api     *harness.APIServer
	master  *harness.NFDMaster
	driver  *harness.Process
	status  string
	rules   string
	nodes   cache.Store
	figures [][2]string
}

func TestScale(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, nfd-master and N agents")
	}
	n := 50
	if v := os.Getenv(scaleNodesEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("$%s=%q: want a positive number", scaleNodesEnv, v)
		}
	}
	full := os.Getenv(scaleFullEnv) == "1"
	steady := 20 * time.Second
	if full {
		steady = 2 * time.Minute
	}
	if v := os.Getenv(scaleSteadyEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("$%s=%q: %v", scaleSteadyEnv, v, err)
		}
		steady = d
	}
	bin := scaleBuildDriver(t)

	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	r := &scaleRun{t: t, ctx: ctx, n: n, full: full}
	t.Cleanup(r.report)
	r.fig("nodes (agents)", strconv.Itoa(n))
	r.fig("machine", fmt.Sprintf("%d CPUs, load average at start %s", runtime.NumCPU(), scaleLoadAvg()))
	r.api = harness.StartAPIServer(t)
	parallelism := scaleNFDParallelism
	if v := os.Getenv(scaleNFDParallelismEnv); v != "" {
		var err error
		if parallelism, err = strconv.Atoi(v); err != nil || parallelism < 1 {
			t.Fatalf("$%s=%q: want a positive number", scaleNFDParallelismEnv, v)
		}
	}
	r.fig("nfd-master -nfd-api-parallelism", strconv.Itoa(parallelism))
	r.master = harness.StartNFDMaster(t, r.api, scaleMaster, "-nfd-api-parallelism="+strconv.Itoa(parallelism))
	if err := r.api.CreateNamespace(ctx, scaleNamespace); err != nil {
		t.Fatal(err)
	}
	r.createNodes()
	r.watchNodes()

	dir := t.TempDir()
	r.rules = filepath.Join(dir, "rules.yaml")
	r.writeRules("nvidia.com/scale-a")
	// Two agents serve their plans to a kubelet-side peer, as on a real
	// node; the others only publish.
	const serve = 2
	kubelets := filepath.Join(dir, "kubelet")
	for i := range min(serve, n) {
		harness.StartKubeletPeer(t, filepath.Join(kubelets, scaleNode(i)))
	}
	port, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	rediscover := "30s" // the agent's default
	if !full {
		// Often, so that a short window sees many re-discoveries, each of
		// which must read no Node.
		rediscover = "2s"
	}
	before := r.apiMetrics()
	start := time.Now()
	r.driver = harness.StartProcess(t, harness.ProcessSpec{
		Name: "featureplug-scale",
		Path: bin,
		Args: []string{
			"--kubeconfig", r.api.KubeconfigPath,
			"--nodes", strconv.Itoa(n),
			"--prefix", scalePrefix,
			"--namespace", scaleNamespace,
			"--rules", r.rules,
			"--rediscover-interval", rediscover,
			"--file-check-interval", "2s",
			"--health-wait", "1s",
			"--inotify", "2",
			"--serve", strconv.Itoa(serve),
			"--kubelet-root", kubelets,
			"--status-addr", "127.0.0.1:" + strconv.Itoa(port),
		},
	})
	r.status = fmt.Sprintf("http://127.0.0.1:%d/status", port)

	// Start: every agent planned and published, every Node labelled.
	planned := r.waitAgents("every agent planned nvidia.com/scale-a", func(a scaleAgent) bool {
		return slices.Equal(a.Resources, []string{"nvidia.com/scale-a"}) && a.Publishes["ok"] >= 1
	})
	labelled := r.waitNodes("every Node labelled by nfd-master", func(n *corev1.Node) bool {
		_, ok := n.Labels[scaleCountLabel("nvidia.com/scale-a")]
		return ok
	})
	r.fig("start -> all agents planned and published", scaleDur(planned.Sub(start)))
	r.fig("start -> nfd-master labelled all nodes", scaleDur(labelled.Sub(start)))
	startReq := scaleDelta(before.requests, r.apiMetrics().requests)
	r.fig("requests during start, per node", scaleRequests(startReq, float64(n)))
	r.nodeFeatureSizes()

	r.steadyState(steady)
	r.rulesChange()
	r.nodeFeatureRule()
	if full {
		r.apiServerRestart()
	}
	r.fig("load average at end", scaleLoadAvg())
}

// steadyState measures a window in which nothing changes: API requests by
// verb and resource, and CPU of the agents, nfd-master and the API server.
// It asserts that the agents write nothing and read no Node or NodeFeature.
// The window ends once it lasted min and every agent re-discovered at least
// twice in it (a re-discovery must read no Node).
func (r *scaleRun) steadyState(minimum time.Duration) {
	t := r.t
	// Settle first: nfd-master's last Node patches of the start must not
	// count as steady-state writes.
	r.waitQuiet()
	m0, d0 := r.apiMetrics(), scaleReadProc(t, r.driver.Pid())
	n0 := scaleReadProc(t, r.master.Pid())
	disc0 := map[string]float64{}
	for _, a := range r.agents() {
		disc0[a.Node] = a.Discoveries
	}
	begin := time.Now()
	r.waitAgents("a steady-state window of "+minimum.String()+" with two re-discoveries per agent", func(a scaleAgent) bool {
		return time.Since(begin) >= minimum && a.Discoveries >= disc0[a.Node]+2
	})
	window := time.Since(begin)
	m1, d1 := r.apiMetrics(), scaleReadProc(t, r.driver.Pid())
	n1 := scaleReadProc(t, r.master.Pid())
	delta := scaleDelta(m0.requests, m1.requests)
	hours := window.Hours()
	perNodeHour := float64(r.n) * hours
	r.fig("steady-state window", scaleDur(window))
	r.fig("steady state: API requests per node-hour (all clients)", scaleRequests(delta, perNodeHour))
	var writes []string
	for _, k := range scaleSortedKeys(delta) {
		verb, res, _ := strings.Cut(k, " ")
		agentRes := res == "nodes" || res == "nodefeatures" || res == "events" || res == "nodes/status"
		if agentRes && (scaleIsWrite(verb) || verb == "GET" || verb == "LIST") {
			writes = append(writes, fmt.Sprintf("%s: %v", k, delta[k]))
		}
	}
	if len(writes) > 0 {
		t.Errorf("at steady state the agents wrote or read (want watches only): %s", strings.Join(writes, ", "))
	}
	r.fig("steady state: agent CPU per node-hour", fmt.Sprintf("%.2f CPU-s (whole driver process: %.1f%% of a core for %d agents)",
		(d1.cpu-d0.cpu)/perNodeHour, 100*(d1.cpu-d0.cpu)/window.Seconds(), r.n))
	r.fig("agent process memory (RSS)", fmt.Sprintf("%s total, %s per agent", scaleBytes(d1.rss), scaleBytes(d1.rss/float64(r.n))))
	r.fig("nfd-master CPU at steady state / RSS", fmt.Sprintf("%.1f%% of a core / %s", 100*(n1.cpu-n0.cpu)/window.Seconds(), scaleBytes(n1.rss)))
	r.fig("kube-apiserver CPU at steady state / RSS", fmt.Sprintf("%.1f%% of a core / %s", 100*(m1.cpu-m0.cpu)/window.Seconds(), scaleBytes(m1.rss)))
	r.fig("etcd database size (API server's view)", scaleBytes(m1.storageBytes))
}

// waitQuiet waits until the API server has seen no writes for 3 seconds
// (nfd-master done labelling), bounded by the run's context.
func (r *scaleRun) waitQuiet() {
	last, quietSince := r.apiMetrics(), time.Now()
	r.poll("no writes for 3s", func() (bool, string) {
		cur := r.apiMetrics()
		var w float64
		for k, v := range scaleDelta(last.requests, cur.requests) {
			verb, res, _ := strings.Cut(k, " ")
			if scaleIsWrite(verb) && res != "leases" {
				w += v
			}
		}
		last = cur
		if w > 0 {
			quietSince = time.Now()
		}
		return time.Since(quietSince) >= 3*time.Second, fmt.Sprintf("%v writes in the last poll", w)
	})
}

// rulesChange edits the shared rules file and measures how long until every
// agent planned the new resource and every Node carries its label.
func (r *scaleRun) rulesChange() {
	before := r.apiMetrics()
	d0, n0 := scaleReadProc(r.t, r.driver.Pid()), scaleReadProc(r.t, r.master.Pid())
	start := time.Now()
	r.writeRules("nvidia.com/scale-b")
	planned := r.waitAgents("every agent planned nvidia.com/scale-b", func(a scaleAgent) bool {
		return slices.Equal(a.Resources, []string{"nvidia.com/scale-b"})
	})
	labelled := r.waitNodes("every Node relabelled", func(n *corev1.Node) bool {
		_, b := n.Labels[scaleCountLabel("nvidia.com/scale-b")]
		_, a := n.Labels[scaleCountLabel("nvidia.com/scale-a")]
		return b && !a
	})
	var written time.Time
	for _, a := range r.agents() {
		if a.WrittenAt.After(written) {
			written = a.WrittenAt
		}
	}
	r.fig("rules file edit -> all agents replanned (file check every 2s)", scaleDur(planned.Sub(start)))
	r.fig("rules file edit -> last agent wrote its NodeFeature", scaleDur(written.Sub(start)))
	r.fig("rules file edit -> all Nodes relabelled", scaleDur(labelled.Sub(start)))
	after := r.apiMetrics()
	d1, n1 := scaleReadProc(r.t, r.driver.Pid()), scaleReadProc(r.t, r.master.Pid())
	r.fig("requests of the rules change, per node", scaleRequests(scaleDelta(before.requests, after.requests), float64(r.n)))
	r.fig("rules change: answers other than 2xx", scaleRequests(scaleDelta(before.failed, after.failed), 1))
	r.fig("rules change: CPU of the agents / kube-apiserver / nfd-master", fmt.Sprintf("%.1f / %.1f / %.1f CPU-s",
		d1.cpu-d0.cpu, after.cpu-before.cpu, n1.cpu-n0.cpu))
	r.fig("rules change: mean API latency of PATCH nodefeatures / GET nodes / PATCH nodes", fmt.Sprintf("%s / %s / %s",
		scaleMeanLatency(before, after, "PATCH nodefeatures"), scaleMeanLatency(before, after, "GET nodes"), scaleMeanLatency(before, after, "PATCH nodes")))
	// The change was a merge patch: it must not have brought managed
	// fields back (labeler's NodeFeaturePublisher keeps them cleared).
	for _, item := range r.storedNodeFeatures() {
		var obj struct {
			Metadata struct {
				Name          string            `json:"name"`
				ManagedFields []json.RawMessage `json:"managedFields"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(item, &obj); err != nil {
			r.t.Fatalf("decoding a NodeFeature: %v", err)
		}
		if len(obj.Metadata.ManagedFields) > 0 {
			r.t.Errorf("NodeFeature %s has managed fields after the rules change, want none", obj.Metadata.Name)
		}
	}
}

// nodeFeatureRule adds a NodeFeatureRule that matches every GPU node and
// measures how long until nfd-master labelled all of them.
func (r *scaleRun) nodeFeatureRule() {
	exists := &nfdv1alpha1.MatchExpression{Op: nfdv1alpha1.MatchExists}
	nfr := &nfdv1alpha1.NodeFeatureRule{
		ObjectMeta: metav1.ObjectMeta{Name: "scale-nfr"},
		Spec: nfdv1alpha1.NodeFeatureRuleSpec{Rules: []nfdv1alpha1.Rule{{
			Name:   "scale: GPU nodes",
			Labels: map[string]string{"scale-nfr": "true"},
			MatchFeatures: nfdv1alpha1.FeatureMatcher{{
				Feature:          "nvidia.gpu",
				MatchExpressions: &nfdv1alpha1.MatchExpressionSet{"product": exists},
			}},
		}}},
	}
	start := time.Now()
	if _, err := r.api.NFD.NfdV1alpha1().NodeFeatureRules().Create(r.ctx, nfr, metav1.CreateOptions{}); err != nil {
		r.t.Fatalf("creating NodeFeatureRule: %v", err)
	}
	done := r.waitNodes("every Node labelled by the NodeFeatureRule", func(n *corev1.Node) bool {
		return n.Labels[scaleNFRLabel] == "true"
	})
	took := done.Sub(start)
	r.fig("NodeFeatureRule added -> all Nodes labelled", fmt.Sprintf("%s (%.0f nodes/s)", scaleDur(took), float64(r.n)/took.Seconds()))
}

// apiServerRestart stops the API server, changes the rules while it is
// away (so every agent has something to publish and fails to), starts it
// again and measures the request peak and the time until every agent has
// published again.
func (r *scaleRun) apiServerRestart() {
	t := r.t
	if err := r.api.StopAPIServer(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	r.writeRules("nvidia.com/scale-c")
	r.waitAgents("every agent planned nvidia.com/scale-c and failed to publish it", func(a scaleAgent) bool {
		return slices.Equal(a.Resources, []string{"nvidia.com/scale-c"}) && a.Failing
	})
	// A restart that fails (on this loaded machine a post-start hook of
	// kube-apiserver has timed out) is tried again, and counted.
	attempts := 1
	for err := r.api.StartAPIServer(r.ctx); err != nil; err = r.api.StartAPIServer(r.ctx) {
		if attempts == 3 {
			t.Fatalf("starting the API server again, %d attempts: %v", attempts, err)
		}
		t.Logf("starting the API server again, attempt %d: %v", attempts, err)
		attempts++
	}
	r.fig("API server restart attempts", strconv.Itoa(attempts))
	up := time.Now()
	// The restarted API server counts from zero: sample it every second.
	var (
		mu                sync.Mutex
		peak, prev, first float64
		prevAt            time.Time
		samples           int
		after             map[string]float64
		stopC             = make(chan struct{})
		done              = make(chan struct{})
	)
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stopC:
				return
			case <-tick.C:
			}
			m, err := scaleReadAPIMetrics(r.ctx, r.api)
			if err != nil {
				continue
			}
			total, at := scaleTotal(m.requests), time.Now()
			mu.Lock()
			if samples > 0 { // the first covers the whole start, not a second
				// A rate: a read of /metrics from a busy API server
				// can take longer than the tick.
				peak = max(peak, (total-prev)/max(at.Sub(prevAt).Seconds(), 1))
			} else {
				first = total
			}
			samples++
			prev, prevAt, after = total, at, m.requests
			mu.Unlock()
		}
	}()
	recovered := r.waitAgents("every agent published again", func(a scaleAgent) bool {
		return !a.Failing && a.RecoveredAt.After(down)
	})
	var last time.Time
	for _, a := range r.agents() {
		if a.RecoveredAt.After(last) {
			last = a.RecoveredAt
		}
	}
	labelled := r.waitNodes("every Node relabelled after the restart", func(n *corev1.Node) bool {
		_, ok := n.Labels[scaleCountLabel("nvidia.com/scale-c")]
		return ok
	})
	close(stopC)
	<-done
	mu.Lock()
	defer mu.Unlock()
	r.fig("API server down", scaleDur(up.Sub(down)))
	r.fig("API server ready -> every agent published again", fmt.Sprintf("%s (last publish %s after ready; seen %s)",
		scaleDur(recovered.Sub(up)), scaleDur(last.Sub(up)), scaleDur(recovered.Sub(up))))
	r.fig("API server ready -> all Nodes relabelled", scaleDur(labelled.Sub(up)))
	r.fig("after the restart: requests from its start to 1s after ready (all clients)", fmt.Sprintf("%.0f", first))
	r.fig("after the restart: peak requests per second after that (all clients)", fmt.Sprintf("%.0f (total %.0f, %.1f per node)", peak, prev, prev/float64(r.n)))
	r.fig("requests after the restart until all relabelled, per node", scaleRequests(after, float64(r.n)))
}

// nodeFeatureSizes measures the NodeFeatures as stored (the JSON etcd
// holds for a custom resource, managed fields included), per fake machine.
func (r *scaleRun) nodeFeatureSizes() {
	t := r.t
	items := r.storedNodeFeatures()
	fakes := map[string]string{}
	for _, a := range r.agents() {
		fakes[a.Node] = a.Fake
	}
	type size struct{ total, spec, managed int }
	by := map[string]size{}
	var total int
	for _, item := range items {
		var obj struct {
			Metadata struct {
				Labels        map[string]string `json:"labels"`
				ManagedFields json.RawMessage   `json:"managedFields"`
			} `json:"metadata"`
			Spec json.RawMessage `json:"spec"`
		}
		if err := json.Unmarshal(item, &obj); err != nil {
			t.Fatalf("decoding a NodeFeature: %v", err)
		}
		fake := fakes[obj.Metadata.Labels[nfdv1alpha1.NodeFeatureObjNodeNameLabel]]
		by[fake] = size{len(item), len(obj.Spec), len(obj.Metadata.ManagedFields)}
		total += len(item)
	}
	var parts []string
	for _, fake := range slices.Sorted(func(yield func(string) bool) {
		for k := range by {
			if !yield(k) {
				return
			}
		}
	}) {
		s := by[fake]
		parts = append(parts, fmt.Sprintf("%s %s (spec %s, managedFields %s)", fake, scaleBytes(float64(s.total)), scaleBytes(float64(s.spec)), scaleBytes(float64(s.managed))))
	}
	r.fig("NodeFeature size as stored, per machine", strings.Join(parts, "; "))
	r.fig("NodeFeatures, total", fmt.Sprintf("%d objects, %s", len(items), scaleBytes(float64(total))))
}

// scaleAgent is one agent's entry in the driver's /status.
type scaleAgent struct {
	Node        string             `json:"node"`
	Fake        string             `json:"fake"`
	Resources   []string           `json:"resources"`
	Writes      int                `json:"writes"`
	WrittenAt   time.Time          `json:"writtenAt"`
	Failing     bool               `json:"failing"`
	RecoveredAt time.Time          `json:"recoveredAt"`
	Discoveries float64            `json:"discoveries"`
	Publishes   map[string]float64 `json:"publishes"`
}

// agents reads the driver's /status; nil when it does not answer yet.
func (r *scaleRun) agents() []scaleAgent {
	resp, err := http.Get(r.status)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil
	}
	var out []scaleAgent
	if err := json.Unmarshal(body, &out); err != nil {
		r.t.Fatalf("decoding the driver's status: %v", err)
	}
	return out
}

// waitAgents waits until every agent satisfies ok and returns when.
func (r *scaleRun) waitAgents(what string, ok func(scaleAgent) bool) time.Time {
	return r.poll(what, func() (bool, string) {
		agents := r.agents()
		if len(agents) != r.n {
			return false, "driver not answering"
		}
		var not []string
		for _, a := range agents {
			if !ok(a) {
				not = append(not, a.Node)
			}
		}
		return len(not) == 0, fmt.Sprintf("%d of %d agents not there, e.g. %v", len(not), r.n, not[:min(3, len(not))])
	})
}

// waitNodes waits until every simulated Node satisfies ok (from the
// test's Node watch) and returns when.
func (r *scaleRun) waitNodes(what string, ok func(*corev1.Node) bool) time.Time {
	return r.poll(what, func() (bool, string) {
		var good int
		for _, obj := range r.nodes.List() {
			n := obj.(*corev1.Node)
			if strings.HasPrefix(n.Name, scalePrefix) && n.Name != scaleMaster && ok(n) {
				good++
			}
		}
		return good == r.n, fmt.Sprintf("%d of %d nodes", good, r.n)
	})
}

// poll checks cond every 100ms until it holds, failing the test when the
// run's context ends; it returns when cond held.
func (r *scaleRun) poll(what string, cond func() (bool, string)) time.Time {
	r.t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var state string
	for {
		var ok bool
		if ok, state = cond(); ok {
			return time.Now()
		}
		if !r.driver.Running() {
			r.t.Fatalf("waiting for %s: the driver exited: %v", what, r.driver.ExitErr())
		}
		select {
		case <-r.ctx.Done():
			r.t.Fatalf("waiting for %s: %v (%s)", what, r.ctx.Err(), state)
		case <-tick.C:
		}
	}
}

// createNodes registers the simulated Nodes, as kubelets would.
func (r *scaleRun) createNodes() {
	var wg sync.WaitGroup
	errs := make(chan error, r.n)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				if _, err := r.api.CreateNode(r.ctx, scaleNode(i)); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range r.n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		r.t.Fatal(err)
	}
}

// watchNodes keeps every Node in a cache for the waits: one list and one
// watch, so the test adds no periodic requests of its own.
func (r *scaleRun) watchNodes() {
	lw := cache.NewListWatchFromClient(r.api.Client.CoreV1().RESTClient(), "nodes", "", fields.Everything())
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: lw, ObjectType: &corev1.Node{}, Handler: cache.ResourceEventHandlerFuncs{}})
	ctx, cancel := context.WithCancel(r.ctx)
	r.t.Cleanup(cancel)
	go ctrl.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
		r.t.Fatal("the test's Node watch did not sync")
	}
	r.nodes = store
}

func (r *scaleRun) writeRules(resource string) {
	tmp := r.rules + ".tmp"
	if err := os.WriteFile(tmp, []byte(scaleRules(resource)), 0o644); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Rename(tmp, r.rules); err != nil {
		r.t.Fatal(err)
	}
}

func (r *scaleRun) apiMetrics() scaleAPIMetrics {
	m, err := scaleReadAPIMetrics(r.ctx, r.api)
	if err != nil {
		r.t.Fatal(err)
	}
	return m
}

// fig records a figure and logs it at once, so that a run that fails
// later still shows what it measured (the table is written on cleanup).
func (r *scaleRun) fig(name, value string) {
	r.t.Logf("figure: %s: %s", name, value)
	r.figures = append(r.figures, [2]string{name, value})
}

// report logs the table and writes it to $SCALE_OUT when set.
func (r *scaleRun) report() {
	var b strings.Builder
	b.WriteString("| figure | value |\n| --- | --- |\n")
	for _, f := range r.figures {
		fmt.Fprintf(&b, "| %s | %s |\n", f[0], f[1])
	}
	r.t.Logf("scale figures:\n%s", b.String())
	if out := os.Getenv(scaleOutEnv); out != "" {
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			r.t.Errorf("writing $%s: %v", scaleOutEnv, err)
		}
	}
}

// scaleBuildDriver builds cmd/featureplug-scale from the product module.
func scaleBuildDriver(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(filepath.Dir(wd)) // test/scale -> product root
	bin := filepath.Join(t.TempDir(), "featureplug-scale")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/featureplug-scale")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS="+scaleCGOFlags)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building featureplug-scale in %s: %v\n%s", root, err, out)
	}
	return bin
}

func scaleNode(i int) string { return fmt.Sprintf("%s%05d", scalePrefix, i) }

func scaleDur(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }

func scaleBytes(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// scaleRequests formats request counts divided by per, by verb and
// resource, largest first.
func scaleRequests(req map[string]float64, per float64) string {
	keys := scaleSortedKeys(req)
	slices.SortStableFunc(keys, func(a, b string) int {
		switch {
		case req[a] > req[b]:
			return -1
		case req[a] < req[b]:
			return 1
		}
		return 0
	})
	if len(keys) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, req[k]/per))
	}
	return strings.Join(parts, ", ")
}
