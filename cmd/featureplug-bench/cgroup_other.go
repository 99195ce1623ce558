//go:build !linux

package main

import (
	"errors"
	"os/exec"
)

// start cannot place a process in a cgroup outside Linux;
// findCgroupParent finds none there anyway.
func (c *memCgroup) start(*exec.Cmd) error {
	return errors.New("memory cgroups are Linux-only")
}
