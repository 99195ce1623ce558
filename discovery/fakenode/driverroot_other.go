//go:build !linux

package fakenode

// mknodNull makes no device node outside Linux: the fake root's device
// nodes stay plain files there.
func mknodNull(string) (bool, error) { return false, nil }
