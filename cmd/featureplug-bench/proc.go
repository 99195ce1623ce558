package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat; Linux fixes it
// at 100 for user space whatever the kernel's tick rate.
const userHZ = 100

// Memory is a process's resident memory as /proc/<pid>/status reports it,
// in KiB.
type Memory struct {
	// RSS is VmRSS: all resident pages.
	RSS int64 `json:"rssKiB"`
	// Anon is RssAnon: heap, stacks and other anonymous memory.
	Anon int64 `json:"rssAnonKiB"`
	// File is RssFile: resident pages of mapped files, mostly the binary.
	File int64 `json:"rssFileKiB"`
	// FilePMD is FilePmdMapped from smaps_rollup: the part of File the
	// kernel maps in 2 MiB pages, resident whether touched or not.
	FilePMD int64 `json:"filePmdMappedKiB"`
	// Cgroup is the process's own memory cgroup: zero without one.
	Cgroup CgroupMemory `json:"cgroup,omitzero"`
}

// readMemory reads the resident memory of pid from procRoot/<pid>/status
// and smaps_rollup (which older kernels lack: FilePMD stays 0 then).
func readMemory(procRoot string, pid int) (Memory, error) {
	var m Memory
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	err := readKiB(filepath.Join(dir, "status"), map[string]*int64{"VmRSS:": &m.RSS, "RssAnon:": &m.Anon, "RssFile:": &m.File}, "VmRSS:")
	if err != nil {
		return m, err
	}
	err = readKiB(filepath.Join(dir, "smaps_rollup"), map[string]*int64{"FilePmdMapped:": &m.FilePMD}, "")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return m, err
	}
	return m, nil
}

// readKiB reads "Name: <n> kB" lines of path into fields; required names
// a field that must be there.
func readKiB(path string, fields map[string]*int64, required string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("reading memory: %w", err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Fields(sc.Text())
		dst, ok := fields[firstOr(parts)]
		if !ok {
			continue
		}
		if len(parts) != 3 || parts[2] != "kB" {
			return fmt.Errorf("%s: field %s: %q is not \"<number> kB\"", path, parts[0], sc.Text())
		}
		v, err := strconv.ParseInt(parts[1], 10, 64)
		if err != nil {
			return fmt.Errorf("%s: field %s: %q is not a number", path, parts[0], parts[1])
		}
		*dst = v
		delete(fields, parts[0])
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if _, missing := fields[required]; missing && required != "" {
		return fmt.Errorf("%s: no %s field", path, strings.TrimSuffix(required, ":"))
	}
	return nil
}

func firstOr(parts []string) string {
	if len(parts) == 0 {
		return ""
	}
	return parts[0]
}

// CPUTime is the CPU a process used, read two ways.
type CPUTime struct {
	// Ticks is utime+stime from /proc/<pid>/stat (10 ms resolution,
	// includes threads that exited).
	Ticks time.Duration
	// Sched is the sum over the process's threads of the on-CPU time in
	// /proc/<pid>/task/*/schedstat (nanosecond resolution).
	Sched time.Duration
}

// readCPU reads the CPU time pid used so far from procRoot.
func readCPU(procRoot string, pid int) (CPUTime, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	var c CPUTime
	statPath := filepath.Join(dir, "stat")
	data, err := os.ReadFile(statPath)
	if err != nil {
		return c, fmt.Errorf("reading CPU time: %w", err)
	}
	if c.Ticks, err = parseStatCPU(string(data)); err != nil {
		return c, fmt.Errorf("%s: %w", statPath, err)
	}
	tasks, err := os.ReadDir(filepath.Join(dir, "task"))
	if err != nil {
		return c, fmt.Errorf("reading CPU time: %w", err)
	}
	for _, t := range tasks {
		path := filepath.Join(dir, "task", t.Name(), "schedstat")
		data, err := os.ReadFile(path)
		if err != nil {
			continue // the thread exited between the listing and the read
		}
		ns, err := strconv.ParseInt(firstOr(strings.Fields(string(data))), 10, 64)
		if err != nil {
			return c, fmt.Errorf("%s: first field %q is not a number", path, strings.TrimSpace(string(data)))
		}
		c.Sched += time.Duration(ns)
	}
	return c, nil
}

// parseStatCPU returns utime+stime of one /proc/<pid>/stat line. The
// command name (field 2) may hold spaces and parentheses, so fields are
// counted from the last ')'.
func parseStatCPU(line string) (time.Duration, error) {
	end := strings.LastIndexByte(line, ')')
	if end < 0 {
		return 0, fmt.Errorf("no ')' after the command name in %q", line)
	}
	// After ')': field 3 (state) is index 0, utime (14) index 11, stime (15) index 12.
	fields := strings.Fields(line[end+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(fields))
	}
	var ticks int64
	for _, i := range []int{11, 12} {
		v, err := strconv.ParseInt(fields[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("field %d: %q is not a number", i+3, fields[i])
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}
