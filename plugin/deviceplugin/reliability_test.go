package deviceplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fswatch"
	"github.com/featureplug/featureplug/discovery/statedir"
	"github.com/featureplug/featureplug/plugin/health"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
	"github.com/featureplug/featureplug/rules/plan"
)

// logBuffer is a concurrency-safe log sink for tests.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the log lines that contain every one of subs.
func (b *logBuffer) lines(subs ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		ok := l != ""
		for _, s := range subs {
			ok = ok && strings.Contains(l, s)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

// newLogBuffer returns a logger at info level writing into a logBuffer.
func newLogBuffer() (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo})), b
}

// waitTrue polls cond until it holds or testTimeout passes.
func waitTrue(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// restartKubeletIn starts a new simulated kubelet in the env's directory.
func (e *env) restartKubeletIn(t *testing.T) {
	t.Helper()
	k, err := kubeletsim.Start(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	e.kubelet = k
}

func TestDirectoryRecreatedIsWatchedAgain(t *testing.T) {
	log, logs := newLogBuffer()
	opts := DefaultOptions()
	opts.Logger = log
	// A backstop far away: only the re-armed watch can bring the servers
	// back within the test.
	opts.Watcher = runWatcher(t, fswatch.Options{Interval: time.Hour})
	e := startEnv(t, opts, h100Plan("nvidia.com/gpu"))
	e.waitRegistered(1, "nvidia.com/gpu")
	waitTrue(t, "ready", e.m.Ready)

	e.kubelet.Stop()
	if err := os.RemoveAll(e.dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", strings.Join(logs.lines(), "\n"))
		}
	})
	waitTrue(t, "the WARN about the removed directory", func() bool {
		return len(logs.lines("level=WARN", "device-plugin directory removed")) == 1
	})
	if e.m.Ready() {
		t.Error("Ready with the device-plugin directory gone")
	}
	if err := os.Mkdir(e.dir, 0o750); err != nil {
		t.Fatal(err)
	}
	e.restartKubeletIn(t)
	e.waitRegistered(1, "nvidia.com/gpu")
	waitTrue(t, "ready again", e.m.Ready)
	if n := len(logs.lines("level=INFO", "device-plugin directory is back")); n != 1 {
		t.Errorf("%d INFO lines about the directory coming back, want 1", n)
	}
	// An ordinary kubelet restart afterwards is seen by the watch at once.
	before := e.kubelet.Registrations("nvidia.com/gpu")
	if err := e.kubelet.Restart(true); err != nil {
		t.Fatal(err)
	}
	e.waitRegistered(before+1, "nvidia.com/gpu")
}

func TestDirectoryAndParentRecreated(t *testing.T) {
	log, logs := newLogBuffer()
	opts := DefaultOptions()
	opts.Logger = log
	opts.Watcher = runWatcher(t, fswatch.Options{Interval: time.Hour})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", strings.Join(logs.lines(), "\n"))
		}
	})
	root := kubeletsim.ShortTempDir(t)
	dir := filepath.Join(root, "kubelet", "device-plugins")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir}
	e.restartKubeletIn(t)
	e.startManager(opts, h100Plan("nvidia.com/gpu"))
	e.waitRegistered(1, "nvidia.com/gpu")
	e.kubelet.Stop()
	if err := os.RemoveAll(filepath.Join(root, "kubelet")); err != nil {
		t.Fatal(err)
	}
	waitTrue(t, "unready", func() bool { return !e.m.Ready() })
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	e.restartKubeletIn(t)
	e.waitRegistered(1, "nvidia.com/gpu")
	waitTrue(t, "ready again", e.m.Ready)
}

func TestBackstopWithoutInotify(t *testing.T) {
	reg := prometheus.NewRegistry()
	log, logs := newLogBuffer()
	opts := DefaultOptions()
	opts.Registerer = reg
	opts.Logger = log
	opts.Watcher = runWatcher(t, fswatch.Options{Interval: 10 * time.Millisecond, Logger: log, NewInotify: fswatch.NoInotify})
	e := &env{t: t, dir: kubeletsim.ShortTempDir(t)}
	e.restartKubeletIn(t)
	opts.KubeletDir = e.dir
	m, err := NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Apply(h100Plan("nvidia.com/gpu")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	e.m, e.cancel, e.done = m, cancel, done
	t.Cleanup(e.stop)
	e.waitRegistered(1, "nvidia.com/gpu")
	if got := metricValue(t, reg, "featureplug_plugin_watch_fallback", nil); got != 1 {
		t.Errorf("watch_fallback = %v, want 1", got)
	}
	if n := len(logs.lines("level=WARN", "no inotify instance to watch the device-plugin directory")); n != 1 {
		t.Errorf("%d WARN lines about the missing watcher, want 1", n)
	}
	// A kubelet restart and a deleted plugin socket are found by polling.
	if err := e.kubelet.Restart(true); err != nil {
		t.Fatal(err)
	}
	e.waitRegistered(2, "nvidia.com/gpu")
	e.kubelet.Stop()
	waitTrue(t, "unready after the kubelet left", func() bool { return !m.Ready() })
	e.restartKubeletIn(t)
	e.waitRegistered(1, "nvidia.com/gpu")
	waitTrue(t, "ready again", m.Ready)
}

func TestReadyFollowsRegistration(t *testing.T) {
	e := startEnv(t, DefaultOptions(), mixedPlan())
	names := []string{}
	for _, r := range mixedPlan().Resources {
		names = append(names, r.Name)
	}
	e.waitRegistered(1, names...)
	waitTrue(t, "ready", e.m.Ready)
	e.kubelet.Stop()
	waitTrue(t, "unready with the kubelet gone", func() bool { return !e.m.Ready() })
	e.restartKubeletIn(t)
	e.waitRegistered(1, names...)
	waitTrue(t, "ready again", e.m.Ready)
}

func TestStaleSocketsRemoved(t *testing.T) {
	dir := kubeletsim.ShortTempDir(t)
	stale, _ := SocketPath(dir, "example.com/removed")
	served, _ := SocketPath(dir, "nvidia.com/gpu")
	other := filepath.Join(dir, "other-vendor.sock")
	notSocket := filepath.Join(dir, "featureplug-notes.sock")
	for _, p := range []string{stale, served, other} {
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		_ = ln.Close()
	}
	if err := os.WriteFile(notSocket, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir}
	e.restartKubeletIn(t)
	e.startManager(DefaultOptions(), h100Plan("nvidia.com/gpu"))
	e.waitRegistered(1, "nvidia.com/gpu")
	if exists(stale) {
		t.Errorf("stale socket %s of a resource the plan does not serve is still there", stale)
	}
	for _, p := range []string{served, other, notSocket, filepath.Join(dir, KubeletSocket)} {
		if !exists(p) {
			t.Errorf("%s was removed", p)
		}
	}
}

func TestRegistrationSeriesWhileKubeletMissing(t *testing.T) {
	reg := prometheus.NewRegistry()
	log, logs := newLogBuffer()
	opts := DefaultOptions()
	opts.Registerer = reg
	opts.Logger = log
	e := &env{t: t, dir: kubeletsim.ShortTempDir(t)}
	e.startManager(opts, h100Plan("nvidia.com/gpu"))
	waitTrue(t, "several kubelet-missing attempts", func() bool {
		return metricValue(t, reg, "featureplug_plugin_registrations_total", map[string]string{"resource": "nvidia.com/gpu", "result": "kubelet-missing"}) >= 5
	})
	if n := len(logs.lines("registration with the kubelet")); n != 1 {
		t.Errorf("%d log lines for 5 failed registrations within the summary interval, want 1", n)
	}
	if got := metricValue(t, reg, "featureplug_plugin_registrations_total", map[string]string{"resource": "nvidia.com/gpu", "result": "ok"}); got != 0 {
		t.Errorf("registrations_total{result=ok} = %v, want a 0 series", got)
	}
}

// TestRegistersAfterRefusedDial restarts the kubelet so that kubelet.sock
// exists but refuses dials until the manager has been refused once, then
// listens: the manager must register with it without another event.
func TestRegistersAfterRefusedDial(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := DefaultOptions()
	opts.Registerer = reg
	opts.Watcher = runWatcher(t, fswatch.Options{Interval: time.Hour})
	e := startEnv(t, opts, h100Plan("nvidia.com/gpu"))
	e.waitRegistered(1, "nvidia.com/gpu")
	errorsNow := func() float64 {
		return metricValue(t, reg, "featureplug_plugin_registrations_total", map[string]string{"resource": "nvidia.com/gpu", "result": "error"})
	}
	for round := range 3 {
		before, regs := errorsNow(), e.kubelet.Registrations("nvidia.com/gpu")
		err := e.kubelet.RestartBindFirst(true, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			for errorsNow() <= before {
				if ctx.Err() != nil {
					return errors.New("no refused registration while kubelet.sock was bound but not listening")
				}
				time.Sleep(time.Millisecond)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		e.waitRegistered(regs+1, "nvidia.com/gpu")
	}
}

func TestHealthSurvivesRestart(t *testing.T) {
	clock := newFakeClock()
	state := kubeletsim.ShortTempDir(t)
	reg := prometheus.NewRegistry()
	opts := DefaultOptions()
	opts.Registerer = reg
	withHealth(t, &opts, clock, time.Minute, state, reg)
	e := startEnv(t, opts, h100Plan("nvidia.com/gpu"))
	e.waitRegistered(1, "nvidia.com/gpu")
	e.m.health.Record(discovery.HealthEvent{GPUUUID: gpuUUID(4), Kind: discovery.EventXID, XID: 61})
	e.m.health.Record(discovery.HealthEvent{GPUUUID: gpuUUID(6), MIGUUID: migUUID(6, 1), Kind: discovery.EventXID, XID: 61})

	var st stateFile
	b, err := os.ReadFile(filepath.Join(state, statedir.HealthFile))
	if err != nil {
		t.Fatalf("state file not written at once: %v", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Devices) != 2 || st.Devices[0].Key != gpuUUID(4) || len(st.Devices[0].Holds) != 1 || st.Devices[0].Holds[0].XID != 61 ||
		!st.Devices[0].Holds[0].Until.Equal(clock.Now().Add(time.Minute)) || st.Devices[1].MIGUUID != migUUID(6, 1) {
		t.Fatalf("state file holds %s", b)
	}

	// A storm on GPU 4 is written once per persist delay, not per event.
	writes := metricValue(t, reg, "featureplug_plugin_health_state_writes_total", map[string]string{"result": "ok"})
	clock.Advance(10 * time.Second)
	for range 1000 {
		e.m.health.Record(discovery.HealthEvent{GPUUUID: gpuUUID(4), Kind: discovery.EventXID, XID: 61})
	}
	if got := metricValue(t, reg, "featureplug_plugin_health_state_writes_total", map[string]string{"result": "ok"}); got != writes {
		t.Errorf("%v state-file writes during a storm on an already unhealthy GPU, want none yet", got-writes)
	}
	clock.Advance(5 * time.Second)
	if got := metricValue(t, reg, "featureplug_plugin_health_state_writes_total", map[string]string{"result": "ok"}); got != writes+1 {
		t.Errorf("%v state-file writes after the persist delay, want 1", got-writes)
	}

	// "Crash": a new manager on the same state directory. Its first list
	// has GPU 4 and MIG 6:1's GPU-less device Unhealthy.
	e.kubelet.Stop()
	e.stop()
	opts.Health.Close()
	opts.Registerer = nil
	withHealth(t, &opts, clock, time.Minute, state, nil)
	e2 := startEnv(t, opts, &plan.Plan{Resources: []plan.Resource{
		{Name: "nvidia.com/gpu", Devices: gpus(0, 1, 2, 3, 4, 5)},
		{Name: "nvidia.com/mig", Devices: []plan.Device{migDevice(6, 0), migDevice(6, 1)}},
	}})
	e2.waitRegistered(1, "nvidia.com/gpu", "nvidia.com/mig")
	if got := e2.kubelet.Updates("nvidia.com/gpu"); got != 1 {
		t.Errorf("%d lists, want the first", got)
	}
	h := healthOf(e2.kubelet.Devices("nvidia.com/gpu"))
	for i := range 6 {
		want := pluginapi.Healthy
		if i == 4 {
			want = pluginapi.Unhealthy
		}
		if h[gpuUUID(i)] != want {
			t.Errorf("first list after restart: GPU %d is %s, want %s", i, h[gpuUUID(i)], want)
		}
	}
	hm := healthOf(e2.kubelet.Devices("nvidia.com/mig"))
	if hm[migUUID(6, 0)] != pluginapi.Healthy || hm[migUUID(6, 1)] != pluginapi.Unhealthy {
		t.Errorf("first MIG list after restart: %v", hm)
	}
	// They recover at their deadlines: MIG 6:1 a minute after its event,
	// GPU 4 a minute after its storm.
	clock.Advance(time.Minute - 10*time.Second - 5*time.Second)
	e2.waitDevices("nvidia.com/mig", "MIG 6:1 recovered", func(devs []*pluginapi.Device) bool {
		return healthOf(devs)[migUUID(6, 1)] == pluginapi.Healthy
	})
	if h := healthOf(e2.kubelet.Devices("nvidia.com/gpu"))[gpuUUID(4)]; h != pluginapi.Unhealthy {
		t.Errorf("GPU 4 is %s before its deadline", h)
	}
	clock.Advance(10*time.Second + 5*time.Second)
	e2.waitDevices("nvidia.com/gpu", "GPU 4 recovered", func(devs []*pluginapi.Device) bool {
		return healthOf(devs)[gpuUUID(4)] == pluginapi.Healthy
	})
}

func TestHealthStateExpiredAndCorrupt(t *testing.T) {
	clock := newFakeClock()
	state := kubeletsim.ShortTempDir(t)
	path := filepath.Join(state, statedir.HealthFile)
	old := stateFile{Version: 1, Devices: []stateRecord{
		{Key: gpuUUID(1), GPUUUID: gpuUUID(1), Kind: discovery.EventXID, XID: 79, Deadline: clock.Now().Add(-time.Second)},
		{Key: gpuUUID(2), GPUUUID: gpuUUID(2), Kind: discovery.EventXID, XID: 48, Deadline: clock.Now().Add(time.Hour)},
	}}
	b, _ := json.Marshal(old)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	withHealth(t, &opts, clock, health.DefaultRecovery, state, nil)
	e := startEnv(t, opts, h100Plan("nvidia.com/gpu"))
	e.waitRegistered(1, "nvidia.com/gpu")
	h := healthOf(e.kubelet.Devices("nvidia.com/gpu"))
	if h[gpuUUID(1)] != pluginapi.Healthy || h[gpuUUID(2)] != pluginapi.Unhealthy {
		t.Errorf("expired record for GPU 1 and current one for GPU 2: health %v", h)
	}
	e.kubelet.Stop()
	e.stop()

	for name, content := range map[string]string{
		"garbage":     "{not json",
		"new version": `{"version": 99, "devices": []}`,
		"no device":   `{"version": 1, "devices": [{"kind": "xid"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			log, logs := newLogBuffer()
			o := opts
			o.Logger = log
			withHealth(t, &o, clock, health.DefaultRecovery, state, nil)
			e := startEnv(t, o, h100Plan("nvidia.com/gpu"))
			e.waitRegistered(1, "nvidia.com/gpu")
			if n := len(logs.lines("level=WARN", "ignoring the health state file", path)); n != 1 {
				t.Errorf("%d WARN lines naming %s, want 1", n, path)
			}
			_, healthy := e.kubelet.Capacity("nvidia.com/gpu")
			if healthy != 8 {
				t.Errorf("%d healthy GPUs after an unreadable state file, want 8", healthy)
			}
		})
	}
}

func TestHealthLogAggregated(t *testing.T) {
	clock := newFakeClock()
	reg := prometheus.NewRegistry()
	log, logs := newLogBuffer()
	opts := DefaultOptions()
	opts.Logger = log
	opts.Registerer = reg
	withHealth(t, &opts, clock, health.DefaultRecovery, "", reg)
	e := startEnv(t, opts, h100Plan("nvidia.com/gpu"))
	e.waitRegistered(1, "nvidia.com/gpu")
	const storm = 5000
	for i := range storm {
		xid := uint64(61)
		if i%5 == 0 {
			xid = 1 << 40 // an XID nobody knows: counted as "other"
		}
		e.m.health.Record(discovery.HealthEvent{GPUUUID: gpuUUID(i % 2), Kind: discovery.EventXID, XID: xid})
	}
	if n := len(logs.lines("device unhealthy")); n != 2 {
		t.Errorf("%d 'device unhealthy' lines for a storm on 2 GPUs, want 2", n)
	}
	clock.Advance(10 * time.Second)
	sums := logs.lines("level=WARN", "device health events continue")
	if len(sums) != 2 {
		t.Fatalf("%d summary lines after one interval, want 2: %q", len(sums), sums)
	}
	if !strings.Contains(sums[0]+sums[1], "events=2499") || !strings.Contains(sums[0]+sums[1], "xid 61: 2000") || !strings.Contains(sums[0]+sums[1], "xid other: 499") {
		t.Errorf("summaries do not count by XID: %q", sums)
	}
	clock.Advance(10 * time.Second) // a quiet interval ends the window
	e.m.health.Record(discovery.HealthEvent{GPUUUID: gpuUUID(0), Kind: discovery.EventECCDoubleBit})
	if n := len(logs.lines("device unhealthy")); n != 3 {
		t.Errorf("%d 'device unhealthy' lines after a quiet interval and a new event, want 3", n)
	}
	if got := metricValue(t, reg, "featureplug_plugin_health_events_total", map[string]string{"xid": "61"}); got != storm*4/5 {
		t.Errorf("health_events_total{xid=61} = %v, want %d", got, storm*4/5)
	}
	if got := metricValue(t, reg, "featureplug_plugin_health_events_total", map[string]string{"xid": "other"}); got != storm/5 {
		t.Errorf("health_events_total{xid=other} = %v, want %d", got, storm/5)
	}
}

func TestAllocateStrict(t *testing.T) {
	o, err := DefaultOptions().withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	gpuSet := newDeviceSet(h100Plan("nvidia.com/gpu").Resources[0], nvlinkGroups(8, 4))
	_, bad, _ := gpuSet.apiDevices(func(d *plan.Device) bool { return d.GPUUUID == gpuUUID(3) })
	tests := []struct {
		name string
		ids  []string
		code codes.Code
		want []string
	}{
		{"duplicate", gpuIDs(1, 2, 1), codes.InvalidArgument, []string{"repeated device IDs", gpuUUID(1)}},
		{"unhealthy", gpuIDs(2, 3), codes.FailedPrecondition, []string{"unhealthy device IDs", gpuUUID(3), "Unhealthy"}},
		{"more than the resource has", append(gpuIDs(0, 1, 2, 3, 4, 5, 6, 7), "x"), codes.InvalidArgument, []string{"9 device IDs", "more than the 8"}},
		{"many unknown", []string{"a", "b", "c", "d", "e", "f", "g"}, codes.InvalidArgument, []string{`7 unknown device IDs, e.g. "a", "b", "c", "d", "e"`}},
		{"long unknown", []string{strings.Repeat("z", 100000)}, codes.InvalidArgument, []string{"unknown device IDs", "..."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := gpuSet.allocate(tt.ids, &o, bad)
			if status.Code(err) != tt.code {
				t.Fatalf("error %v, want %v", err, tt.code)
			}
			msg := status.Convert(err).Message()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
			if len(msg) > 1024 || strings.Contains(msg, `"f"`) {
				t.Errorf("error names too much: %d bytes: %.200s", len(msg), msg)
			}
		})
	}
	if _, err := gpuSet.allocate(gpuIDs(0, 1), &o, bad); err != nil {
		t.Errorf("healthy devices: %v", err)
	}
}

func TestPreferredSkipsUnhealthy(t *testing.T) {
	ds := newDeviceSet(h100Plan("nvidia.com/gpu").Resources[0], nvlinkGroups(8, 4))
	// GPUs 0 and 1 unhealthy: the best pair in the first NVLink group is
	// then 2 and 3, never 0 or 1 although the kubelet offers them.
	_, bad, _ := ds.apiDevices(func(d *plan.Device) bool { return d.GPUIndex < 2 })
	got, err := ds.pick(gpuIDs(0, 1, 2, 3), nil, 2, ReplicasDistributed, bad)
	if err != nil || strings.Join(got, ",") != strings.Join(gpuIDs(2, 3), ",") {
		t.Errorf("pick = %v, %v; want GPUs 2 and 3", got, err)
	}
	// A must-include unhealthy device is honoured.
	got, err = ds.pick(gpuIDs(0, 1, 2, 3), gpuIDs(0), 2, ReplicasDistributed, bad)
	if err != nil || len(got) != 2 || got[0] != gpuUUID(0) || got[1] == gpuUUID(1) {
		t.Errorf("pick with must-include unhealthy GPU 0 = %v, %v", got, err)
	}
	// Not enough healthy devices: FailedPrecondition.
	_, err = ds.pick(gpuIDs(0, 1, 2), nil, 2, ReplicasDistributed, bad)
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("pick of 2 from 1 healthy: %v, want FailedPrecondition", err)
	}
	// Replicas of an unhealthy GPU are skipped too.
	rs := newDeviceSet(replicaResource(), nvlinkGroups(8, 4))
	_, rbad, _ := rs.apiDevices(func(d *plan.Device) bool { return d.GPUIndex != 5 })
	got, err = rs.pick(allReplicas(8, 8), nil, 3, ReplicasDistributed, rbad)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range got {
		if !strings.HasPrefix(id, gpuUUID(5)) {
			t.Errorf("replica %s of an unhealthy GPU preferred", id)
		}
	}
}

func TestOversizedRequestRejected(t *testing.T) {
	e := startEnv(t, DefaultOptions(), h100Plan("nvidia.com/gpu"))
	e.waitRegistered(1, "nvidia.com/gpu")
	e.m.health.Record(discovery.HealthEvent{GPUUUID: gpuUUID(7), Kind: discovery.EventXID, XID: 61})
	e.waitDevices("nvidia.com/gpu", "GPU 7 unhealthy", func(devs []*pluginapi.Device) bool {
		return healthOf(devs)[gpuUUID(7)] == pluginapi.Unhealthy
	})
	client, err := e.kubelet.Client("nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	huge := make([]string, 40000)
	for i := range huge {
		huge[i] = strings.Repeat("x", 40)
	}
	_, err = client.Allocate(e.ctx(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: huge}}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("1.6 MB Allocate: %v, want ResourceExhausted", err)
	}
	_, err = e.kubelet.Allocate(e.ctx(), "nvidia.com/gpu", gpuIDs(7))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), gpuUUID(7)) {
		t.Errorf("Allocate of the unhealthy GPU 7: %v, want FailedPrecondition naming it", err)
	}
	got, err := e.kubelet.GetPreferredAllocation(e.ctx(), "nvidia.com/gpu", gpuIDs(4, 5, 6, 7), nil, 3)
	if err != nil || strings.Contains(strings.Join(got, ","), gpuUUID(7)) {
		t.Errorf("GetPreferredAllocation = %v, %v; want three of GPUs 4-6", got, err)
	}
}

// stateRecord and stateFile read the health state file as its readers
// (an operator, a restarted agent) see it.
type stateRecord struct {
	Key      string                    `json:"device"`
	GPUUUID  string                    `json:"gpuUUID"`
	MIGUUID  string                    `json:"migUUID,omitempty"`
	Kind     discovery.HealthEventKind `json:"kind"`
	XID      uint64                    `json:"xid,omitempty"`
	Deadline time.Time                 `json:"recoverAt,omitzero"`
	// Holds are what version 2 keeps per device (the fields above are
	// version 1's).
	Holds []stateHold `json:"holds,omitempty"`
}

// stateHold is one hold of a version 2 state file.
type stateHold struct {
	Effect discovery.HealthEffect    `json:"effect"`
	Kind   discovery.HealthEventKind `json:"kind"`
	XID    uint64                    `json:"xid,omitempty"`
	Until  time.Time                 `json:"until,omitzero"`
}

type stateFile struct {
	Version int           `json:"version"`
	Devices []stateRecord `json:"devices"`
}
