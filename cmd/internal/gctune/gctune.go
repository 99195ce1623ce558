// Package gctune sets the Go collector's target for the agent's process:
// high while it starts, so that start-up runs no collection, and lower once
// it serves, where its live heap is small and steady.
package gctune

import (
	"os"
	"runtime/debug"
	"sync"
)

// The collector's target (GOGC) while the agent starts and once it
// serves, unless $GOGC says otherwise (Tune).
const (
	// startupGCPercent raises the heap minimum to 4 MiB x 400 / 100 =
	// 16 MiB, above what start-up allocates (about 6 MiB on the fake DGX
	// H100), so that no collection runs before the first registration.
	startupGCPercent = 400
	// servingGCPercent keeps the heap within half its live size above
	// it: the live heap is about 3 MiB, and the device-plugin calls
	// allocate little, so collecting twice as often as Go's default costs
	// no measurable latency (idle CPU about 0.05% of a core more) and
	// keeps about 1.4 MB less resident.
	servingGCPercent = 50
)

// Tune keeps the garbage collector from running while the agent starts
// (startupGCPercent) and returns the function to run once start-up is
// over (agentconfig.Config.AfterStartup): it sets servingGCPercent, then collects
// once and returns the heap start-up left free to the operating system
// (debug.FreeOSMemory). A collection during start-up cost 2-6 ms of CPU,
// about a tenth of what start-up costs (docs/performance.md). With $GOGC
// set the collector's target is left alone: the operator's choice stands.
func Tune() (afterStartup func()) {
	tune := os.Getenv("GOGC") == ""
	if tune {
		debug.SetGCPercent(startupGCPercent)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if tune {
				debug.SetGCPercent(servingGCPercent)
			}
			debug.FreeOSMemory()
		})
	}
}
