package agent

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// DefaultLivenessTimeout is how long the agent loop may go without a
// heartbeat before /healthz fails.
const DefaultLivenessTimeout = 2 * time.Minute

// maxHeartbeatInterval caps the period of the loop's idle heartbeat.
const maxHeartbeatInterval = 5 * time.Second

// Components /healthz reports on.
const (
	componentLoop          = "agent loop"
	componentHealthWatcher = "health watcher"
	componentHealthRelay   = "device health relay"
)

// liveness is what /healthz answers from: heartbeats of the components that
// must keep making progress (the agent loop ticks one even when idle), and
// components that stopped when they should not have (the NVML health
// watcher). It is safe for concurrent use.
type liveness struct {
	clock   clock.PassiveClock
	timeout time.Duration

	mu      sync.Mutex
	beats   map[string]time.Time
	stopped map[string]string
}

func newLiveness(clk clock.PassiveClock, timeout time.Duration) *liveness {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if timeout <= 0 {
		timeout = DefaultLivenessTimeout
	}
	return &liveness{clock: clk, timeout: timeout, beats: map[string]time.Time{}, stopped: map[string]string{}}
}

// heartbeatInterval is how often a component should beat: well inside the
// timeout, and at least every maxHeartbeatInterval.
func (l *liveness) heartbeatInterval() time.Duration {
	return min(l.timeout/4, maxHeartbeatInterval)
}

// beat records progress of component.
func (l *liveness) beat(component string) {
	now := l.clock.Now()
	l.mu.Lock()
	l.beats[component] = now
	l.mu.Unlock()
}

// stop records that component stopped for reason; /healthz fails until
// running clears it.
func (l *liveness) stop(component, reason string) {
	l.mu.Lock()
	l.stopped[component] = reason
	l.mu.Unlock()
}

// running clears a stop of component.
func (l *liveness) running(component string) {
	l.mu.Lock()
	delete(l.stopped, component)
	l.mu.Unlock()
}

// heartbeatAge returns how long ago component last beat (0 before its
// first beat).
func (l *liveness) heartbeatAge(component string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.beats[component]
	if !ok {
		return 0
	}
	return l.clock.Since(t)
}

// check returns nil while every component is live, or an error naming each
// one that is not and why.
func (l *liveness) check() error {
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
