// Package liveness is what an agent's /healthz answers from: heartbeats of
// the components that must keep making progress, and components that
// stopped when they should not have.
package liveness

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// DefaultTimeout is how long a component may go without a heartbeat
// before Check fails.
const DefaultTimeout = 2 * time.Minute

// maxHeartbeatInterval caps the period of the loop's idle heartbeat.
const maxHeartbeatInterval = 5 * time.Second

// Liveness holds heartbeats of the components that must keep making
// progress (the agent loop ticks one even when idle), and components that
// stopped when they should not have (the NVML health watcher). It is safe
// for concurrent use.
type Liveness struct {
	clock   clock.PassiveClock
	timeout time.Duration

	mu      sync.Mutex
	beats   map[string]time.Time
	stopped map[string]string
}

// New returns a Liveness whose components are live while they beat at
// least every timeout (zero: DefaultTimeout), on clk (nil: the real
// clock).
func New(clk clock.PassiveClock, timeout time.Duration) *Liveness {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Liveness{clock: clk, timeout: timeout, beats: map[string]time.Time{}, stopped: map[string]string{}}
}

// HeartbeatInterval is how often a component should beat: well inside the
// timeout, and at least every maxHeartbeatInterval.
func (l *Liveness) HeartbeatInterval() time.Duration {
	return min(l.timeout/4, maxHeartbeatInterval)
}

// Beat records progress of component.
func (l *Liveness) Beat(component string) {
	now := l.clock.Now()
	l.mu.Lock()
	l.beats[component] = now
	l.mu.Unlock()
}

// Stop records that component stopped for reason; /healthz fails until
// Running clears it.
func (l *Liveness) Stop(component, reason string) {
	l.mu.Lock()
	l.stopped[component] = reason
	l.mu.Unlock()
}

// Running clears a stop of component.
func (l *Liveness) Running(component string) {
	l.mu.Lock()
	delete(l.stopped, component)
	l.mu.Unlock()
}

// HeartbeatAge returns how long ago component last beat (0 before its
// first beat).
func (l *Liveness) HeartbeatAge(component string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.beats[component]
	if !ok {
		return 0
	}
	return l.clock.Since(t)
}

// Check returns nil while every component is live, or an error naming each
// one that is not and why.
func (l *Liveness) Check() error {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var problems []string
	for c, t := range l.beats {
		if age := now.Sub(t); age > l.timeout {
			problems = append(problems, fmt.Sprintf("%s: no progress for %s (limit %s)", c, age.Round(time.Millisecond), l.timeout))
		}
	}
	for c, reason := range l.stopped {
		problems = append(problems, fmt.Sprintf("%s: %s", c, reason))
	}
	if len(problems) == 0 {
		return nil
	}
	slices.Sort(problems)
	return fmt.Errorf("%s", strings.Join(problems, "; "))
}
