package agent

import (
	"context"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Bounds of the wait before the binary's start-up pages are released
// (Config.ReleaseStartupPages).
const (
	// releaseCheckPeriod is how often the wait asks whether every
	// resource is registered.
	releaseCheckPeriod = 50 * time.Millisecond
	// releaseMaxWait bounds the wait: start-up is over by then whether or
	// not a kubelet took the registrations (none may be running yet).
	releaseMaxWait = 30 * time.Second
)

// BinaryPages is what releasing the binary's start-up pages did: the
// resident bytes of the binary's read-only mappings before and right
// after, and how many mappings it advised.
type BinaryPages struct {
	Mappings      int
	Before, After int64
}

// startAfterStartup waits until every resource is registered (or
// releaseMaxWait has passed), then, when Config.ReleaseStartupPages asks
// for it, releases the binary's start-up pages (logging the outcome), and
// runs Config.AfterStartup last, so that the heap the release used is
// collected with start-up's. Neither runs when the agent stops first.
func (a *Agent) startAfterStartup(ctx context.Context, wg *sync.WaitGroup) {
	if !a.cfg.ReleaseStartupPages && a.cfg.AfterStartup == nil {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if !waitStartupOver(ctx, clock.RealClock{}, a.isReady, releaseCheckPeriod, releaseMaxWait) {
			return
		}
		if a.cfg.ReleaseStartupPages {
			a.releaseBinaryPages()
		}
		if a.cfg.AfterStartup != nil {
			a.cfg.AfterStartup()
		}
	}()
}

// releaseBinaryPages runs ReleaseBinaryPages and logs what it did.
func (a *Agent) releaseBinaryPages() {
	start := time.Now()
	res, err := ReleaseBinaryPages()
	if err != nil {
		a.log.Warn("could not release the binary's start-up pages; it stays as resident as it was", "err", err)
		return
	}
	a.log.Info("released the binary's start-up pages",
		"mappings", res.Mappings, "residentBeforeKiB", res.Before>>10, "residentAfterKiB", res.After>>10,
		"took", time.Since(start).Round(time.Microsecond).String())
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
