package e2e

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/test/harness"
)

// kubeRequests reads the kube-apiserver's apiserver_request_total for one
// resource, summed by verb.
func kubeRequests(ctx context.Context, t *testing.T, api *harness.APIServer, resource string) map[string]float64 {
	t.Helper()
	raw, err := api.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading the API server's metrics: %v", err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="`+resource+`"`) {
			continue
		}
		i := strings.Index(line, `verb="`)
		j := strings.LastIndexByte(line, ' ')
		if i < 0 || j < 0 {
			continue
		}
		verb := line[i+len(`verb="`):]
		verb = verb[:strings.IndexByte(verb, '"')]
		v, err := strconv.ParseFloat(line[j+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[verb] += v
	}
	return out
}

// TestKubeNoPeriodicRequests: at steady state the agent costs the API
// server no requests on Nodes, NodeFeatures or Events however often it
// re-discovers (every 100 ms here; 30 s by default): it reads its Node's
// labels from a watch and writes the NodeFeature only on change. Before
// the watch, each re-discovery was one GET of the Node.
func TestKubeNoPeriodicRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and featureplug")
	}
	api := harness.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitTimeout)
	defer cancel()
	const node = "kube-steady"
	if _, err := api.CreateNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := api.CreateNamespace(ctx, agentNamespace); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, agentSpec{
		Node:       node,
		FakeNode:   "dgx-h100",
		Publish:    "nodefeature",
		Rules:      "single",
		Kubeconfig: api.KubeconfigPath,
		Namespace:  agentNamespace,
		Extra:      []string{"--resync-interval", "1h", "--rediscover-interval", "100ms"},
	})
	a.waitMetric(t, "featureplug_publish_attempts_total", func(v float64) bool { return v >= 1 }, `result="ok"`)
	discoveries := a.metric(t, "featureplug_discoveries_total", `result="ok"`)
	resources := []string{"nodes", "nodefeatures", "events"}
	before := map[string]map[string]float64{}
	for _, r := range resources {
		before[r] = kubeRequests(ctx, t, api, r)
	}
	// 20 re-discoveries, none of which may GET the Node.
	a.waitMetric(t, "featureplug_discoveries_total", func(v float64) bool { return v >= discoveries+20 }, `result="ok"`)
	for _, r := range resources {
		after := kubeRequests(ctx, t, api, r)
		for verb, n := range after {
			if verb == "WATCH" {
				continue // an open watch is no request per period
			}
			if d := n - before[r][verb]; d != 0 {
				t.Errorf("%v %s requests on %s over 20 re-discoveries, want 0", d, verb, r)
			}
		}
		t.Logf("%s requests since the start: %v", r, after)
	}
}
