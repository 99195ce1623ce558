package mpscontrol_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/featureplug/featureplug/discovery/fakenode/mpscontrol"
	"github.com/featureplug/featureplug/plugin/mps"
)

// TestMain makes the test binary the control program when it is invoked
// under that name, as featureplug's main does.
func TestMain(m *testing.M) {
	if mpscontrol.Invoked(os.Args[0]) {
		os.Exit(mpscontrol.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// shortDir is a temporary directory short enough for a unix socket.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mpsc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// install links the control program into a driver root.
func install(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := mpscontrol.Install(shortDir(t), exe)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// control runs the program with the given directories and input.
func control(t *testing.T, bin, pipe, logDir, visible, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), mpscontrol.EnvPipeDirectory+"="+pipe, mpscontrol.EnvLogDirectory+"="+logDir,
		mpscontrol.EnvVisibleDevices+"="+visible)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// daemonPID reads the daemon's pid file.
func daemonPID(t *testing.T, pipe string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(pipe, mpscontrol.PIDFile))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitGone waits until the process pid has exited.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); err != nil {
			return
		}
		// A zombie (exited, not yet reaped by its new parent) is gone too.
		if stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
			if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && f[0] == "Z" {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("daemon %d still runs", pid)
}

func TestSupervisorDrivesTheFakeDaemon(t *testing.T) {
	bin := install(t)
	root := shortDir(t)
	sup, err := mps.New(mps.Options{Root: root, ControlBinary: bin, CheckInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Stop()
	d := mps.Daemon{Resource: "example.com/gpu.mps", ActiveThreadPercentage: 25, Devices: []mps.Device{
		{UUID: "GPU-aaaa", Index: 0, PinnedMemoryLimitMiB: 20000},
		{UUID: "GPU-bbbb", Index: 1, PinnedMemoryLimitMiB: 20000},
	}}
	if err := sup.Apply(context.Background(), []mps.Daemon{d}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for ok, reason := sup.Ready(d.Resource); !ok; ok, reason = sup.Ready(d.Resource) {
		if time.Now().After(deadline) {
			t.Fatalf("daemon not ready: %s", reason)
		}
		time.Sleep(20 * time.Millisecond)
	}
	resDir := filepath.Join(root, "example.com_gpu.mps")
	pipe, logDir := filepath.Join(resDir, "pipe"), filepath.Join(resDir, "log")
	if out, err := control(t, bin, pipe, logDir, "GPU-aaaa,GPU-bbbb", "get_default_active_thread_percentage\nget_default_device_pinned_mem_limit GPU-bbbb\n"); err != nil || out != "25.0\n20000M" {
		t.Errorf("the daemon answers %q, %v; want the settings the supervisor gave (25.0, 20000M)", out, err)
	}
	logData, err := os.ReadFile(filepath.Join(logDir, mpscontrol.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CUDA_VISIBLE_DEVICES=GPU-aaaa,GPU-bbbb", "command: set_default_active_thread_percentage 25",
		"command: set_default_device_pinned_mem_limit GPU-aaaa 20000M"} {
		if !strings.Contains(string(logData), want) {
			t.Errorf("control.log lacks %q:\n%s", want, logData)
		}
	}
	pid := daemonPID(t, pipe)
	sup.Stop()
	waitGone(t, pid)
	if _, err := os.Stat(filepath.Join(pipe, mpscontrol.SocketName)); !os.IsNotExist(err) {
		t.Errorf("the socket is left after quit: %v", err)
	}
}

func TestFakeDaemonRefusesWhatTheRealOneRefuses(t *testing.T) {
	bin := install(t)
	dir := shortDir(t)
	pipe, logDir := filepath.Join(dir, "pipe"), filepath.Join(dir, "log")
	if out, err := control(t, bin, pipe, logDir, "GPU-aaaa", "get_server_list\n"); err == nil || !strings.Contains(out, "Cannot find MPS control daemon process") {
		t.Errorf("without a daemon: %q, %v; want the real program's message and a failure", out, err)
	}
	if out, err := control(t, bin, pipe, logDir, "GPU-aaaa", "", "-d"); err != nil {
		t.Fatalf("-d: %v: %s", err, out)
	}
	pid := daemonPID(t, pipe)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if out, err := control(t, bin, pipe, logDir, "GPU-aaaa", "", "-d"); err == nil || !strings.Contains(out, "already running") {
		t.Errorf("a second -d: %q, %v; want a refusal", out, err)
	}
	for _, c := range []struct{ command, want string }{
		{"set_default_device_pinned_mem_limit GPU-zzzz 1G", "not in CUDA_VISIBLE_DEVICES=GPU-aaaa"},
		{"set_default_device_pinned_mem_limit 1 1G", "ordinal 1 is not below the 1 devices"},
		{"set_default_device_pinned_mem_limit 0 lots", `"lots" is not a memory limit`},
		{"set_default_active_thread_percentage 0", "not a percentage"},
		{"frobnicate", `unknown command "frobnicate"`},
	} {
		if out, err := control(t, bin, pipe, logDir, "GPU-aaaa", c.command+"\n"); err == nil || !strings.Contains(out, c.want) {
			t.Errorf("%s: %q, %v; want an error with %q", c.command, out, err, c.want)
		}
	}
	if out, err := control(t, bin, pipe, logDir, "GPU-aaaa", "set_default_device_pinned_mem_limit 0 512M\n"); err != nil {
		t.Errorf("a limit by ordinal: %q, %v", out, err)
	}
	// Removing the pipe directory (a test's cleanup) stops the daemon.
	if err := os.RemoveAll(pipe); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
}
