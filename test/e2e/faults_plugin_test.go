package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/featureplug/featureplug/plugin/kubeletsim"
)

// pluginFaultResource is the resource the plugin fault tests serve: every
// GPU of the dgx-h100 fake node under the builtin single rules.
const pluginFaultResource = "nvidia.com/gpu"

// pluginFaultEnv is an agent on the dgx-h100 fake node serving the single
// rules to a simulated kubelet over real unix sockets.
type pluginFaultEnv struct {
	t       *testing.T
	dir     string
	kubelet *kubeletsim.Kubelet
	agent   *agent
	// gpus are the UUIDs of the node's GPUs by index.
	gpus []string
}

// pluginFaultStart starts a simulated kubelet in dir (a fresh directory when
// empty) and an agent serving it, and waits until the resource is
// registered.
func pluginFaultStart(t *testing.T, dir string, extra ...string) *pluginFaultEnv {
	t.Helper()
	if dir == "" {
		dir = shortTempDir(t)
	}
	e := &pluginFaultEnv{t: t, dir: dir}
	e.startKubelet()
	inv := discover(t, "dgx-h100")
	for _, g := range inv.GPUs {
		if g.MIGEnabled {
			t.Fatalf("dgx-h100 GPU %d has MIG enabled; the plugin fault tests expect whole GPUs", g.Index)
		}
		e.gpus = append(e.gpus, g.UUID)
	}
	e.agent = startAgent(t, agentSpec{
		Node:       "fault-plugin",
		FakeNode:   "dgx-h100",
		Rules:      "single",
		KubeletDir: dir,
		Extra:      extra,
	})
	e.waitRegistrations(1)
	return e
}

// startKubelet starts a simulated kubelet in e.dir.
func (e *pluginFaultEnv) startKubelet() {
	e.t.Helper()
	k, err := kubeletsim.Start(e.dir)
	if err != nil {
		e.t.Fatalf("starting the simulated kubelet in %s: %v", e.dir, err)
	}
	e.t.Cleanup(k.Stop)
	e.kubelet = k
}

// ctx is bounded by waitTimeout.
func (e *pluginFaultEnv) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	e.t.Cleanup(cancel)
	return ctx
}

// waitRegistrations waits until the resource has n registrations and a
// device list on a live stream.
func (e *pluginFaultEnv) waitRegistrations(n int) {
	e.t.Helper()
	k := e.kubelet
	if err := k.WaitUntil(e.ctx(), func() bool {
		return k.Registrations(pluginFaultResource) >= n && k.Streaming(pluginFaultResource) && k.Devices(pluginFaultResource) != nil
	}); err != nil {
		e.t.Fatalf("%s: %d registrations (want %d), streaming %v: %v", pluginFaultResource,
			k.Registrations(pluginFaultResource), n, k.Streaming(pluginFaultResource), err)
	}
}

// waitReadyz waits until /readyz answers code.
func (e *pluginFaultEnv) waitReadyz(code int) {
	e.t.Helper()
	if err := waitFor(e.ctx(), func() (bool, string) {
		got, body, err := e.agent.get("/readyz")
		if err != nil {
			return false, err.Error()
		}
		return got == code, fmt.Sprintf("/readyz: %d %s", got, strings.TrimSpace(body))
	}); err != nil {
		e.t.Fatalf("waiting for /readyz %d: %v", code, err)
	}
}

// killAndCheckFirstList kills the agent with SIGKILL, starts it again and
// checks its first device list: GPU unhealthy Unhealthy, every other GPU
// Healthy.
func (e *pluginFaultEnv) killAndCheckFirstList(t *testing.T, unhealthy int) {
	t.Helper()
	if err := e.agent.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-e.agent.Done()
	regs, updates := e.kubelet.Registrations(pluginFaultResource), e.kubelet.Updates(pluginFaultResource)
	e.agent.start(t)
	e.waitRegistrations(regs + 1)
	if got := e.kubelet.Updates(pluginFaultResource); got != updates+1 {
		t.Fatalf("%d device lists since the restart; the check needs the first one", got-updates)
	}
	h := e.health()
	for i, uuid := range e.gpus {
		want := pluginapi.Healthy
		if i == unhealthy {
			want = pluginapi.Unhealthy
		}
		if h[uuid] != want {
			t.Errorf("first list after SIGKILL and restart: GPU %d (%s) is %s, want %s", i, uuid, h[uuid], want)
		}
	}
}

// health returns the health of every device of the resource by ID.
func (e *pluginFaultEnv) health() map[string]string {
	out := map[string]string{}
	for _, d := range e.kubelet.Devices(pluginFaultResource) {
		out[d.GetID()] = d.GetHealth()
	}
	return out
}

// logSince returns the agent's log lines after byte offset off.
func pluginFaultLogSince(t *testing.T, a *agent, off int64) []string {
	t.Helper()
	b, err := os.ReadFile(a.LogPath)
	if err != nil {
		t.Fatalf("reading the agent log: %v", err)
	}
	if off > int64(len(b)) {
		off = 0
	}
	s := strings.TrimRight(string(b[off:]), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// pluginFaultLogSize returns the current size of the agent's log.
func pluginFaultLogSize(t *testing.T, a *agent) int64 {
	t.Helper()
	st, err := os.Stat(a.LogPath)
	if err != nil {
		t.Fatalf("reading the agent log: %v", err)
	}
	return st.Size()
}

// pluginFaultCount counts the lines holding every one of subs.
func pluginFaultCount(lines []string, subs ...string) int {
	n := 0
	for _, l := range lines {
		ok := true
		for _, s := range subs {
			ok = ok && strings.Contains(l, s)
		}
		if ok {
			n++
		}
	}
	return n
}

// pluginFaultWaitLog waits until the agent's log after off has a line
// holding every one of subs.
func pluginFaultWaitLog(t *testing.T, a *agent, off int64, subs ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := waitFor(ctx, func() (bool, string) {
		return pluginFaultCount(pluginFaultLogSince(t, a, off), subs...) > 0, "no such line yet"
	}); err != nil {
		t.Fatalf("waiting for a log line with %q: %v", subs, err)
	}
}

// TestFault01KubeletDirRecreated deletes the whole kubelet directory (as a
// kubelet reinstall does) and creates it again: the agent says so at WARN,
// /readyz drops to 503, and once the directory and the kubelet are back the
// agent registers again, and later kubelet restarts are again seen by the
// directory watch (not only by the periodic check).
func TestFault01KubeletDirRecreated(t *testing.T) {
	root := shortTempDir(t)
	dir := filepath.Join(root, "kubelet", "device-plugins")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := pluginFaultStart(t, dir)
	e.waitReadyz(http.StatusOK)

	off := pluginFaultLogSize(t, e.agent)
	e.kubelet.Stop()
	if err := os.RemoveAll(filepath.Join(root, "kubelet")); err != nil {
		t.Fatal(err)
	}
	pluginFaultWaitLog(t, e.agent, off, "level=WARN", "device-plugin directory removed")
	e.waitReadyz(http.StatusServiceUnavailable)

	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.startKubelet()
	e.waitRegistrations(1)
	e.waitReadyz(http.StatusOK)
	pluginFaultWaitLog(t, e.agent, off, "level=INFO", "device-plugin directory is back")

	// An ordinary restart now: the watch on the directory sees the new
	// kubelet.sock (the periodic check would log "found by the periodic
	// check" instead).
	back := pluginFaultLogSize(t, e.agent)
	regs := e.kubelet.Registrations(pluginFaultResource)
	if err := e.kubelet.Restart(true); err != nil {
		t.Fatal(err)
	}
	e.waitRegistrations(regs + 1)
	lines := pluginFaultLogSince(t, e.agent, back)
	if pluginFaultCount(lines, "kubelet socket created; registering every device plugin") == 0 {
		t.Errorf("the kubelet restart after the directory came back was not seen by the directory watch; log:\n%s", strings.Join(lines, "\n"))
	}
}

// TestFault05HealthSurvivesRestart plays XID 79 on GPU 4, kills the agent
// with SIGKILL and starts it again on the same --state-dir: the first
// device list of the new process has GPU 4 Unhealthy and the others
// Healthy.
func TestFault05HealthSurvivesRestart(t *testing.T) {
	state := filepath.Join(shortTempDir(t), "state")
	e := pluginFaultStart(t, "", "--state-dir", state, "--health-recovery", "1h")
	e.agent.injectXID(t, 4, 79)
	if err := e.kubelet.WaitFor(e.ctx(), pluginFaultResource, func(devs []*pluginapi.Device) bool {
		for _, d := range devs {
			if d.GetID() == e.gpus[4] {
				return d.GetHealth() == pluginapi.Unhealthy
			}
		}
		return false
	}); err != nil {
		t.Fatalf("GPU 4 not Unhealthy after XID 79: %v", err)
	}
	e.agent.waitMetric(t, "featureplug_plugin_health_state_writes_total", func(v float64) bool { return v >= 1 }, `result="ok"`)

	e.killAndCheckFirstList(t, 4)
	if v := e.agent.metric(t, "featureplug_plugin_devices", `health="unhealthy"`); v != 1 {
		t.Errorf("featureplug_plugin_devices{health=unhealthy} = %v after the restart, want 1", v)
	}
}

// TestFault06XIDStormLogs plays XIDs as fast as the fake node takes them
// for 10 s on every GPU: the log gets fewer than 100 lines (the first event
// per GPU, then summaries), while health_events_total counts every event.
func TestFault06XIDStormLogs(t *testing.T) {
	e := pluginFaultStart(t, "")
	off := pluginFaultLogSize(t, e.agent)
	var sent atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(10 * time.Second)
	client := &http.Client{Timeout: 5 * time.Second}
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(stop); i += 4 {
				xid := 79
				if i%3 == 0 {
					xid = 48
				}
				resp, err := client.Post(fmt.Sprintf("%s/fake/xid?gpu=%d&xid=%d", e.agent.base, i%len(e.gpus), xid), "", nil)
				if err != nil {
					continue
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusNoContent {
					sent.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	n := float64(sent.Load())
	t.Logf("%v XIDs played in 10 s", n)
	if n < 1000 {
		t.Fatalf("only %v XIDs played; not a storm", n)
	}
	e.agent.waitMetric(t, "featureplug_plugin_health_events_total", func(v float64) bool { return v == n })
	// The summaries come one interval after each GPU's first event.
	pluginFaultWaitLog(t, e.agent, off, "device health events continue", "xid 79: ")
	lines := pluginFaultLogSince(t, e.agent, off)
	if len(lines) >= 100 {
		t.Errorf("%d log lines for a storm of %v XIDs, want fewer than 100; first lines:\n%s", len(lines), n, strings.Join(lines[:min(20, len(lines))], "\n"))
	}
	if got := pluginFaultCount(lines, "device unhealthy"); got != len(e.gpus) {
		t.Errorf("%d 'device unhealthy' lines, want one per GPU (%d)", got, len(e.gpus))
	}
	if pluginFaultCount(lines, "device health events continue", "xid 79: ") == 0 {
		t.Errorf("no summary line counting the storm's events; log:\n%s", strings.Join(lines, "\n"))
	}
}

// TestFault09AllocateStrict sends the requests a confused or hostile
// kubelet-side client could: an oversized request is refused before it is
// decoded, 10,000 unknown IDs give a short error, repeated IDs are
// InvalidArgument, a device Unhealthy now is refused with
// FailedPrecondition naming it and is never preferred.
func TestFault09AllocateStrict(t *testing.T) {
	e := pluginFaultStart(t, "")
	c, err := e.kubelet.Client(pluginFaultResource)
	if err != nil {
		t.Fatal(err)
	}
	ctx := e.ctx()
	allocate := func(ids []string) error {
		_, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
		return err
	}

	huge := make([]string, 100000)
	for i := range huge {
		huge[i] = fmt.Sprintf("GPU-%032d", i)
	}
	if err := allocate(huge); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Allocate of 4 MB: %v, want ResourceExhausted", err)
	}
	err = allocate(huge[:10000])
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Allocate of 10,000 unknown IDs: %v, want InvalidArgument", err)
	}
	if msg := status.Convert(err).Message(); len(msg) > 1024 || strings.Count(msg, "GPU-") > 5 {
		t.Errorf("error for 10,000 unknown IDs is %d bytes naming %d IDs, want a handful: %.300s", len(msg), strings.Count(msg, "GPU-"), msg)
	}
	if err := allocate([]string{e.gpus[0], e.gpus[1], e.gpus[0]}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), e.gpus[0]) {
		t.Errorf("Allocate with a repeated ID: %v, want InvalidArgument naming it", err)
	}

	e.agent.injectXID(t, 2, 79)
	if err := e.kubelet.WaitFor(ctx, pluginFaultResource, func([]*pluginapi.Device) bool {
		return e.health()[e.gpus[2]] == pluginapi.Unhealthy
	}); err != nil {
		t.Fatalf("GPU 2 not Unhealthy: %v", err)
	}
	err = allocate([]string{e.gpus[2]})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), e.gpus[2]) {
		t.Errorf("Allocate of the Unhealthy GPU 2: %v, want FailedPrecondition naming it", err)
	}
	if err := allocate([]string{e.gpus[3]}); err != nil {
		t.Errorf("Allocate of healthy GPU 3: %v", err)
	}
	got, err := e.kubelet.GetPreferredAllocation(ctx, pluginFaultResource, e.gpus[:4], nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(got, ","), e.gpus[2]) || len(got) != 3 {
		t.Errorf("GetPreferredAllocation offered GPUs 0-3 with GPU 2 Unhealthy picked %q", got)
	}
	if v := e.agent.metric(t, "featureplug_plugin_allocations_total", `result="unhealthy"`); v != 1 {
		t.Errorf("allocations_total{result=unhealthy} = %v, want 1", v)
	}
}

// TestFault10ReadyzFollowsRegistration stops the kubelet: /readyz drops to
// 503 and comes back to 200 once the agent has registered with the new
// kubelet.
func TestFault10ReadyzFollowsRegistration(t *testing.T) {
	e := pluginFaultStart(t, "")
	e.waitReadyz(http.StatusOK)
	e.kubelet.Stop()
	e.waitReadyz(http.StatusServiceUnavailable)
	e.startKubelet()
	e.waitRegistrations(1)
	e.waitReadyz(http.StatusOK)
}

// TestFault11MetricsBounded checks the metrics an operator alerts on: the
// xid label takes only known XIDs or "other", the registrations series
// exists while kubelet.sock is missing, and the Go and process collectors
// are there.
func TestFault11MetricsBounded(t *testing.T) {
	a := startAgent(t, agentSpec{Node: "fault-metrics", FakeNode: "dgx-h100", Rules: "single"})
	a.waitMetric(t, "featureplug_plugin_registrations_total", func(v float64) bool { return v >= 1 },
		`resource="nvidia.com/gpu"`, `result="kubelet-missing"`)
	_, body, err := a.get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`featureplug_plugin_registrations_total{resource="nvidia.com/gpu",result="ok"} 0`,
		"go_goroutines ", "go_memstats_heap_alloc_bytes ", "process_resident_memory_bytes ", "process_open_fds ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
	// XIDs outside the known table, as a driver newer than featureplug
	// reports them: counted under "other".
	a.injectXID(t, 1, 79)
	a.injectXID(t, 1, 1)
	a.injectXID(t, 1, 65535)
	a.waitMetric(t, "featureplug_plugin_health_events_total", func(v float64) bool { return v == 3 })
	_, body, err = a.get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, "featureplug_plugin_health_events_total{") {
			continue
		}
		i := strings.Index(l, `xid="`)
		xid := l[i+5:]
		xid = xid[:strings.IndexByte(xid, '"')]
		if xid != "79" && xid != "other" {
			t.Errorf("health_events_total has xid=%q: %s", xid, l)
		}
	}
	if v := a.metric(t, "featureplug_plugin_health_events_total", `xid="other"`); v != 2 {
		t.Errorf("health_events_total{xid=other} = %v, want 2", v)
	}
}

// TestFault13RegistersAfterRefusedDial restarts the kubelet so that
// kubelet.sock exists but refuses connections until the agent has been
// refused at least once, then listens: the agent registers with it through
// its short retries, with no further file event to wake it.
func TestFault13RegistersAfterRefusedDial(t *testing.T) {
	e := pluginFaultStart(t, "")
	for round := range 3 {
		before := e.agent.metric(t, "featureplug_plugin_registrations_total", `result="error"`)
		regs := e.kubelet.Registrations(pluginFaultResource)
		err := e.kubelet.RestartBindFirst(true, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			return waitFor(ctx, func() (bool, string) {
				v, err := e.agent.tryMetric("featureplug_plugin_registrations_total", `result="error"`)
				if err != nil {
					return false, err.Error()
				}
				return v > before, fmt.Sprintf("registrations_total{result=error} = %v", v)
			})
		})
		if err != nil {
			t.Fatalf("round %d: no refused registration while kubelet.sock was bound but not listening: %v", round, err)
		}
		e.waitRegistrations(regs + 1)
	}
}

// TestFault14StaleSocketRemoved leaves a socket of a resource the plan no
// longer serves in the directory, as an agent killed with SIGKILL does: a
// new agent removes it, and leaves kubelet.sock and other plugins' sockets
// alone.
func TestFault14StaleSocketRemoved(t *testing.T) {
	dir := shortTempDir(t)
	stale := filepath.Join(dir, "featureplug-example.com_withdrawn.sock")
	other := filepath.Join(dir, "vendor-other.sock")
	for _, p := range []string{stale, other} {
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
	}
	pluginFaultStart(t, dir)
	if _, err := os.Lstat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale socket %s is still there (%v)", stale, err)
	}
	for _, p := range []string{other, filepath.Join(dir, "kubelet.sock"), filepath.Join(dir, "featureplug-nvidia.com_gpu.sock")} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// TestFault27ListAndWatchStreamsBounded opens 300 ListAndWatch streams to
// the agent's server over 10 connections and never reads past their first
// answer, as a misbehaving local client could: the server keeps 8 open,
// the kubelet's among them, and refuses every other at once with
// ResourceExhausted naming the bound, counted in
// featureplug_plugin_streams_refused_total; the agent's goroutines grow by
// the 7 streams it keeps, not by the 300; the kubelet's stream is
// unharmed and gets the next device list.
func TestFault27ListAndWatchStreamsBounded(t *testing.T) {
	const streams, conns, bound = 300, 10, 8
	e := pluginFaultStart(t, "")
	e.waitReadyz(http.StatusOK)
	before := e.agent.metric(t, "go_goroutines")
	sock := filepath.Join(e.dir, "featureplug-nvidia.com_gpu.sock")
	ctx, cancel := context.WithCancel(e.ctx())
	defer cancel()
	var accepted, refused int
	var other []error
	for c := range conns {
		conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		client := pluginapi.NewDevicePluginClient(conn)
		for range streams / conns {
			stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
			if err == nil {
				_, err = stream.Recv()
			}
			switch {
			case err == nil:
				accepted++
			case status.Code(err) == codes.ResourceExhausted &&
				strings.Contains(err.Error(), "resource nvidia.com/gpu: 8 ListAndWatch streams are open, the most one device-plugin server keeps (the kubelet needs one)"):
				refused++
			default:
				other = append(other, fmt.Errorf("connection %d: %w", c, err))
			}
		}
	}
	after := e.agent.metric(t, "go_goroutines")
	t.Logf("%d streams: %d kept, %d refused; agent goroutines %v -> %v", streams, accepted, refused, before, after)
	if accepted != bound-1 || refused != streams-accepted || len(other) > 0 {
		t.Errorf("%d streams kept, %d refused, other errors %v; want %d kept (the kubelet holds the 8th), the rest refused", accepted, refused, other, bound-1)
	}
	if got := e.agent.metric(t, "featureplug_plugin_streams_refused_total", `resource="nvidia.com/gpu"`); got != float64(refused) {
		t.Errorf("featureplug_plugin_streams_refused_total = %v, want %d", got, refused)
	}
	// Each kept stream costs a few goroutines and each connection a few
	// more; 300 streams kept would cost over a thousand.
	if grown := after - before; grown > 10*bound+5*conns {
		t.Errorf("agent goroutines grew by %v for %d kept streams over %d connections", grown, accepted, conns)
	}
	// The kubelet's stream still gets what changes.
	updates := e.kubelet.Updates(pluginFaultResource)
	e.agent.injectXID(t, 0, 79)
	if err := e.kubelet.WaitUntil(e.ctx(), func() bool { return e.kubelet.Updates(pluginFaultResource) > updates }); err != nil {
		t.Errorf("the kubelet's stream got no update after the refused streams: %v", err)
	}
}
