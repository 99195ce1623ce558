package kubeletsim

import (
	"os"
	"testing"
)

// ShortTempDir returns a new directory for the unix sockets of a test (the
// simulated kubelet's, a plugin's, a daemon's), removed when the test ends.
// A unix socket path holds at most 107 bytes, which t.TempDir's paths,
// named after the test, can pass.
func ShortTempDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "fp")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
