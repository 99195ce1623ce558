package agent

import (
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestLivenessHeartbeats(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	l := newLiveness(clk, time.Minute)
	if got := l.heartbeatInterval(); got != 5*time.Second {
		t.Errorf("heartbeat interval %v with a 1m timeout, want 5s (the cap)", got)
	}
	if err := l.check(); err != nil {
		t.Fatalf("before any heartbeat: %v", err)
	}
	l.beat(componentLoop)
	clk.Step(time.Minute)
	if err := l.check(); err != nil {
		t.Errorf("a heartbeat exactly one timeout ago: %v, want live", err)
	}
	clk.Step(time.Millisecond)
	err := l.check()
	if err == nil || !strings.Contains(err.Error(), componentLoop) || !strings.Contains(err.Error(), "no progress for 1m0.001s") {
		t.Errorf("a heartbeat older than the timeout: %v, want an error naming the agent loop and the age", err)
	}
	if age := l.heartbeatAge(componentLoop); age != time.Minute+time.Millisecond {
		t.Errorf("heartbeat age %v, want 1m0.001s", age)
	}
	l.beat(componentLoop)
	if err := l.check(); err != nil {
		t.Errorf("after a new heartbeat: %v", err)
	}

	l.stop(componentHealthWatcher, "stopped: NVML event set: Unknown Error")
	err = l.check()
	if err == nil || !strings.Contains(err.Error(), "health watcher: stopped: NVML event set") {
		t.Errorf("a stopped health watcher: %v, want an error naming it and why", err)
	}
	l.running(componentHealthWatcher)
	if err := l.check(); err != nil {
		t.Errorf("after the health watcher restarted: %v", err)
	}
	if got := newLiveness(clk, 2*time.Second).heartbeatInterval(); got != 500*time.Millisecond {
		t.Errorf("heartbeat interval %v with a 2s timeout, want 500ms", got)
	}
}
