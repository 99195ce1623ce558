//go:build !linux

package main

import "syscall"

// childAttr has nothing to add outside Linux (the figures from /proc are
// Linux-only anyway).
func childAttr() *syscall.SysProcAttr { return nil }
