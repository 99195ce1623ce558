package mps

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/featureplug/featureplug/rules/plan"
)

// Ready has the shape of the plugin manager's Gate.
var _ func(resource string) (ok bool, reason string) = new(Supervisor).Ready

func TestStartConfiguresDaemon(t *testing.T) {
	tests := []struct {
		name   string
		daemon Daemon
		want   []string // after the -d line
	}{
		{
			name:   "percentage and a limit per GPU, in index order",
			daemon: Daemon{Resource: "example.com/mps", ActiveThreadPercentage: 50, Devices: []Device{{UUID: "GPU-b", Index: 3, PinnedMemoryLimitMiB: 10240}, {UUID: "GPU-a", Index: 1, PinnedMemoryLimitMiB: 20480}}},
			want: []string{
				"set_default_active_thread_percentage 50",
				"set_default_device_pinned_mem_limit GPU-a 20480M",
				"set_default_device_pinned_mem_limit GPU-b 10240M",
			},
		},
		{
			name:   "zero percentage and zero limit leave the daemon's defaults",
			daemon: Daemon{Resource: "nvidia.com/gpu.shared", Devices: []Device{{UUID: "GPU-a", Index: 0}, {UUID: "GPU-b", Index: 1, PinnedMemoryLimitMiB: 512}}},
			want:   []string{"set_default_device_pinned_mem_limit GPU-b 512M"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.apply(tt.daemon)
			e.waitReady(tt.daemon.Resource)

			res := tt.daemon.Resource
			uuids := tt.daemon.normalized().uuids()
			wantStart := "-d CUDA_VISIBLE_DEVICES=" + strings.Join(uuids, ",") + " CUDA_MPS_LOG_DIRECTORY=" + e.sup.logDir(res)
			if got := e.commands(res); !slices.Equal(got, append([]string{wantStart}, tt.want...)) {
				t.Errorf("commands:\n got %q\nwant %q", got, append([]string{wantStart}, tt.want...))
			}
			for _, dir := range []string{e.sup.pipeDir(res), e.sup.logDir(res)} {
				info, err := os.Stat(dir)
				if err != nil || !info.IsDir() {
					t.Fatalf("directory %s: %v", dir, err)
				}
			}
			if got := e.value("daemon_up", res); got != 1 {
				t.Errorf("daemon_up = %v, want 1", got)
			}
			if ok, reason := e.sup.Ready(res); !ok || reason != "" {
				t.Errorf("Ready = %v, %q; want true, \"\"", ok, reason)
			}
		})
	}
}

func TestReadyOnlyAfterConfiguration(t *testing.T) {
	e := newEnv(t, nil)
	d := gpus("example.com/mps", 25, 1000)
	hold := filepath.Join(plan.MPSLayout{Root: e.root}.ResourceDir(d.Resource), "fake-hold")
	if err := os.MkdirAll(filepath.Dir(hold), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.apply(d)

	// The daemon is up, its configuration is under way: not ready yet.
	e.waitFor("the percentage command", func() bool { return e.count(d.Resource, cmdSetThreadPercentage) == 1 })
	if ok, reason := e.sup.Ready(d.Resource); ok || reason != reasonStarting {
		t.Fatalf("Ready while configuring = %v, %q; want false, %q", ok, reason, reasonStarting)
	}
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	e.waitReady(d.Resource)
	if got := e.count(d.Resource, cmdSetPinnedMemLimit); got != 1 {
		t.Errorf("pinned memory commands = %d, want 1 (configuration done before ready)", got)
	}
	if got := e.seen(d.Resource); len(got) == 0 || !got[len(got)-1].ready {
		t.Errorf("OnChange calls = %+v, want the last one ready", got)
	}
}

func TestRestartsKilledDaemon(t *testing.T) {
	e := newEnv(t, nil)
	d := gpus("example.com/mps", 50, 2048, 4096)
	e.apply(d)
	e.waitReady(d.Resource)
	first := e.daemonPid(d.Resource)
	if first == 0 || !alive(first) {
		t.Fatalf("no running fake daemon (pid %d)", first)
	}

	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.waitFor("a restarted daemon", func() bool {
		pid := e.daemonPid(d.Resource)
		ok, _ := e.sup.Ready(d.Resource)
		return ok && pid != first && alive(pid)
	})

	cmds := e.commands(d.Resource)
	for _, c := range []string{"-d ", "set_default_active_thread_percentage 50", "set_default_device_pinned_mem_limit GPU-0-fake 2048M", "set_default_device_pinned_mem_limit GPU-1-fake 4096M"} {
		if n := countOf(cmds, c); n != 2 {
			t.Errorf("%q sent %d times, want 2 (start and restart): %q", c, n, cmds)
		}
	}
	if got := e.value("daemon_restarts_total", d.Resource); got != 1 {
		t.Errorf("daemon_restarts_total = %v, want 1", got)
	}
	if ok, reason := e.sup.Ready(d.Resource); !ok {
		t.Errorf("Ready after the restart = false (%s)", reason)
	}
	var sawDown bool
	for _, c := range e.seen(d.Resource) {
		if !c.ready && strings.HasPrefix(c.reason, reasonRestarted) {
			sawDown = true
		}
	}
	if !sawDown {
		t.Errorf("OnChange never reported %q: %+v", reasonRestarted, e.seen(d.Resource))
	}
}

func TestApplyDiffs(t *testing.T) {
	base := []Daemon{gpus("example.com/a", 50, 1000, 1000), gpus("example.com/b", 25, 500)}
	reordered := gpus("example.com/a", 50, 1000, 1000)
	slices.Reverse(reordered.Devices)

	tests := []struct {
		name        string
		next        []Daemon
		restarted   []string // resources quit and started again
		removed     []string // resources quit for good
		wantCommand map[string]string
	}{
		{name: "same daemons again", next: []Daemon{gpus("example.com/a", 50, 1000, 1000), gpus("example.com/b", 25, 500)}},
		{name: "device order does not matter", next: []Daemon{reordered, gpus("example.com/b", 25, 500)}},
		{name: "removed resource quits", next: []Daemon{gpus("example.com/a", 50, 1000, 1000)}, removed: []string{"example.com/b"}},
		{
			name: "changed percentage restarts only that daemon", next: []Daemon{gpus("example.com/a", 50, 1000, 1000), gpus("example.com/b", 30, 500)},
			restarted: []string{"example.com/b"}, wantCommand: map[string]string{"example.com/b": "set_default_active_thread_percentage 30"},
		},
		{
			name: "added GPU restarts", next: []Daemon{gpus("example.com/a", 50, 1000, 1000, 1000), gpus("example.com/b", 25, 500)},
			restarted: []string{"example.com/a"}, wantCommand: map[string]string{"example.com/a": "-d CUDA_VISIBLE_DEVICES=GPU-0-fake,GPU-1-fake,GPU-2-fake "},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.apply(base...)
			pids := map[string]int{}
			for _, d := range base {
				e.waitReady(d.Resource)
				pids[d.Resource] = e.daemonPid(d.Resource)
			}

			e.apply(tt.next...)
			for _, res := range tt.removed {
				if got := e.commands(res); got[len(got)-1] != cmdQuit {
					t.Errorf("%s: last command %q, want quit (Apply returns after removed daemons quit)", res, got[len(got)-1])
				}
				if alive(pids[res]) {
					t.Errorf("%s: daemon still running after removal", res)
				}
				if ok, reason := e.sup.Ready(res); ok || !strings.Contains(reason, "no MPS control daemon") {
					t.Errorf("%s: Ready = %v, %q after removal", res, ok, reason)
				}
				if _, ok := e.metric("daemon_up", res); ok {
					t.Errorf("%s: daemon_up series kept after removal", res)
				}
			}
			for _, res := range tt.restarted {
				e.waitFor(res+" restarted", func() bool {
					ok, _ := e.sup.Ready(res)
					return ok && e.count(res, "-d ") == 2
				})
				if got := e.count(res, cmdQuit); got != 1 {
					t.Errorf("%s: quit sent %d times, want 1", res, got)
				}
				if c := tt.wantCommand[res]; e.count(res, c) != 1 {
					t.Errorf("%s: %q not sent once: %q", res, c, e.commands(res))
				}
			}
			// Untouched daemons: one start, no quit, same process.
			for _, d := range tt.next {
				if slices.Contains(tt.restarted, d.Resource) {
					continue
				}
				if got := e.commands(d.Resource); countOf(got, "-d ") != 1 || countOf(got, cmdQuit) != 0 {
					t.Errorf("%s was touched: %q", d.Resource, got)
				}
				if pid := e.daemonPid(d.Resource); pid != pids[d.Resource] || !alive(pid) {
					t.Errorf("%s: daemon pid %d, want %d still running", d.Resource, pid, pids[d.Resource])
				}
			}
		})
	}
}

func TestMissingBinary(t *testing.T) {
	tests := []struct {
		name, binary, reason string
	}{
		{"name not in PATH", "nvidia-cuda-mps-control-absent", "nvidia-cuda-mps-control-absent not found in PATH"},
		{"absolute path", "/nonexistent/usr/bin/nvidia-cuda-mps-control", "/nonexistent/usr/bin/nvidia-cuda-mps-control not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, func(o *Options) { o.ControlBinary = tt.binary })
			e.apply(gpus("example.com/a", 50, 1000), gpus("example.com/b", 50, 1000))
			for _, res := range []string{"example.com/a", "example.com/b"} {
				e.waitFor(res+" not-ready reason", func() bool { _, r := e.sup.Ready(res); return r == tt.reason })
			}
			// Several retries later: still not ready, logged once, never started.
			e.waitFor("five retries", func() bool { return strings.Count(e.logs.String(), "MPS control binary still missing") >= 5 })
			if ok, _ := e.sup.Ready("example.com/a"); ok {
				t.Error("ready without a control binary")
			}
			if n := strings.Count(e.logs.String(), "MPS control binary is missing"); n != 1 {
				t.Errorf("missing binary logged %d times, want once:\n%s", n, e.logs.String())
			}
			if got := e.value("control_binary_missing", ""); got != 1 {
				t.Errorf("control_binary_missing = %v, want 1", got)
			}
			if got := e.value("daemon_start_failures_total", "example.com/a"); got != 0 {
				t.Errorf("start failures = %v, want 0 (a missing binary has its own metric)", got)
			}
			if _, err := os.Stat(e.sup.pipeDir("example.com/a")); !os.IsNotExist(err) {
				t.Errorf("pipe directory created without a binary: %v", err)
			}
		})
	}
}

func TestBinaryAppearsLater(t *testing.T) {
	bin := filepath.Join(t.TempDir(), DefaultControlBinary)
	e := newEnv(t, func(o *Options) { o.ControlBinary = bin })
	e.apply(gpus("example.com/a", 50, 1000))
	e.waitFor("missing binary", func() bool { return e.value("control_binary_missing", "") == 1 })

	src, err := os.ReadFile(e.binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin+".tmp", src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		t.Fatal(err)
	}
	e.waitReady("example.com/a")
	if got := e.value("control_binary_missing", ""); got != 0 {
		t.Errorf("control_binary_missing = %v after the binary appeared, want 0", got)
	}
}

func TestStartFailureRetries(t *testing.T) {
	e := newEnv(t, nil)
	d := gpus("example.com/a", 50, 1000)
	fail := filepath.Join(plan.MPSLayout{Root: e.root}.ResourceDir(d.Resource), "fake-fail-start")
	if err := os.MkdirAll(filepath.Dir(fail), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fail, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.apply(d)
	e.waitFor("three failed starts", func() bool { return e.value("daemon_start_failures_total", d.Resource) >= 3 })
	ok, reason := e.sup.Ready(d.Resource)
	if ok || !strings.HasPrefix(reason, reasonFailed) || !strings.Contains(reason, "fake: refusing to start") {
		t.Errorf("Ready = %v, %q; want false with the start error", ok, reason)
	}
	if err := os.Remove(fail); err != nil {
		t.Fatal(err)
	}
	e.waitReady(d.Resource)
}

func TestReplacesLeftoverDaemon(t *testing.T) {
	e := newEnv(t, nil)
	d := gpus("example.com/a", 50, 1000)
	// A daemon from an earlier run already serves the pipe directory.
	pipe := e.sup.pipeDir(d.Resource)
	if err := os.MkdirAll(pipe, 0o755); err != nil {
		t.Fatal(err)
	}
	ctl := controller{binary: e.binary, env: daemonEnv(os.Environ(), pipe, e.sup.logDir(d.Resource), []string{"GPU-old"}), timeout: 5 * time.Second}
	if err := ctl.startDaemon(context.Background()); err != nil {
		t.Fatal(err)
	}
	old := e.daemonPid(d.Resource)

	e.apply(d)
	e.waitReady(d.Resource)
	if alive(old) {
		t.Error("the leftover daemon still runs")
	}
	cmds := e.commands(d.Resource)
	if want := "-d CUDA_VISIBLE_DEVICES=GPU-0-fake "; !strings.HasPrefix(cmds[len(cmds)-3], want) || cmds[len(cmds)-4] != cmdQuit {
		t.Errorf("commands %q: want quit, then %q and configuration", cmds, want)
	}
}

func TestStopQuitsEveryDaemon(t *testing.T) {
	e := newEnv(t, nil)
	daemons := []Daemon{gpus("example.com/a", 50, 1000), gpus("example.com/b", 50, 1000)}
	e.apply(daemons...)
	var pids []int
	for _, d := range daemons {
		e.waitReady(d.Resource)
		pids = append(pids, e.daemonPid(d.Resource))
	}
	e.sup.Stop()
	for i, d := range daemons {
		if got := e.commands(d.Resource); got[len(got)-1] != cmdQuit {
			t.Errorf("%s: last command %q, want quit", d.Resource, got[len(got)-1])
		}
		if alive(pids[i]) {
			t.Errorf("%s: daemon still runs after Stop", d.Resource)
		}
	}
	if err := e.sup.Apply(context.Background(), daemons); err == nil {
		t.Error("Apply after Stop succeeded")
	}
	e.sup.Stop() // again: no effect
}

func TestApplyRejectsInvalidInput(t *testing.T) {
	ok := gpus("example.com/a", 50, 1000)
	tests := []struct {
		name    string
		daemons []Daemon
		want    string
	}{
		{"empty resource", []Daemon{{Devices: ok.Devices}}, `daemons[0].resource: "" is not an extended resource name: it is empty`},
		{"two slashes", []Daemon{{Resource: "a/b/c", Devices: ok.Devices}}, `daemons[0].resource: "a/b/c" is not an extended resource name`},
		{"dot dot", []Daemon{{Resource: "..", Devices: ok.Devices}}, `daemons[0].resource: ".." is not an extended resource name: it needs a domain`},
		{"space", []Daemon{{Resource: "example.com/a b", Devices: ok.Devices}}, `daemons[0].resource: "example.com/a b" is not an extended resource name: name part must consist of alphanumeric characters`},
		{"duplicate resource", []Daemon{ok, ok}, `daemons[1].resource: "example.com/a" is already daemons[0]`},
		{"no devices", []Daemon{{Resource: "example.com/a"}}, `daemons[0].devices: no devices for resource "example.com/a"`},
		{"empty UUID", []Daemon{{Resource: "example.com/a", Devices: []Device{{UUID: ""}}}}, `daemons[0].devices[0].uuid: "" is not a device UUID`},
		{"UUID with a comma", []Daemon{{Resource: "example.com/a", Devices: []Device{{UUID: "GPU-a,GPU-b"}}}}, `daemons[0].devices[0].uuid: "GPU-a,GPU-b" is not a device UUID`},
		{"duplicate UUID", []Daemon{{Resource: "example.com/a", Devices: []Device{{UUID: "GPU-a"}, {UUID: "GPU-a", Index: 1}}}}, `daemons[0].devices[1].uuid: "GPU-a" is already devices[0]`},
		{"negative index", []Daemon{{Resource: "example.com/a", Devices: []Device{{UUID: "GPU-a", Index: -1}}}}, `daemons[0].devices[0].index: -1 is negative`},
		{"percentage over 100", []Daemon{{Resource: "example.com/a", Devices: ok.Devices, ActiveThreadPercentage: 101}}, `daemons[0].activeThreadPercentage: 101 is outside 0..100`},
		{"negative percentage", []Daemon{ok, {Resource: "example.com/b", Devices: ok.Devices, ActiveThreadPercentage: -5}}, `daemons[1].activeThreadPercentage: -5 is outside 0..100`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sup, err := New(Options{Root: t.TempDir(), ControlBinary: "/nonexistent/mps-control"})
			if err != nil {
				t.Fatal(err)
			}
			defer sup.Stop()
			err = sup.Apply(context.Background(), tt.daemons)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Apply error = %v, want it to contain %q", err, tt.want)
			}
			sup.mu.Lock()
			n := len(sup.workers)
			sup.mu.Unlock()
			if n != 0 {
				t.Errorf("invalid Apply started %d daemons", n)
			}
		})
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"relative root", Options{Root: "mps"}, `root: "mps" is not an absolute path`},
		{"relative binary path", Options{ControlBinary: "bin/nvidia-cuda-mps-control"}, `controlBinary: "bin/nvidia-cuda-mps-control" is neither`},
		{"negative interval", Options{CheckInterval: -time.Second}, `checkInterval: -1s is negative`},
		{"negative timeout", Options{CommandTimeout: -time.Second}, `commandTimeout: -1s is negative`},
		{"negative backoff", Options{Backoff: wait.Backoff{Duration: -1}}, `backoff:`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestNewRejectsSecondSupervisorOnRegisterer(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(Options{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Registerer: reg}); err == nil {
		t.Fatal("a second Supervisor registered the same metrics")
	}
}

func TestDirectories(t *testing.T) {
	sup, err := New(Options{Root: "/run/featureplug/mps/"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ resource, pipe, log string }{
		{"nvidia.com/gpu.shared", "/run/featureplug/mps/nvidia.com_gpu.shared/pipe", "/run/featureplug/mps/nvidia.com_gpu.shared/log"},
		{"example.com/mps", "/run/featureplug/mps/example.com_mps/pipe", "/run/featureplug/mps/example.com_mps/log"},
	}
	for _, tt := range tests {
		if got := sup.pipeDir(tt.resource); got != tt.pipe {
			t.Errorf("PipeDir(%q) = %q, want %q", tt.resource, got, tt.pipe)
		}
		if got := sup.logDir(tt.resource); got != tt.log {
			t.Errorf("LogDir(%q) = %q, want %q", tt.resource, got, tt.log)
		}
	}
}

func TestSocketPathTooLong(t *testing.T) {
	root := "/" + strings.Repeat("r", 80)
	e := newEnv(t, func(o *Options) { o.Root = root })
	res := "example.com/" + strings.Repeat("x", 20)
	e.apply(gpus(res, 50, 1000))
	e.waitFor("the socket path error", func() bool {
		_, reason := e.sup.Ready(res)
		return strings.Contains(reason, "too long for the daemon's socket")
	})
}

func TestReadyUnknownResource(t *testing.T) {
	sup, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ok, reason := sup.Ready("example.com/none"); ok || reason != "no MPS control daemon is configured for example.com/none" {
		t.Errorf("Ready = %v, %q", ok, reason)
	}
}

func TestResolveControlBinary(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "plain")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, binary, wantErr string
		missing               bool
	}{
		{"found in PATH", "sh", "", false},
		{"absent from PATH", "no-such-mps-control", "no-such-mps-control not found in PATH", true},
		{"absent path", filepath.Join(dir, "absent"), filepath.Join(dir, "absent") + " not found", true},
		{"directory", dir, "is not an executable file", false},
		{"not executable", notExec, "is not an executable file", false},
		{"relative path", "./mps", "a path must be absolute", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, err := ResolveControlBinary(tt.binary)
			if tt.wantErr == "" {
				if err != nil || !filepath.IsAbs(path) {
					t.Fatalf("ResolveControlBinary(%q) = %q, %v", tt.binary, path, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want %q", err, tt.wantErr)
			}
			if got := errors.Is(err, ErrControlBinaryNotFound); got != tt.missing {
				t.Errorf("errors.Is(err, ErrControlBinaryNotFound) = %v, want %v", got, tt.missing)
			}
		})
	}
}

func TestDaemonEnv(t *testing.T) {
	base := []string{"PATH=/usr/bin", "CUDA_VISIBLE_DEVICES=0,1", "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps", "HOME=/root"}
	got := daemonEnv(base, "/mps/r/pipe", "/mps/r/log", []string{"GPU-a", "GPU-b"})
	want := []string{"PATH=/usr/bin", "HOME=/root", "CUDA_MPS_PIPE_DIRECTORY=/mps/r/pipe", "CUDA_MPS_LOG_DIRECTORY=/mps/r/log", "CUDA_VISIBLE_DEVICES=GPU-a,GPU-b"}
	if !slices.Equal(got, want) {
		t.Errorf("daemonEnv =\n %q\nwant\n %q", got, want)
	}
}
