package agent

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// TestWaitStartupOver: the end of start-up waits for every resource to be
// registered, gives up waiting after the bound, and never comes once the
// agent stops.
func TestWaitStartupOver(t *testing.T) {
	const period, maxWait = 50 * time.Millisecond, 30 * time.Second
	// start runs waitStartupOver with a readiness that reports each check
	// on the returned channel and answers isReady. The answer is read
	// before the check is reported, so a test that changes isReady after
	// receiving a check changes the next answer, never this one.
	start := func(ctx context.Context, clk *testingclock.FakeClock, isReady *atomic.Bool) (<-chan struct{}, <-chan bool) {
		checked := make(chan struct{}, 1000)
		done := make(chan bool, 1)
		ready := func() bool { r := isReady.Load(); checked <- struct{}{}; return r }
		go func() { done <- waitStartupOver(ctx, clk, ready, period, maxWait) }()
		return checked, done
	}
	t.Run("ready", func(t *testing.T) {
		clk := testingclock.NewFakeClock(time.Unix(0, 0))
		var isReady atomic.Bool
		checked, done := start(context.Background(), clk, &isReady)
		<-checked // at once
		clk.Step(period)
		<-checked // a period later, not ready yet
		select {
		case <-done:
			t.Fatal("waitStartupOver returned before the resources were registered")
		default:
		}
		isReady.Store(true)
		clk.Step(period)
		<-checked
		if !<-done {
			t.Fatal("waitStartupOver = false once ready, want true")
		}
	})
	t.Run("bound", func(t *testing.T) {
		clk := testingclock.NewFakeClock(time.Unix(0, 0))
		var isReady atomic.Bool
		checked, done := start(context.Background(), clk, &isReady)
		<-checked
		clk.Step(maxWait)
		if !<-done {
			t.Fatal("waitStartupOver = false after the bound, want true")
		}
	})
	t.Run("stopped", func(t *testing.T) {
		clk := testingclock.NewFakeClock(time.Unix(0, 0))
		ctx, cancel := context.WithCancel(context.Background())
		var isReady atomic.Bool
		checked, done := start(ctx, clk, &isReady)
		<-checked
		cancel()
		if <-done {
			t.Fatal("waitStartupOver = true after the agent stopped, want false")
		}
	})
}
