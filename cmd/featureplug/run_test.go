package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/featureplug/featureplug/discovery/fakenode/mpscontrol"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
)

// runMainEnv makes the test binary act as the featureplug binary, so the
// process-level tests run the real command without a separate build.
const runMainEnv = "FEATUREPLUG_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" || mpscontrol.Invoked(os.Args[0]) {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// syncBuffer is a bytes.Buffer safe for a process writing while a test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// agentProcess is `featureplug run` running as a child process.
type agentProcess struct {
	t       *testing.T
	cmd     *exec.Cmd
	logs    *syncBuffer
	metrics string
	exited  chan struct{}
	err     error
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

func startAgent(t *testing.T, args ...string) *agentProcess {
	t.Helper()
	addr := freePort(t)
	p := &agentProcess{t: t, logs: &syncBuffer{}, metrics: "http://" + addr, exited: make(chan struct{})}
	// Each agent keeps its state in a directory of its own, never in the
	// host's /var/lib/featureplug.
	base := []string{"run", "--metrics-addr", addr, "--log-level", "debug", "--state-dir", t.TempDir()}
	p.cmd = exec.Command(os.Args[0], append(base, args...)...)
	p.cmd.Env = append(os.Environ(), runMainEnv+"=1")
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() || os.Getenv("FP_SHOW_LOGS") != "" {
			t.Logf("agent logs:\n%s", p.logs.String())
		}
	})
	return p
}

// signal sends sig to the agent.
func (p *agentProcess) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// get fetches a path from the agent's HTTP server.
func (p *agentProcess) get(path string) (int, string) {
	resp, err := http.Get(p.metrics + path)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// metric returns the sum of a metric's samples whose line contains match.
func (p *agentProcess) metric(name, match string) float64 {
	_, body := p.get("/metrics")
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || !strings.Contains(line, match) {
			continue
		}
		if rest := line[len(name):]; rest != "" && rest[0] != ' ' && rest[0] != '{' {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// eventually polls cond until it holds or the wait runs out.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func startKubelet(t *testing.T, dir string) *kubeletsim.Kubelet {
	t.Helper()
	k, err := kubeletsim.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	// Write and rename, as editors and the kubelet do.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

const twoResourceRules = `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: whole
  devices: gpu
  resource: nvidia.com/gpu
- name: small-slices
  devices: mig
  matchFeatures:
  - feature: nvidia.mig
    matchExpressions:
      profile: {op: In, value: ["1g.5gb"]}
  resource: %s
- name: other-slices
  devices: mig
  resource: nvidia.com/mig-{{ .profile }}
`

func TestRunRulesReload(t *testing.T) {
	dir := kubeletsim.ShortTempDir(t)
	k := startKubelet(t, dir)
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, rulesFile, fmt.Sprintf(twoResourceRules, "example.com/small"))
	p := startAgent(t, "--fake-node", "dgx-a100", "--publish", "none", "--kubelet-dir", dir, "--rules", rulesFile)

	want := map[string]int{"nvidia.com/gpu": 4, "example.com/small": 6, "nvidia.com/mig-2g.10gb": 8, "nvidia.com/mig-3g.20gb": 2}
	for res, n := range want {
		eventually(t, res+" is advertised", func() bool { total, _ := k.Capacity(res); return total == n })
	}

	// A rename: the renamed resource moves, the others keep their streams.
	writeFile(t, rulesFile, fmt.Sprintf(twoResourceRules, "example.com/tiny"))
	eventually(t, "example.com/tiny is advertised", func() bool { total, _ := k.Capacity("example.com/tiny"); return total == 6 })
	eventually(t, "example.com/small is gone", func() bool { return !k.Streaming("example.com/small") })
	for _, res := range []string{"nvidia.com/gpu", "nvidia.com/mig-2g.10gb", "nvidia.com/mig-3g.20gb"} {
		if k.Registrations(res) != 1 || k.Streams(res) != 1 || !k.Streaming(res) {
			t.Errorf("%s: %d registrations, %d streams, streaming %v; want its one stream kept open",
				res, k.Registrations(res), k.Streams(res), k.Streaming(res))
		}
	}

	// An invalid edit: counted, and everything keeps serving.
	writeFile(t, rulesFile, "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n- name: broken\n  devices: gpu\n  resource: not a resource name\n")
	eventually(t, "the rule error is counted", func() bool { return p.metric("featureplug_rule_errors_total", "") >= 1 })
	for _, res := range []string{"nvidia.com/gpu", "example.com/tiny", "nvidia.com/mig-2g.10gb"} {
		if !k.Streaming(res) || k.Registrations(res) != 1 {
			t.Errorf("%s stopped serving after an invalid rules edit", res)
		}
	}
	eventually(t, "the log names the bad value", func() bool { return strings.Contains(p.logs.String(), "not a resource name") })
}

func TestRunFollowsFakeNodeChangesOnSIGHUP(t *testing.T) {
	dir := kubeletsim.ShortTempDir(t)
	k := startKubelet(t, dir)
	nodeFile := filepath.Join(t.TempDir(), "node.yaml")
	layout := func(profile string, count int) string {
		return fmt.Sprintf(`name: test-node
driverVersion: "570.86.15"
cudaVersion: "12.8"
gpus:
  - product: A100-SXM4-40GB
    mig:
      - profile: %s
        count: %d
  - product: A100-SXM4-40GB
`, profile, count)
	}
	writeFile(t, nodeFile, layout("1g.5gb", 7))
	features := filepath.Join(t.TempDir(), "features")
	p := startAgent(t, "--fake-node", nodeFile, "--rules", "mixed", "--kubelet-dir", dir,
		"--publish", "file", "--features-file", features, "--rediscover-interval", "1h")
	eventually(t, "7 1g.5gb devices", func() bool { total, _ := k.Capacity("nvidia.com/mig-1g.5gb"); return total == 7 })
	eventually(t, "the feature file is written", func() bool {
		data, _ := os.ReadFile(features)
		return strings.Contains(string(data), "nvidia.com/mig-1g.5gb.count=7")
	})
	// A re-discovery that finds nothing new writes nothing.
	p.signal(syscall.SIGHUP)
	eventually(t, "the unchanged re-discovery is published", func() bool {
		return p.metric("featureplug_publish_attempts_total", `result="ok"`) >= 2
	})
	if writes := p.metric("featureplug_publish_writes_total", ""); writes != 1 {
		t.Errorf("%v feature-file writes after an unchanged re-discovery, want 1", writes)
	}

	writeFile(t, nodeFile, layout("3g.20gb", 2))
	p.signal(syscall.SIGHUP)
	eventually(t, "2 3g.20gb devices", func() bool { total, _ := k.Capacity("nvidia.com/mig-3g.20gb"); return total == 2 })
	eventually(t, "1g.5gb is gone", func() bool { return !k.Streaming("nvidia.com/mig-1g.5gb") })
	eventually(t, "the labels follow", func() bool {
		data, _ := os.ReadFile(features)
		return strings.Contains(string(data), "nvidia.com/mig-3g.20gb.count=2") && !strings.Contains(string(data), "mig-1g.5gb")
	})
	if k.Registrations("nvidia.com/gpu") != 1 || k.Streams("nvidia.com/gpu") != 1 {
		t.Errorf("nvidia.com/gpu was restarted by a MIG change on another GPU")
	}
}

func TestRunReadinessAndCleanStop(t *testing.T) {
	dir := kubeletsim.ShortTempDir(t)
	p := startAgent(t, "--fake-node", "dgx-h100", "--publish", "none", "--kubelet-dir", dir)
	eventually(t, "/healthz answers", func() bool { code, _ := p.get("/healthz"); return code == http.StatusOK })
	if code, body := p.get("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d %q before the kubelet is there; want 503", code, body)
	}
	k := startKubelet(t, dir)
	eventually(t, "/readyz is ok", func() bool { code, _ := p.get("/readyz"); return code == http.StatusOK })
	// Ready means registered; the device list follows on the kubelet's
	// ListAndWatch stream.
	eventually(t, "8 GPUs in the kubelet's capacity", func() bool { total, _ := k.Capacity("nvidia.com/gpu"); return total == 8 })

	start := time.Now()
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("featureplug did not exit after SIGTERM")
	}
	t.Logf("exited %v after SIGTERM", time.Since(start))
	if p.err != nil {
		t.Errorf("exit after SIGTERM: %v", p.err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != kubeletsim.SocketName {
			t.Errorf("%s left behind in the kubelet directory", e.Name())
		}
	}
}

func TestRunHealthEventReachesKubelet(t *testing.T) {
	dir := kubeletsim.ShortTempDir(t)
	k := startKubelet(t, dir)
	p := startAgent(t, "--fake-node", "dgx-h100", "--publish", "none", "--kubelet-dir", dir, "--health-recovery", "1s")
	eventually(t, "8 healthy GPUs", func() bool { _, healthy := k.Capacity("nvidia.com/gpu"); return healthy == 8 })

	// XID 62 asks for a GPU reset, which NVML does not show pending: held
	// for the quiet period.
	resp, err := http.Post(p.metrics+"/fake/xid?gpu=3&xid=62", "", nil)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("injecting XID 62: %v %v", resp, err)
	}
	_ = resp.Body.Close()
	eventually(t, "GPU 3 goes unhealthy", func() bool { _, healthy := k.Capacity("nvidia.com/gpu"); return healthy == 7 })
	unhealthy := ""
	for _, d := range k.Devices("nvidia.com/gpu") {
		if d.Health == pluginapi.Unhealthy {
			unhealthy = d.ID
		}
	}
	if unhealthy == "" {
		t.Fatal("no device was reported Unhealthy")
	}
	// The log arrives through a pipe, after the kubelet has seen the change.
	eventually(t, "the log names the unhealthy device", func() bool { return strings.Contains(p.logs.String(), unhealthy) })
	eventually(t, "GPU 3 recovers", func() bool { _, healthy := k.Capacity("nvidia.com/gpu"); return healthy == 8 })

	// A bad request names the parameter.
	resp, err = http.Post(p.metrics+"/fake/xid?gpu=x&xid=79", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "gpu") {
		t.Errorf("bad injection = %d %q", resp.StatusCode, body)
	}
}

const mpsRules = `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: shared-by-mps
  devices: gpu
  matchFeatures:
  - feature: nvidia.gpu
    matchExpressions:
      index: {op: In, value: ["0", "1"]}
  resource: example.com/gpu.mps
  sharing:
    strategy: mps
    replicas: 4
- name: whole
  devices: gpu
  resource: nvidia.com/gpu
`

// killFakeDaemons kills the fake MPS daemons left under root.
func killFakeDaemons(t *testing.T, root string) {
	pids, _ := filepath.Glob(filepath.Join(root, "*", "pipe", "nvidia-cuda-mps-control.pid"))
	for _, f := range pids {
		data, _ := os.ReadFile(f)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestRunSupervisesMPSDaemons runs MPS on a fake node as on a GPU node:
// the supervisor starts the fake node's own control daemon (its driver
// root links nvidia-cuda-mps-control to this binary), configures it and
// restarts it when it dies.
func TestRunSupervisesMPSDaemons(t *testing.T) {
	dir := kubeletsim.ShortTempDir(t)
	mpsRoot := kubeletsim.ShortTempDir(t)
	t.Cleanup(func() { killFakeDaemons(t, mpsRoot) })
	k := startKubelet(t, dir)
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, rulesFile, mpsRules)
	p := startAgent(t, "--fake-node", "dgx-h100", "--publish", "none", "--kubelet-dir", dir, "--rules", rulesFile,
		"--mps-root", mpsRoot, "--mps-check-interval", "50ms")

	eventually(t, "the MPS resource is advertised with 2x4 replicas", func() bool {
		total, _ := k.Capacity("example.com/gpu.mps")
		return total == 8
	})
	log := filepath.Join(mpsRoot, "example.com_gpu.mps", "log", mpscontrol.LogFile)
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"command: set_default_active_thread_percentage 25", "command: set_default_device_pinned_mem_limit GPU-", "CUDA_VISIBLE_DEVICES=GPU-"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("the control daemon did not receive %q:\n%s", want, data)
		}
	}

	// An allocation points the container at the daemon's pipe directory.
	ids := []string{k.Devices("example.com/gpu.mps")[0].ID}
	resp, err := k.Allocate(context.Background(), "example.com/gpu.mps", ids)
	if err != nil {
		t.Fatal(err)
	}
	pipe := filepath.Join(mpsRoot, "example.com_gpu.mps", "pipe")
	if got := resp.Envs["CUDA_MPS_PIPE_DIRECTORY"]; got != pipe {
		t.Errorf("CUDA_MPS_PIPE_DIRECTORY=%q, want the daemon's pipe %s", got, pipe)
	}
	mounted := false
	for _, m := range resp.Mounts {
		mounted = mounted || (m.HostPath == pipe && m.ContainerPath == pipe)
	}
	if !mounted {
		t.Errorf("Allocate mounts %v, not the daemon's pipe %s", resp.Mounts, pipe)
	}

	// Kill the daemon: the supervisor restarts it.
	killFakeDaemons(t, mpsRoot)
	eventually(t, "the daemon restart is counted", func() bool {
		return p.metric("featureplug_mps_daemon_restarts_total", "example.com/gpu.mps") >= 1
	})
	eventually(t, "the daemon is up again", func() bool {
		return p.metric("featureplug_mps_daemon_up", "example.com/gpu.mps") == 1
	})
	if total, _ := k.Capacity("nvidia.com/gpu"); total != 6 {
		t.Errorf("nvidia.com/gpu has %d devices, want 6", total)
	}
}

func TestRunHoldsBackMPSWithoutControlBinary(t *testing.T) {
	dir := kubeletsim.ShortTempDir(t)
	k := startKubelet(t, dir)
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, rulesFile, mpsRules)
	p := startAgent(t, "--fake-node", "dgx-h100", "--publish", "none", "--kubelet-dir", dir, "--rules", rulesFile,
		"--mps-root", kubeletsim.ShortTempDir(t), "--mps-control", "/nonexistent/nvidia-cuda-mps-control")
	eventually(t, "nvidia.com/gpu is served", func() bool { total, _ := k.Capacity("nvidia.com/gpu"); return total == 6 })
	eventually(t, "the held-back resource is exported", func() bool {
		return p.metric("featureplug_mps_resource_unavailable", "example.com/gpu.mps") == 1
	})
	if k.Streaming("example.com/gpu.mps") {
		t.Error("the MPS resource is advertised without its control daemon")
	}
	eventually(t, "the log says why the MPS resource is held back", func() bool {
		return strings.Contains(p.logs.String(), "nvidia-cuda-mps-control")
	})
}

// post sends a POST to the agent's HTTP server.
func (p *agentProcess) post(path string) (int, string) {
	resp, err := http.Post(p.metrics+path, "", nil)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestRunFakeInjectionRejectsOutOfRangeNumbers(t *testing.T) {
	p := startAgent(t, "--fake-node", "dgx-h100", "--publish", "none", "--kubelet-dir", kubeletsim.ShortTempDir(t))
	eventually(t, "/healthz answers", func() bool { code, _ := p.get("/healthz"); return code == http.StatusOK })
	for _, tc := range []struct{ path, want string }{
		{"/fake/xid?gpu=0&xid=-5", "xid: -5 is out of range"},
		{"/fake/xid?gpu=0&xid=18446744073709551611", `xid: "18446744073709551611" is not a number`},
		{"/fake/xid?gpu=0&xid=65536", "xid: 65536 is out of range"},
		{"/fake/xid?gpu=-1&xid=79", "gpu: -1 is out of range"},
		{"/fake/xid?gpu=0&xid=79&gi=-1&ci=0", "gi: -1 is out of range"},
		{"/fake/ecc?gpu=-3", "gpu: -3 is out of range"},
	} {
		if code, body := p.post(tc.path); code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("POST %s = %d %q; want 400 naming the parameter and value (%q)", tc.path, code, body, tc.want)
		}
	}
	if code, body := p.post("/fake/xid?gpu=0&xid=79"); code != http.StatusNoContent {
		t.Errorf("POST a valid XID = %d %q, want 204", code, body)
	}
}

func TestRunHealthzFailsWhileTheLoopIsStuck(t *testing.T) {
	p := startAgent(t, "--fake-node", "dgx-h100", "--publish", "none", "--kubelet-dir", kubeletsim.ShortTempDir(t),
		"--liveness-timeout", "1s")
	eventually(t, "/healthz answers", func() bool { code, _ := p.get("/healthz"); return code == http.StatusOK })
	if code, body := p.post("/fake/stall"); code != http.StatusNoContent {
		t.Fatalf("POST /fake/stall = %d %q", code, body)
	}
	eventually(t, "/healthz fails naming the agent loop", func() bool {
		code, body := p.get("/healthz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "agent loop: no progress for")
	})
	if age := p.metric("featureplug_loop_heartbeat_age_seconds", ""); age < 1 {
		t.Errorf("featureplug_loop_heartbeat_age_seconds = %v while /healthz fails, want over the 1s timeout", age)
	}
	if code, body := p.post("/fake/stall?release"); code != http.StatusNoContent {
		t.Fatalf("POST /fake/stall?release = %d %q", code, body)
	}
	eventually(t, "/healthz is ok again", func() bool { code, _ := p.get("/healthz"); return code == http.StatusOK })
}
