package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The bench runs each measured process in a memory cgroup of its own and
// reads its working set there, as the kubelet reads a container's: the
// cgroup's usage minus its inactive file pages. RSS counts every file
// page mapped, pages the kernel drops at will and pages another cgroup
// was charged for (the binary's page cache, written by whoever installed
// it); the working set is what the kubelet evicts on and `kubectl top`
// shows.

// CgroupMemory is the memory charged to a process's own cgroup, in KiB.
type CgroupMemory struct {
	// Usage is memory.current (cgroup v2) or memory.usage_in_bytes (v1):
	// anonymous memory, page cache the cgroup brought in, and kernel
	// memory (page tables, stacks, sockets).
	Usage int64 `json:"usageKiB"`
	// InactiveFile and ActiveFile are the cgroup's page cache on the
	// inactive and active lists (memory.stat inactive_file, active_file;
	// total_ on v1).
	InactiveFile int64 `json:"inactiveFileKiB"`
	ActiveFile   int64 `json:"activeFileKiB"`
	// Anon is memory.stat anon (v2) or total_rss (v1).
	Anon int64 `json:"anonKiB"`
	// WorkingSet is Usage less InactiveFile, 0 when that is negative:
	// the kubelet's (cAdvisor's) container_memory_working_set_bytes.
	WorkingSet int64 `json:"workingSetKiB"`
}

// cgroupParent is the cgroup under which the bench makes its cgroups: its
// own (cgroup v1; v2 when the memory controller is enabled below it) or,
// on v2, its parent, whose children have the memory controller (a v2
// cgroup with processes, as the bench's own, cannot enable controllers
// for children of its own).
type cgroupParent struct {
	dir string
	v1  bool
	// self is the bench's own v1 memory cgroup, where a thread that
	// started a process in a child goes back.
	self string
}

// String says where the cgroups are, for the report.
func (p *cgroupParent) String() string {
	version := "v2"
	if p.v1 {
		version = "v1"
	}
	return fmt.Sprintf("cgroup %s memory controller, one cgroup per process under %s", version, p.dir)
}

// memCgroup is one cgroup the bench made for one process.
type memCgroup struct {
	parent *cgroupParent
	dir    string
}

// findCgroupParent finds where the bench can make memory cgroups, from
// procRoot/self/cgroup and procRoot/self/mountinfo; the error says why it
// cannot.
func findCgroupParent(procRoot string) (*cgroupParent, error) {
	own, err := os.ReadFile(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil {
		return nil, fmt.Errorf("reading the bench's cgroup: %w", err)
	}
	mounts, err := readCgroupMounts(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return nil, err
	}
	v2Path, v1Path := ownCgroups(string(own))
	var reasons []string
	if m, ok := mounts["cgroup2"]; ok && v2Path != "" {
		dir := m.dir(v2Path)
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if hasController(filepath.Join(d, "cgroup.subtree_control"), "memory") {
				return &cgroupParent{dir: d}, nil
			}
			if d == m.point {
				break
			}
		}
		reasons = append(reasons, fmt.Sprintf("cgroup v2: the memory controller is not enabled for the children of %s or of its parent", dir))
	} else {
		reasons = append(reasons, "no cgroup v2 hierarchy")
	}
	if m, ok := mounts["memory"]; ok && v1Path != "" {
		dir := m.dir(v1Path)
		return &cgroupParent{dir: dir, v1: true, self: dir}, nil
	}
	reasons = append(reasons, "no cgroup v1 memory hierarchy")
	return nil, errors.New(strings.Join(reasons, "; "))
}

// ownCgroups reads the v2 path and the v1 memory path of /proc/self/cgroup
// ("0::/a/b", "4:memory:/a/b" or "3:cpu,memory:/a").
func ownCgroups(data string) (v2, v1Memory string) {
	for line := range strings.Lines(data) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			v1Memory = parts[2]
		}
	}
	return v2, v1Memory
}

// cgroupMount is a mounted cgroup hierarchy.
type cgroupMount struct {
	// root is the cgroup mounted (mountinfo's root field), point where.
	root, point string
}

// dir returns the directory of cgroup path in the mount.
func (m cgroupMount) dir(path string) string {
	rel, ok := strings.CutPrefix(path, m.root)
	if !ok {
		rel = path
	}
	return filepath.Join(m.point, rel)
}

// readCgroupMounts returns the cgroup v2 mount ("cgroup2") and the v1
// memory hierarchy's ("memory") from a mountinfo file.
func readCgroupMounts(path string) (map[string]cgroupMount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the mounts: %w", err)
	}
	defer func() { _ = f.Close() }()
	out := map[string]cgroupMount{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 3 {
			continue
		}
		m := cgroupMount{root: fields[3], point: fields[4]}
		switch {
		case tail[0] == "cgroup2":
			if _, seen := out["cgroup2"]; !seen {
				out["cgroup2"] = m
			}
		case tail[0] == "cgroup" && slices.Contains(strings.Split(tail[2], ","), "memory"):
			out["memory"] = m
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return out, nil
}

// hasController reports whether a cgroup.subtree_control file lists name.
func hasController(path, name string) bool {
	data, err := os.ReadFile(path)
	return err == nil && slices.Contains(strings.Fields(string(data)), name)
}

// newCgroup makes an empty memory cgroup named name under the parent.
func (p *cgroupParent) newCgroup(name string) (*memCgroup, error) {
	dir := filepath.Join(p.dir, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("making a memory cgroup: %w", err)
	}
	return &memCgroup{parent: p, dir: dir}, nil
}

// remove removes the cgroup once its processes have exited (the kernel
// takes a moment to see the last one go).
func (c *memCgroup) remove() error {
	var err error
	for range 50 {
		if err = os.Remove(c.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("removing the memory cgroup: %w", err)
}

// read reads the cgroup's memory.
func (c *memCgroup) read() (CgroupMemory, error) {
	usageFile, prefix, anonKey := "memory.current", "", "anon"
	if c.parent.v1 {
		usageFile, prefix, anonKey = "memory.usage_in_bytes", "total_", "total_rss"
	}
	var m CgroupMemory
	data, err := os.ReadFile(filepath.Join(c.dir, usageFile))
	if err != nil {
		return m, fmt.Errorf("reading the cgroup's memory: %w", err)
	}
	usage, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return m, fmt.Errorf("%s: %q is not a number", filepath.Join(c.dir, usageFile), strings.TrimSpace(string(data)))
	}
	stat := map[string]*int64{prefix + "inactive_file": &m.InactiveFile, prefix + "active_file": &m.ActiveFile, anonKey: &m.Anon}
	if err := readStat(filepath.Join(c.dir, "memory.stat"), stat); err != nil {
		return m, err
	}
	m.Usage = usage >> 10
	m.InactiveFile >>= 10
	m.ActiveFile >>= 10
	m.Anon >>= 10
	m.WorkingSet = max(0, m.Usage-m.InactiveFile)
	return m, nil
}

// readStat reads "name <bytes>" lines of a memory.stat file into fields,
// every one of which must be there.
func readStat(path string, fields map[string]*int64) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("reading the cgroup's memory: %w", err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, _ := strings.Cut(sc.Text(), " ")
		dst, ok := fields[name]
		if !ok {
			continue
		}
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %s: %q is not a number", path, name, value)
		}
		*dst = v
		delete(fields, name)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	for name := range fields {
		return fmt.Errorf("%s: no %s", path, name)
	}
	return nil
}
