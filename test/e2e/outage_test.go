package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/test/harness"
)

// outageDuration is how long kube-apiserver stays stopped.
const outageDuration = 25 * time.Second

// outageStopGrace is how long kube-apiserver gets between SIGTERM and
// SIGKILL: it stops listening at once but holds nfd-master's watches open
// until it is killed.
const outageStopGrace = 5 * time.Second

// outageRecoveryTimeout bounds how long publishing may take to resume once
// kube-apiserver is ready again: the publisher retries with a backoff capped
// at 15 s plus up to 50% jitter (the agent's publishBackoffMax), and
// nfd-master's informers re-watch with one capped at 30 s plus up to 100%
// jitter.
const outageRecoveryTimeout = 3 * time.Minute

// outageSampleEvery is how often the outage test looks at the serving side
// while kube-apiserver is down.
const outageSampleEvery = 500 * time.Millisecond

// TestFault00APIServerRestart stops the real kube-apiserver process for 25
// seconds and starts it again on the same address with the same etcd,
// certificates and credentials, while featureplug publishes a NodeFeature
// (through the real nfd-master to the Node's labels) and serves the kubelet's
// device manager. While it is down: featureplug keeps running and stays live
// and ready, counts the failed publishes, follows a hardware change (two GPUs
// gone, SIGHUP) to the kubelet, and Allocate works. Once it is back: the
// change is published without a restart of featureplug or nfd-master (the
// NodeFeature and the Node's labels equal what `featureplug discover` gives
// for the new hardware), the NodeFeature is the same object, and no Node
// label was lost. The time from kube-apiserver ready to the NodeFeature and
// the Node's labels updated is logged, not asserted.
func TestFault00APIServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, nfd-master and featureplug")
	}
	api := harness.StartAPIServer(t)
	master := harness.StartNFDMaster(t, api, nfdMasterNode)
	c := &cluster{api: api, master: master}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := api.CreateNamespace(ctx, agentNamespace); err != nil {
		t.Fatal(err)
	}
	node := c.node(t, "outage-dgx-a100", map[string]string{"example.com/rack": "r7"})
	fake := copyFile(t, bundledFakeNode("dgx-a100"), t.TempDir(), "node.yaml")
	dir := shortTempDir(t)
	peer := harness.StartKubeletPeer(t, dir)
	a := startAgent(t, agentSpec{
		Node:       node,
		FakeNode:   fake,
		Publish:    "nodefeature",
		Rules:      "mixed",
		KubeletDir: dir,
		Kubeconfig: api.KubeconfigPath,
		Namespace:  agentNamespace,
		Extra:      []string{"--resync-interval", "1s", "--rediscover-interval", "1h"},
	})

	// Before: everything published and served.
	wantBefore := outageDiscover(t, fake)
	nfBefore := outageWaitNodeFeature(ctx, t, c, node, wantBefore)
	c.waitLabels(t, node, wantBefore.labels)
	waitCapacities(t, peer, mixedDGXA100)
	nodeBefore, err := api.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The outage.
	errorsBefore := a.metric(t, "featureplug_publish_attempts_total", `result="error"`)
	warnsBefore := outageCountLines(t, a.LogPath, "level=WARN")
	down := time.Now()
	if err := api.StopAPIServer(outageStopGrace); err != nil {
		t.Fatal(err)
	}
	// The agent notices: a resync fails and is counted.
	a.waitMetric(t, "featureplug_publish_attempts_total", func(v float64) bool { return v > errorsBefore }, `result="error"`)

	// Two whole GPUs go away while the API server is down: the kubelet
	// side follows at once, allocation works.
	fewer, err := os.ReadFile(filepath.Join("testdata", "dgx-a100-six-gpus.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	writeFileAtomic(t, fake, fewer)
	wantAfter := outageDiscover(t, fake)
	a.hup(t)
	during := outageWith(mixedDGXA100, map[string]int64{"nvidia.com/gpu": 2})
	waitCapacities(t, peer, during)
	if _, err := peer.Allocate(ctx, "during-outage", "main", "nvidia.com/gpu", 1); err != nil {
		t.Fatalf("allocating a GPU during the API server outage: %v", err)
	}
	outageHold(t, a, master, peer, during, down.Add(outageDuration))
	if _, err := peer.Allocate(ctx, "end-of-outage", "main", "nvidia.com/mig-1g.5gb", 1); err != nil {
		t.Fatalf("allocating a MIG device at the end of the API server outage: %v", err)
	}
	errorsDuring := a.metric(t, "featureplug_publish_attempts_total", `result="error"`) - errorsBefore
	warnsDuring := outageCountLines(t, a.LogPath, "level=WARN") - warnsBefore

	// Back, on the same address, with the same etcd and credentials.
	restart := time.Now()
	if err := api.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	ready := time.Now()
	t.Logf("kube-apiserver down %s, ready %s after its start; featureplug counted %v failed publishes and logged %d WARN lines meanwhile",
		restart.Sub(down).Round(time.Millisecond), ready.Sub(restart).Round(time.Millisecond), errorsDuring, warnsDuring)

	nfAfter := outageWaitNodeFeature(ctx, t, c, node, wantAfter)
	nfTook := time.Since(ready)
	lctx, lcancel := context.WithTimeout(ctx, outageRecoveryTimeout)
	defer lcancel()
	if err := api.WaitNodeLabels(lctx, node, wantAfter.labels); err != nil {
		t.Fatalf("the change made during the outage did not reach the Node's labels: %v", err)
	}
	labelsTook := time.Since(ready)
	t.Logf("after kube-apiserver was ready: NodeFeature updated in %s, Node labels in %s",
		nfTook.Round(time.Millisecond), labelsTook.Round(time.Millisecond))

	// Nothing lost: the same NodeFeature object, every Node label still
	// there (only gpu.count changed, as the hardware did), featureplug and
	// nfd-master the same processes, devices still served.
	if nfAfter.UID != nfBefore.UID {
		t.Errorf("NodeFeature %s was replaced across the outage: uid %s -> %s", nfAfter.Name, nfBefore.UID, nfAfter.UID)
	}
	nodeAfter, err := api.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range nodeBefore.Labels {
		want := v
		if w, ok := wantAfter.labels[k]; ok {
			want = w
		}
		if got, ok := nodeAfter.Labels[k]; !ok || got != want {
			t.Errorf("node label %s is %q (present %v) after the outage, want %q (before: %q)", k, got, ok, want, v)
		}
	}
	for _, p := range []*harness.Process{a.Process, master.Process} {
		if !p.Running() {
			t.Errorf("%s exited: %v", p.Name, p.ExitErr())
		}
	}
	waitCapacities(t, peer, during)
	if _, err := peer.Allocate(ctx, "after-outage", "main", "nvidia.com/gpu", 1); err != nil {
		t.Errorf("allocating a GPU after the API server outage: %v", err)
	}
	if got := a.metric(t, "featureplug_publish_attempts_total", `result="ok"`); got == 0 {
		t.Errorf("featureplug_publish_attempts_total{result=\"ok\"} is 0 after the outage")
	}
}

// outageHold keeps kube-apiserver down until the deadline, checking every
// outageSampleEvery that featureplug and nfd-master still run, that
// featureplug answers /healthz and /readyz (an API outage must not make a
// liveness probe restart it, nor take it out of readiness) and that the
// kubelet still sees every resource with the wanted capacity.
func outageHold(t *testing.T, a *agent, master *harness.NFDMaster, peer *harness.KubeletPeer, want map[string]int64, deadline time.Time) {
	t.Helper()
	tick := time.NewTicker(outageSampleEvery)
	defer tick.Stop()
	end := time.NewTimer(time.Until(deadline))
	defer end.Stop()
	for samples := 0; ; samples++ {
		into := time.Until(deadline)
		if !a.Running() {
			t.Fatalf("featureplug exited during the API server outage (%s before its end): %v", into.Round(time.Second), a.ExitErr())
		}
		if !master.Running() {
			t.Fatalf("nfd-master exited during the API server outage (%s before its end): %v", into.Round(time.Second), master.ExitErr())
		}
		for _, probe := range []string{"/healthz", "/readyz"} {
			code, body, err := a.get(probe)
			if err != nil || code != http.StatusOK {
				t.Fatalf("featureplug %s during the API server outage (%s before its end): %d %q %v", probe, into.Round(time.Second), code, body, err)
			}
		}
		for res, n := range want {
			if c, al := peer.Capacity(res); c != n || al != n {
				t.Fatalf("%s capacity %d, allocatable %d during the API server outage (%s before its end), want %d",
					res, c, al, into.Round(time.Second), n)
			}
		}
		select {
		case <-end.C:
			t.Logf("serving checked %d times during the outage", samples+1)
			return
		case <-tick.C:
		}
	}
}

// outagePublished is what featureplug publishes for a fake node: the
// NodeFeature's labels and features, as `featureplug discover` computes
// them.
type outagePublished struct {
	labels   map[string]string
	features nfdv1alpha1.Features
}

// outageDiscover runs `featureplug discover` on the fake node with the
// mixed rules, for the labels and the features the agent must publish.
func outageDiscover(t *testing.T, fakeNode string) outagePublished {
	t.Helper()
	run := func(args ...string) []byte {
		out, err := exec.Command(build.agent, append([]string{"discover", "--fake-node", fakeNode}, args...)...).Output()
		if err != nil {
			t.Fatalf("featureplug discover --fake-node %s %v: %v", fakeNode, args, err)
		}
		return out
	}
	var p outagePublished
	var doc struct {
		Features nfdv1alpha1.Features `json:"features"`
	}
	if err := json.Unmarshal(run("-o", "json"), &doc); err != nil {
		t.Fatalf("decoding the features of featureplug discover --fake-node %s: %v", fakeNode, err)
	}
	p.features = doc.Features
	p.labels = map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(run("-o", "labels", "--rules", "mixed")))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("featureplug discover -o labels: line %q is not key=value", line)
		}
		p.labels[k] = v
	}
	if len(p.labels) == 0 || len(p.features.Instances["nvidia.gpu"].Elements) == 0 {
		t.Fatalf("featureplug discover --fake-node %s: no labels or no GPUs (%d labels)", fakeNode, len(p.labels))
	}
	return p
}

// outageWaitNodeFeature waits until the agent's NodeFeature carries exactly
// the wanted labels and features, and returns it.
func outageWaitNodeFeature(ctx context.Context, t *testing.T, c *cluster, node string, want outagePublished) *nfdv1alpha1.NodeFeature {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, outageRecoveryTimeout)
	defer cancel()
	nfs := c.api.NFD.NfdV1alpha1().NodeFeatures(agentNamespace)
	var nf *nfdv1alpha1.NodeFeature
	err := waitFor(wctx, func() (bool, string) {
		got, err := nfs.Get(wctx, nodeFeatureName(node), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		nf = got
		if d := outageLabelDiff(want.labels, got.Spec.Labels); d != "" {
			return false, "labels: " + d
		}
		if !equality.Semantic.DeepEqual(want.features, got.Spec.Features) {
			return false, fmt.Sprintf("features differ: %d nvidia.gpu instances, want %d",
				len(got.Spec.Features.Instances["nvidia.gpu"].Elements), len(want.features.Instances["nvidia.gpu"].Elements))
		}
		return true, ""
	})
	if err != nil {
		t.Fatalf("NodeFeature %s/%s: %v", agentNamespace, nodeFeatureName(node), err)
	}
	return nf
}

// outageLabelDiff describes how got differs from want ("" when equal).
func outageLabelDiff(want, got map[string]string) string {
	var d []string
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			d = append(d, fmt.Sprintf("%s=%q (present %v), want %q", k, g, ok, v))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("unexpected %s=%q", k, v))
		}
	}
	slices.Sort(d)
	return strings.Join(d, "; ")
}

// outageWith returns a copy of base with the entries of over set.
func outageWith(base, over map[string]int64) map[string]int64 {
	m := maps.Clone(base)
	maps.Copy(m, over)
	return m
}

// outageCountLines counts the lines of a log file that contain s.
func outageCountLines(t *testing.T, path, s string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	n := 0
	for line := range bytes.Lines(b) {
		if bytes.Contains(line, []byte(s)) {
			n++
		}
	}
	return n
}
