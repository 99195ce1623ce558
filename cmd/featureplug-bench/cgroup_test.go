package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestOwnCgroups(t *testing.T) {
	for _, tc := range []struct {
		name, data, v2, v1 string
	}{
		{"v2 only", "0::/user.slice/session-1.scope\n", "/user.slice/session-1.scope", ""},
		{"hybrid", "4:memory:/process_api/abc\n2:cpuacct:/\n0::/\n", "/", "/process_api/abc"},
		{"v1 memory with others", "5:cpu,memory:/kubepods/pod1\n1:name=systemd:/x\n", "", "/kubepods/pod1"},
		{"none", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v2, v1 := ownCgroups(tc.data)
			if v2 != tc.v2 || v1 != tc.v1 {
				t.Errorf("ownCgroups = %q, %q; want %q, %q", v2, v1, tc.v2, tc.v1)
			}
		})
	}
}

// fakeCgroups writes a /proc/self with the cgroup lines and a mountinfo
// mounting cgroup2 (and, with v1, the v1 memory hierarchy) under a
// temporary directory, and makes the cgroup directories dirs there, each
// with the cgroup.subtree_control given. It returns the proc root and
// the cgroup2 and v1 memory mount points.
func fakeCgroups(t *testing.T, cgroupLines string, v1 bool, dirs map[string]string) (procRoot, v2Mount, v1Mount string) {
	t.Helper()
	root := t.TempDir()
	procRoot = filepath.Join(root, "proc")
	v2Mount, v1Mount = filepath.Join(root, "cgroup"), filepath.Join(root, "memory")
	mountinfo := "25 30 0:22 / /proc rw - proc proc rw\n" +
		"31 25 0:26 / " + v2Mount + " rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
	if v1 {
		mountinfo += "35 31 0:32 / " + v1Mount + " rw,relatime - cgroup cgroup rw,memory\n" +
			"36 31 0:33 / " + root + "/cpu rw,relatime - cgroup cgroup rw,cpu\n"
	}
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(procRoot, "self", "cgroup"), cgroupLines)
	write(filepath.Join(procRoot, "self", "mountinfo"), mountinfo)
	for dir, control := range dirs {
		write(filepath.Join(root, dir, "cgroup.subtree_control"), control)
	}
	return procRoot, v2Mount, v1Mount
}

func TestFindCgroupParent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lines  string
		v1     bool
		dirs   map[string]string // under the temporary root: cgroup.subtree_control
		want   string            // "v2:<dir under the v2 mount>", "v1:<dir under the v1 mount>"
		reason string            // part of the error when there is no parent
	}{
		{"v2, own cgroup delegates memory", "0::/bench\n", false,
			map[string]string{"cgroup/bench": "cpu memory pids\n"}, "v2:/bench", ""},
		{"v2, the parent's children have memory", "0::/user.slice/session-1.scope\n", false,
			map[string]string{"cgroup/user.slice/session-1.scope": "", "cgroup/user.slice": "cpu memory\n"}, "v2:/user.slice", ""},
		{"v2 root", "0::/\n", false, map[string]string{"cgroup": "memory\n"}, "v2:/", ""},
		{"v2 root without memory: not above the mount", "0::/\n", false, map[string]string{"cgroup": "cpu\n"}, "",
			"cgroup v2: the memory controller is not enabled for the children of"},
		{"hybrid: v1 memory", "4:memory:/process_api/abc\n0::/\n", true, map[string]string{"cgroup": ""}, "v1:/process_api/abc", ""},
		{"none", "1:cpu:/\n", false, nil, "", "no cgroup v2 hierarchy; no cgroup v1 memory hierarchy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procRoot, v2Mount, v1Mount := fakeCgroups(t, tc.lines, tc.v1, tc.dirs)
			p, err := findCgroupParent(procRoot)
			if tc.reason != "" {
				if err == nil || !strings.Contains(err.Error(), tc.reason) {
					t.Errorf("findCgroupParent = %+v, %v; want an error with %q", p, err, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := filepath.Join(v2Mount, strings.TrimPrefix(tc.want, "v2:"))
			if strings.HasPrefix(tc.want, "v1:") {
				want = filepath.Join(v1Mount, strings.TrimPrefix(tc.want, "v1:"))
			}
			if p.dir != want || p.v1 != strings.HasPrefix(tc.want, "v1:") || (p.v1 && p.self != want) {
				t.Errorf("findCgroupParent = %+v, want %s (%s)", p, want, tc.want)
			}
		})
	}
}

func TestCgroupRead(t *testing.T) {
	for _, tc := range []struct {
		name        string
		v1          bool
		files       map[string]string
		want        CgroupMemory
		errContains string
	}{
		{"v2", false, map[string]string{
			"memory.current": "41943040\n",
			"memory.stat":    "anon 8388608\nfile 33554432\nkernel 1048576\nactive_anon 8388608\ninactive_file 31457280\nactive_file 2097152\n",
		}, CgroupMemory{Usage: 40960, InactiveFile: 30720, ActiveFile: 2048, Anon: 8192, WorkingSet: 10240}, ""},
		{"v1: hierarchical totals", true, map[string]string{
			"memory.usage_in_bytes": "10485760\n",
			"memory.stat":           "rss 1\ninactive_file 1\nactive_file 1\ntotal_rss 6291456\ntotal_inactive_file 2097152\ntotal_active_file 1048576\n",
		}, CgroupMemory{Usage: 10240, InactiveFile: 2048, ActiveFile: 1024, Anon: 6144, WorkingSet: 8192}, ""},
		{"inactive file over usage: no negative working set", false, map[string]string{
			"memory.current": "1048576\n",
			"memory.stat":    "anon 0\ninactive_file 2097152\nactive_file 0\n",
		}, CgroupMemory{Usage: 1024, InactiveFile: 2048}, ""},
		{"a field missing", false, map[string]string{"memory.current": "1\n", "memory.stat": "anon 0\nactive_file 0\n"}, CgroupMemory{}, "no inactive_file"},
		{"not a number", false, map[string]string{"memory.current": "max\n", "memory.stat": ""}, CgroupMemory{}, `"max" is not a number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c := &memCgroup{parent: &cgroupParent{dir: filepath.Dir(dir), v1: tc.v1}, dir: dir}
			got, err := c.read()
			if tc.errContains != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errContains) || !strings.Contains(err.Error(), dir) {
					t.Errorf("read = %+v, %v; want an error naming the file and %q", got, err, tc.errContains)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("read = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// helperEnv makes the test binary a process that allocates helperMiB of
// memory and sleeps (TestCgroupHelperProcess).
const (
	helperEnv = "FEATUREPLUG_BENCH_CGROUP_HELPER"
	helperMiB = 24
)

func TestCgroupHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		t.Skip("the process TestCgroupStart starts")
	}
	b := make([]byte, helperMiB<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	time.Sleep(10 * time.Second)
	runtime.KeepAlive(b)
}

// TestCgroupStart starts a process in a cgroup of its own on this machine
// (skipped where the bench could not make one) and checks that its
// memory is charged there from the start and that the bench stays where
// it was.
func TestCgroupStart(t *testing.T) {
	p, err := usableCgroupParent("/proc")
	if err != nil {
		t.Skipf("no memory cgroup here: %v", err)
	}
	own := threadCgroups(t)
	c, err := p.newCgroup("featureplug-bench-test-" + filepath.Base(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCgroupHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	if err := c.start(cmd); err != nil {
		_ = c.remove()
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if err := c.remove(); err != nil {
			t.Error(err)
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	var m CgroupMemory
	for time.Now().Before(deadline) {
		if m, err = c.read(); err != nil {
			t.Fatal(err)
		}
		if m.Anon >= helperMiB<<10 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if m.Anon < helperMiB<<10 || m.WorkingSet < m.Anon {
		t.Errorf("cgroup memory %+v: want at least the %d MiB the process allocated, anonymous and in the working set", m, helperMiB)
	}
	procs, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(procs)); len(got) != 1 || got[0] != strconv.Itoa(cmd.Process.Pid) {
		t.Errorf("cgroup.procs = %q, want only the process %d", got, cmd.Process.Pid)
	}
	if now := threadCgroups(t); now != own {
		t.Errorf("the bench's threads' cgroups changed from\n%s\nto\n%s", own, now)
	}
}

// threadCgroups returns the distinct /proc/self/task/*/cgroup contents:
// one unless a thread of the test is in another cgroup.
func threadCgroups(t *testing.T) string {
	t.Helper()
	paths, err := filepath.Glob("/proc/self/task/*/cgroup")
	if err != nil || len(paths) == 0 {
		t.Fatalf("listing the threads' cgroups: %v", err)
	}
	var seen []string
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited
		}
		if !slices.Contains(seen, string(data)) {
			seen = append(seen, string(data))
		}
	}
	slices.Sort(seen)
	return strings.Join(seen, "--\n")
}
