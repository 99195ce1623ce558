//go:build !linux

package agent

// ReleaseBinaryPages does nothing outside Linux: the page-cache behaviour
// it works around (memory_linux.go) is Linux's.
func ReleaseBinaryPages() (BinaryPages, error) { return BinaryPages{}, nil }
