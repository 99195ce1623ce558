package e2e

// Fault tests of the state directory: full, then freed.

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stateFull mounts a small tmpfs at a fresh directory and fills it, so
// that no state file fits; it returns the directory and the function that
// frees it. The tmpfs is unmounted when the test ends.
func stateFull(t *testing.T) (dir string, free func()) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root, to mount a tmpfs")
	}
	dir = filepath.Join(shortTempDir(t), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "featureplug-e2e-state", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v): %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("unmounting %s: %v: %s", dir, err, out)
		}
	})
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	_ = f.Close()
	return dir, func() {
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFault05HealthWriteRetried: with the state directory full, a GPU
// turning Unhealthy cannot be recorded; once space is freed the record is
// on disk within the retry backoff, without a new event, and a SIGKILL
// after that keeps the GPU Unhealthy in the restarted agent's first list.
func TestFault05HealthWriteRetried(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	state, free := stateFull(t)
	e := pluginFaultStart(t, "", "--state-dir", state, "--health-recovery", "1h")
	e.agent.injectXID(t, 3, 79)
	e.agent.waitMetric(t, "featureplug_plugin_health_state_writes_total", func(v float64) bool { return v >= 1 }, `result="error"`)
	free()
	start := time.Now()
	e.agent.waitMetric(t, "featureplug_plugin_health_state_writes_total", func(v float64) bool { return v >= 1 }, `result="ok"`)
	data, err := os.ReadFile(filepath.Join(state, "health.json"))
	if err != nil || !strings.Contains(string(data), e.gpus[3]) {
		t.Fatalf("health.json after the space was freed: %q, %v; want GPU 3 recorded", data, err)
	}
	t.Logf("the record was on disk %s after the space was freed (retries 1 s, doubling to 30 s)", time.Since(start).Round(time.Millisecond))

	e.killAndCheckFirstList(t, 3)
}
