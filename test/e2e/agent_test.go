package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/featureplug/featureplug/test/harness"
)

// waitTimeout bounds every wait for something the agent, nfd-master or the
// kubelet peer should do; generous, since CI machines are small and busy.
const waitTimeout = 90 * time.Second

// pollEvery is how often the waits in this package look again.
const pollEvery = 100 * time.Millisecond

// agentSpec is how to run one `featureplug run`.
type agentSpec struct {
	// Node is --node-name.
	Node string
	// FakeNode is --fake-node: a bundled name or a file.
	FakeNode string
	// Publish is --publish (default none).
	Publish string
	// Rules is --rules (default none).
	Rules string
	// KubeletDir is --kubelet-dir; empty gives a fresh directory no kubelet
	// serves.
	KubeletDir string
	// Kubeconfig is --kubeconfig; empty runs without an API server.
	Kubeconfig string
	// Namespace is --namespace.
	Namespace string
	// StateDir is --state-dir; empty gives a fresh directory that the
	// agent keeps across restarts (never the host's /var/lib/featureplug,
	// which would carry health state from one test or run to the next).
	// A --state-dir in Extra wins.
	StateDir string
	// Extra are more flags.
	Extra []string
	// Env are more environment variables (POD_NAME and the like, as the
	// manifests set them, or client-go's KUBE_FEATURE_* gates).
	Env []string
	// Wrapper, when set, is the command the agent runs under (setpriv to
	// run it as another user), and Binary the featureplug binary it runs
	// (default the one TestMain built).
	Wrapper []string
	Binary  string
}

// agent is a running `featureplug run`.
type agent struct {
	*harness.Process
	spec agentSpec
	// owner is the test the agent lives as long as, restarts included.
	owner *testing.T
	// base is the URL of its metrics and probe server.
	base string
	port int
}

// startAgent runs featureplug with spec and waits for its /healthz.
func startAgent(t *testing.T, spec agentSpec) *agent {
	t.Helper()
	port, err := harness.FreePort()
	if err != nil {
		t.Fatalf("choosing the agent's metrics port: %v", err)
	}
	a := &agent{spec: spec, owner: t, port: port, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	a.start(t)
	return a
}

func (a *agent) start(t *testing.T) {
	t.Helper()
	if a.spec.StateDir == "" {
		a.spec.StateDir = filepath.Join(shortTempDir(a.owner), "state")
	}
	s := a.spec
	if s.Publish == "" {
		s.Publish = "none"
	}
	if s.Rules == "" {
		s.Rules = "none"
	}
	if s.KubeletDir == "" {
		s.KubeletDir = shortTempDir(t)
	}
	args := []string{"run",
		"--fake-node", s.FakeNode,
		"--node-name", s.Node,
		"--publish", s.Publish,
		"--rules", s.Rules,
		"--kubelet-dir", s.KubeletDir,
		"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", a.port),
		"--log-level", "debug",
		"--state-dir", s.StateDir,
	}
	if s.Kubeconfig != "" {
		args = append(args, "--kubeconfig", s.Kubeconfig)
	}
	if s.Namespace != "" {
		args = append(args, "--namespace", s.Namespace)
	}
	args = append(args, s.Extra...)
	path := build.agent
	if s.Binary != "" {
		path = s.Binary
	}
	if len(s.Wrapper) > 0 {
		path, args = s.Wrapper[0], append(append(append([]string{}, s.Wrapper[1:]...), path), args...)
	}
	a.Process = harness.StartProcess(t, harness.ProcessSpec{
		Name: "featureplug-" + s.Node,
		Path: path,
		Args: args,
		// An in-cluster configuration must never be picked up by accident.
		Env: append([]string{"KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT="}, s.Env...),
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := waitFor(ctx, func() (bool, string) {
		if !a.Running() {
			return false, fmt.Sprintf("exited: %v", a.ExitErr())
		}
		code, body, err := a.get("/healthz")
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK, fmt.Sprintf("/healthz: %d %s", code, body)
	}); err != nil {
		t.Fatalf("featureplug for node %s did not start: %v", s.Node, err)
	}
}

// restart stops the agent with SIGTERM and runs it again with the same
// flags and metrics port; the new process lives as long as the test that
// started the first one.
func (a *agent) restart(t *testing.T) {
	t.Helper()
	if err := a.Stop(); err != nil {
		t.Fatalf("stopping featureplug for node %s: %v", a.spec.Node, err)
	}
	a.start(a.owner)
}

// hup makes the agent re-discover at once.
func (a *agent) hup(t *testing.T) {
	t.Helper()
	if err := a.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}

func (a *agent) get(path string) (int, string, error) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(a.base + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// injectXID plays an XID error on a GPU of the agent's fake node.
func (a *agent) injectXID(t *testing.T, gpu, xid int) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Post(fmt.Sprintf("%s/fake/xid?gpu=%d&xid=%d", a.base, gpu, xid), "", nil)
	if err != nil {
		t.Fatalf("injecting XID %d on GPU %d: %v", xid, gpu, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("injecting XID %d on GPU %d: %s: %s", xid, gpu, resp.Status, b)
	}
}

// metric returns the sum of every sample of the named metric whose labels
// include all of match (e.g. `result="ok"`).
func (a *agent) metric(t *testing.T, name string, match ...string) float64 {
	t.Helper()
	v, err := a.tryMetric(name, match...)
	if err != nil {
		t.Fatalf("reading metric %s of featureplug for node %s: %v", name, a.spec.Node, err)
	}
	return v
}

func (a *agent) tryMetric(name string, match ...string) (float64, error) {
	code, body, err := a.get("/metrics")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("/metrics: status %d", code)
	}
	return sumSamples(body, name, match...)
}

// sumSamples adds the samples of metric name in a Prometheus text
// exposition whose label sets contain every string of match.
func sumSamples(exposition, name string, match ...string) (float64, error) {
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(exposition))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
samples:
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		labels, value := "", rest
		if strings.HasPrefix(rest, "{") {
			end := strings.Index(rest, "}")
			if end < 0 {
				return 0, fmt.Errorf("malformed sample %q", line)
			}
			labels, value = rest[:end+1], rest[end+1:]
		}
		for _, m := range match {
			if !strings.Contains(labels, m) {
				continue samples
			}
		}
		f, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return 0, fmt.Errorf("sample %q: %w", line, err)
		}
		sum += f
	}
	return sum, sc.Err()
}

// waitMetric waits until the metric's value satisfies cond.
func (a *agent) waitMetric(t *testing.T, name string, cond func(float64) bool, match ...string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var v float64
	if err := waitFor(ctx, func() (bool, string) {
		var err error
		v, err = a.tryMetric(name, match...)
		if err != nil {
			return false, err.Error()
		}
		return cond(v), fmt.Sprintf("%s%v = %v", name, match, v)
	}); err != nil {
		t.Fatalf("featureplug for node %s: %v", a.spec.Node, err)
	}
	return v
}

// waitFor calls cond until it holds or ctx ends; the error carries cond's
// last description of the state.
func waitFor(ctx context.Context, cond func() (bool, string)) error {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		ok, state := cond()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last state: %s", ctx.Err(), state)
		case <-tick.C:
		}
	}
}

// shortTempDir returns a temporary directory with a short path, removed at
// the end of the test (kubeletsim.ShortTempDir: unix socket paths).
func shortTempDir(t *testing.T) string {
	t.Helper()
	return kubeletsim.ShortTempDir(t)
}

// writeFileAtomic replaces path's content the way a ConfigMap update or an
// editor's save does: a new file renamed over the old one.
func writeFileAtomic(t *testing.T, path string, content []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, content, 0o644); err != nil {
		t.Fatalf("writing %s: %v", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatalf("renaming %s to %s: %v", tmp, path, err)
	}
}

// copyFile copies src to a file named name in dir and returns its path.
func copyFile(t *testing.T, src, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("reading %s: %v", src, err)
	}
	dst := filepath.Join(dir, name)
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatalf("writing %s: %v", dst, err)
	}
	return dst
}

// bundledFakeNode returns the path of a fake node bundled with the product.
func bundledFakeNode(name string) string {
	return filepath.Join(build.root, "discovery", "fakenode", "nodes", name+".yaml")
}

// inventory is the part of `featureplug discover -o json` the tests use.
type inventory struct {
	GPUs []struct {
		Index      int    `json:"index"`
		UUID       string `json:"uuid"`
		MemoryMiB  uint64 `json:"memoryMiB"`
		MIGEnabled bool   `json:"migEnabled"`
		MIGDevices []struct {
			UUID    string `json:"uuid"`
			Profile string `json:"profile"`
		} `json:"migDevices"`
	} `json:"gpus"`
}

// discover runs `featureplug discover` on a fake node, for the device IDs
// the tests expect.
func discover(t *testing.T, fakeNode string) inventory {
	t.Helper()
	out, err := exec.Command(build.agent, "discover", "--fake-node", fakeNode, "-o", "json").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		t.Fatalf("featureplug discover --fake-node %s: %v", fakeNode, err)
	}
	var doc struct {
		Inventory inventory `json:"inventory"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("decoding featureplug discover --fake-node %s: %v", fakeNode, err)
	}
	return doc.Inventory
}
