package agent

import (
	"context"
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
