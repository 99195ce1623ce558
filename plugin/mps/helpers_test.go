package mps

import (
	"bytes"
	"context"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
)

// waitTimeout bounds every wait of the tests; the waits end as soon as
// their condition holds.
const waitTimeout = 20 * time.Second

// env is one test's supervisor over the fake control binary.
type env struct {
	t      *testing.T
	root   string
	binary string
	reg    *prometheus.Registry
	logs   *syncBuffer
	sup    *Supervisor

	mu      sync.Mutex
	changes []change
}

// change is one OnChange call and the readiness seen in it.
type change struct {
	resource string
	ready    bool
	reason   string
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// fakeBinary copies the fake control binary into a temporary directory,
// executable whatever the checkout did to its mode.
func fakeBinary(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the fake control binary reads /proc")
	}
	src, err := os.ReadFile(filepath.Join("testdata", DefaultControlBinary))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), DefaultControlBinary)
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// newEnv returns a supervisor with fast checks and backoff over the fake
// binary; edit adjusts the options. Cleanup stops it and kills any daemon
// left running.
func newEnv(t *testing.T, edit func(*Options)) *env {
	t.Helper()
	e := &env{t: t, root: kubeletsim.ShortTempDir(t), binary: fakeBinary(t), reg: prometheus.NewPedanticRegistry(), logs: &syncBuffer{}}
	opts := Options{
		Root:           e.root,
		ControlBinary:  e.binary,
		Logger:         slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer:     e.reg,
		Backoff:        wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Steps: 1 << 30, Cap: 40 * time.Millisecond},
		CheckInterval:  20 * time.Millisecond,
		CommandTimeout: 5 * time.Second,
	}
	opts.OnChange = func(resource string) {
		ok, reason := e.sup.Ready(resource)
		e.mu.Lock()
		e.changes = append(e.changes, change{resource, ok, reason})
		e.mu.Unlock()
	}
	if edit != nil {
		edit(&opts)
	}
	sup, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	e.sup = sup
	t.Cleanup(func() {
		sup.Stop()
		killLeftovers(t, e.root)
	})
	return e
}

// killLeftovers kills every fake daemon under root that is still running.
func killLeftovers(t *testing.T, root string) {
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "nvidia-cuda-mps-control.pid" {
			return nil
		}
		if pid := readPid(path); pid > 0 && syscall.Kill(pid, syscall.SIGKILL) == nil {
			t.Logf("killed a leftover fake daemon (pid %d)", pid)
		}
		return nil
	})
}

// readPid returns the pid in file, or 0.
func readPid(file string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// apply applies daemons and fails the test on error.
func (e *env) apply(daemons ...Daemon) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := e.sup.Apply(ctx, daemons); err != nil {
		e.t.Fatalf("Apply: %v", err)
	}
}

// waitFor polls cond until it holds.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			logs := e.logs.String()
			if len(logs) > 4000 {
				logs = "..." + logs[len(logs)-4000:]
			}
			e.t.Fatalf("timed out waiting for %s\nlogs:\n%s", what, logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitReady waits until resource is ready.
func (e *env) waitReady(resource string) {
	e.t.Helper()
	e.waitFor(resource+" ready", func() bool { ok, _ := e.sup.Ready(resource); return ok })
}

// commands returns the commands resource's fake received, without the
// liveness checks.
func (e *env) commands(resource string) []string {
	b, err := os.ReadFile(filepath.Join(e.sup.pipeDir(resource), "fake-commands.log"))
	if err != nil && !os.IsNotExist(err) {
		e.t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line != "" && line != cmdGetThreadPercentage {
			out = append(out, line)
		}
	}
	return out
}

// count returns how many of resource's commands are cmd.
func (e *env) count(resource, cmd string) int {
	return countOf(e.commands(resource), cmd)
}

func countOf(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// daemonPid returns the pid of resource's fake daemon, or 0.
func (e *env) daemonPid(resource string) int {
	return readPid(filepath.Join(e.sup.pipeDir(resource), "nvidia-cuda-mps-control.pid"))
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// seen returns the OnChange calls so far for resource.
func (e *env) seen(resource string) []change {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(e.changes), func(c change) bool { return c.resource != resource })
}

// metric returns the value of the named metric (without its
// "featureplug_mps_" prefix) for resource, or of the unlabelled metric when
// resource is empty; ok is false when the series does not exist.
func (e *env) metric(name, resource string) (value float64, ok bool) {
	e.t.Helper()
	fams, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "featureplug_mps_"+name {
			continue
		}
		for _, m := range f.GetMetric() {
			var got string
			for _, l := range m.GetLabel() {
				if l.GetName() == "resource" {
					got = l.GetValue()
				}
			}
			if got == resource {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

// value returns the named metric's value for resource, 0 when absent.
func (e *env) value(name, resource string) float64 {
	e.t.Helper()
	v, _ := e.metric(name, resource)
	return v
}

// gpus returns a daemon for resource over n GPUs with the given limit.
func gpus(resource string, pct int, limitsMiB ...uint64) Daemon {
	d := Daemon{Resource: resource, ActiveThreadPercentage: pct}
	for i, l := range limitsMiB {
		d.Devices = append(d.Devices, Device{UUID: "GPU-" + strconv.Itoa(i) + "-fake", Index: i, PinnedMemoryLimitMiB: l})
	}
	return d
}
