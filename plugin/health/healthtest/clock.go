// Package healthtest holds what tests of packages built on plugin/health
// share: a fake clock whose due callbacks run in the test's goroutine.
package healthtest

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// Clock is k8s.io/utils/clock/testing's FakeClock with one change: Advance
// runs the AfterFunc callbacks that came due in the caller's goroutine
// after the clock's lock is released (FakeClock.Step calls them with its
// lock held, so a callback that reads the clock would deadlock), so a test
// sees their effects as soon as Advance returns.
type Clock struct {
	*testingclock.FakeClock

	mu  sync.Mutex
	due []func()
}

var _ clock.WithDelayedExecution = (*Clock)(nil)

// NewClock returns a Clock at a fixed time.
func NewClock() *Clock {
	return &Clock{FakeClock: testingclock.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
}

// AfterFunc queues f to run in Advance once d has passed.
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.FakeClock.AfterFunc(d, func() {
		c.mu.Lock()
		c.due = append(c.due, f)
		c.mu.Unlock()
	})
}

// Advance moves the clock and runs, in the caller's goroutine, the
// functions that came due.
func (c *Clock) Advance(d time.Duration) {
	c.Step(d)
	c.mu.Lock()
	due := c.due
	c.due = nil
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}
