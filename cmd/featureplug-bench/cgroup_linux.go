package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
)

// start starts cmd inside the cgroup, so that everything the process
// allocates from its first instruction is charged there. On cgroup v2 the
// kernel forks it into the cgroup (CLONE_INTO_CGROUP). Cgroup v1 places
// threads, not processes: the thread that forks moves into the cgroup
// for the fork and back after it; the child inherits the cgroup, and the
// bench's memory stays charged to the bench (v1 charges a process's
// memory to the cgroup of its thread-group leader).
func (c *memCgroup) start(cmd *exec.Cmd) error {
	if !c.parent.v1 {
		dir, err := os.Open(c.dir)
		if err != nil {
			return fmt.Errorf("opening the memory cgroup: %w", err)
		}
		defer func() { _ = dir.Close() }()
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(dir.Fd())
		return cmd.Start()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		tid := []byte(strconv.Itoa(syscall.Gettid()))
		if err := os.WriteFile(filepath.Join(c.dir, "tasks"), tid, 0); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("moving the launching thread into the memory cgroup: %w", err)
			return
		}
		err := cmd.Start()
		if backErr := os.WriteFile(filepath.Join(c.parent.self, "tasks"), tid, 0); backErr != nil {
			// The thread stays locked, so the runtime ends it with this
			// goroutine instead of running the bench's code in the cgroup.
			done <- fmt.Errorf("moving the launching thread back out of the memory cgroup: %w", backErr)
			return
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}
