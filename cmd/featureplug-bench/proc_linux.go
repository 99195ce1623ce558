package main

import "syscall"

// childAttr makes the agent die with the bench, so an interrupted run
// leaves no agent behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
