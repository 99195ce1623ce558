package mps

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
)

// gpuMetric returns the value of the named metric (without its
// "featureplug_mps_" prefix) for the GPU label uuid; ok is false when the
// series does not exist.
func (e *env) gpuMetric(name, uuid string) (value float64, ok bool) {
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
			for _, l := range m.GetLabel() {
				if l.GetName() == "gpu" && l.GetValue() == uuid {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// TestShmDirectory checks the shared memory directory the MPS clients get
// as /dev/shm: created with /dev/shm's mode before the first daemon
// starts, checked against the daemons' /dev/shm, and cleaned when the last
// MPS resource goes (removed when it is not the daemons' /dev/shm, only
// emptied when it is).
func TestShmDirectory(t *testing.T) {
	for _, tt := range []struct {
		name   string
		shared bool
	}{{"separate", false}, {"daemon shm", true}} {
		t.Run(tt.name, func(t *testing.T) {
			var shm string
			e := newEnv(t, func(o *Options) {
				shm = filepath.Join(o.Root, "shm")
				if tt.shared {
					o.DaemonShm = shm // as when the agent's /dev/shm is a bind of it
				} else {
					o.DaemonShm = t.TempDir()
				}
			})
			if _, err := os.Stat(shm); !os.IsNotExist(err) {
				t.Fatalf("shm directory exists before any MPS resource: %v", err)
			}
			e.apply(gpus("example.com/mps", 50, 1024))
			e.waitReady("example.com/mps")
			fi, err := os.Stat(shm)
			if err != nil {
				t.Fatalf("shm directory after the daemon is ready: %v", err)
			}
			if got := fi.Mode(); got != shmMode {
				t.Errorf("shm directory mode = %v, want %v", got, shmMode)
			}
			want := 0.0
			if tt.shared {
				want = 1
			}
			if v, ok := e.metric("shm_shared", ""); !ok || v != want {
				t.Errorf("featureplug_mps_shm_shared = %v (present %v), want %v", v, ok, want)
			}
			if warned := strings.Contains(e.logs.String(), "MPS daemons see another /dev/shm"); warned == tt.shared {
				t.Errorf("warning about the daemons' /dev/shm logged = %v, want %v", warned, !tt.shared)
			}
			// A segment left by the server is cleaned with the resource.
			if err := os.WriteFile(filepath.Join(shm, "cuda.shm.leftover"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			e.apply()
			entries, err := os.ReadDir(shm)
			switch {
			case tt.shared && err != nil:
				t.Errorf("shm directory shared with the daemons was removed: %v", err)
			case tt.shared && len(entries) != 0:
				t.Errorf("shm directory not emptied: %v", entries)
			case !tt.shared && !os.IsNotExist(err):
				t.Errorf("shm directory not removed after the last MPS resource: %v (%v)", err, entries)
			}
		})
	}
}

// fakeModes opens a fake node and returns it with a ComputeModeFunc over
// its NVML, as the agent gives the supervisor.
func fakeModes(t *testing.T) (*fakenode.Node, []string, ComputeModeFunc) {
	t.Helper()
	node, err := fakenode.Open("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	lib := node.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	t.Cleanup(func() { _ = lib.Shutdown() })
	inv, err := discovery.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	var uuids []string
	for _, g := range inv.GPUs {
		uuids = append(uuids, g.UUID)
	}
	return node, uuids, func(uuid string, mode nvml.ComputeMode) (nvml.ComputeMode, error) {
		return discovery.SetComputeMode(lib, uuid, mode)
	}
}

// modeOf returns fake GPU i's compute mode.
func modeOf(t *testing.T, node *fakenode.Node, i int) nvml.ComputeMode {
	t.Helper()
	m, err := node.ComputeMode(i)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestComputeModeExclusive checks that the GPUs of MPS resources are put in
// EXCLUSIVE_PROCESS before their daemon starts, and restored to their
// previous mode when their resource goes away and on Stop; a GPU that was
// already EXCLUSIVE_PROCESS stays so.
func TestComputeModeExclusive(t *testing.T) {
	node, uuids, set := fakeModes(t)
	// GPU 3 was EXCLUSIVE_PROCESS before the agent: it is left so.
	if _, err := set(uuids[3], nvml.COMPUTEMODE_EXCLUSIVE_PROCESS); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *Options) { o.ComputeMode = set })
	a := Daemon{Resource: "example.com/a", Devices: []Device{{UUID: uuids[0], Index: 0}, {UUID: uuids[1], Index: 1}}}
	b := Daemon{Resource: "example.com/b", Devices: []Device{{UUID: uuids[2], Index: 2}, {UUID: uuids[3], Index: 3}}}
	e.apply(a, b)
	// Apply switches the modes before it returns, so before any daemon.
	for i := range 4 {
		if m := modeOf(t, node, i); m != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
			t.Errorf("GPU %d mode = %v while MPS-shared, want EXCLUSIVE_PROCESS", i, m)
		}
		if v, ok := e.gpuMetric("compute_mode_exclusive", uuids[i]); !ok || v != 1 {
			t.Errorf("compute_mode_exclusive{gpu=%s} = %v (present %v), want 1", uuids[i], v, ok)
		}
	}
	if m := modeOf(t, node, 4); m != nvml.COMPUTEMODE_DEFAULT {
		t.Errorf("GPU 4 (not MPS-shared) mode = %v, want DEFAULT", m)
	}
	e.waitReady("example.com/a")
	e.waitReady("example.com/b")

	// a goes away: its GPUs are restored once its daemon has quit.
	e.apply(b)
	for i := range 2 {
		if m := modeOf(t, node, i); m != nvml.COMPUTEMODE_DEFAULT {
			t.Errorf("GPU %d mode = %v after its MPS resource went away, want DEFAULT", i, m)
		}
		if _, ok := e.gpuMetric("compute_mode_exclusive", uuids[i]); ok {
			t.Errorf("compute_mode_exclusive{gpu=%s} still present", uuids[i])
		}
	}
	if m := modeOf(t, node, 2); m != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("GPU 2 mode = %v while still MPS-shared, want EXCLUSIVE_PROCESS", m)
	}

	e.sup.Stop()
	if m := modeOf(t, node, 2); m != nvml.COMPUTEMODE_DEFAULT {
		t.Errorf("GPU 2 mode = %v after Stop, want DEFAULT", m)
	}
	if m := modeOf(t, node, 3); m != nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
		t.Errorf("GPU 3 mode = %v after Stop, want EXCLUSIVE_PROCESS (its mode before the agent)", m)
	}
}

// TestComputeModeDenied checks that a GPU whose mode cannot be changed
// (no privilege) is logged once, shows 0 in the metric, and still gets its
// daemon; a later Apply retries without logging again.
func TestComputeModeDenied(t *testing.T) {
	node, uuids, set := fakeModes(t)
	node.DenyComputeMode(true)
	calls := 0
	e := newEnv(t, func(o *Options) {
		o.ComputeMode = func(uuid string, mode nvml.ComputeMode) (nvml.ComputeMode, error) {
			calls++
			return set(uuid, mode)
		}
	})
	a := Daemon{Resource: "example.com/a", Devices: []Device{{UUID: uuids[0], Index: 0}}}
	e.apply(a)
	e.waitReady("example.com/a")
	if v, ok := e.gpuMetric("compute_mode_exclusive", uuids[0]); !ok || v != 0 {
		t.Errorf("compute_mode_exclusive{gpu=%s} = %v (present %v), want 0", uuids[0], v, ok)
	}
	if m := modeOf(t, node, 0); m != nvml.COMPUTEMODE_DEFAULT {
		t.Errorf("GPU 0 mode = %v, want DEFAULT", m)
	}
	e.apply(a, Daemon{Resource: "example.com/b", Devices: []Device{{UUID: uuids[1], Index: 1}}})
	if calls != 3 {
		t.Errorf("compute mode calls = %d, want 3 (GPU 0 twice, GPU 1 once)", calls)
	}
	logs := e.logs.String()
	if n := countLines(logs, "cannot set EXCLUSIVE_PROCESS compute mode", uuids[0]); n != 1 {
		t.Errorf("warnings for GPU 0 = %d, want 1 (once per GPU)", n)
	}
	if !errors.Is(func() error { _, err := set(uuids[0], nvml.COMPUTEMODE_EXCLUSIVE_PROCESS); return err }(), discovery.ErrComputeModeDenied) {
		t.Error("the fake does not deny the change")
	}
}

// countLines counts the lines of logs that hold every one of parts.
func countLines(logs string, parts ...string) int {
	n := 0
	for _, line := range strings.Split(logs, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}
