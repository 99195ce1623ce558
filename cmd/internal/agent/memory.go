package agent

import (
	"context"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Bounds of the wait for the end of start-up (Config.AfterStartup).
const (
	// startupCheckPeriod is how often the wait asks whether every
	// resource is registered.
	startupCheckPeriod = 50 * time.Millisecond
	// startupMaxWait bounds the wait: start-up is over by then whether or
	// not a kubelet took the registrations (none may be running yet).
	startupMaxWait = 30 * time.Second
)

// startAfterStartup runs Config.AfterStartup once every resource is
// registered (or startupMaxWait has passed); not when the agent stops
// first.
func (a *Agent) startAfterStartup(ctx context.Context, wg *sync.WaitGroup) {
	if a.cfg.AfterStartup == nil {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if waitStartupOver(ctx, clock.RealClock{}, a.isReady, startupCheckPeriod, startupMaxWait) {
			a.cfg.AfterStartup()
		}
	}()
}

// The collector's target (GOGC) while the agent starts and once it
// serves, unless $GOGC says otherwise (TuneGC).
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

// TuneGC keeps the garbage collector from running while the agent starts
// (startupGCPercent) and returns the function to run once start-up is
// over (Config.AfterStartup): it sets servingGCPercent, then collects
// once and returns the heap start-up left free to the operating system
// (debug.FreeOSMemory). A collection during start-up cost 2-6 ms of CPU,
// about a tenth of what start-up costs (docs/performance.md). With $GOGC
// set the collector's target is left alone: the operator's choice stands.
func TuneGC() (afterStartup func()) {
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

// waitStartupOver returns true once ready() does, checked every period,
// or once maxWait has passed; false when ctx ends first.
func waitStartupOver(ctx context.Context, clk clock.WithTicker, ready func() bool, period, maxWait time.Duration) bool {
	deadline := clk.NewTimer(maxWait)
	defer deadline.Stop()
	tick := clk.NewTicker(period)
	defer tick.Stop()
	for !ready() {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C():
			return true
		case <-tick.C():
		}
	}
	return true
}
