package liveness

import (
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestLivenessHeartbeats(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	l := New(clk, time.Minute)
	if got := l.HeartbeatInterval(); got != 5*time.Second {
		t.Errorf("heartbeat interval %v with a 1m timeout, want 5s (the cap)", got)
	}
	if err := l.Check(); err != nil {
		t.Fatalf("before any heartbeat: %v", err)
	}
	l.Beat("agent loop")
	clk.Step(time.Minute)
	if err := l.Check(); err != nil {
		t.Errorf("a heartbeat exactly one timeout ago: %v, want live", err)
	}
	clk.Step(time.Millisecond)
	err := l.Check()
	if err == nil || !strings.Contains(err.Error(), "agent loop") || !strings.Contains(err.Error(), "no progress for 1m0.001s") {
		t.Errorf("a heartbeat older than the timeout: %v, want an error naming the agent loop and the age", err)
	}
	if age := l.HeartbeatAge("agent loop"); age != time.Minute+time.Millisecond {
		t.Errorf("heartbeat age %v, want 1m0.001s", age)
	}
	l.Beat("agent loop")
	if err := l.Check(); err != nil {
		t.Errorf("after a new heartbeat: %v", err)
	}

	l.Stop("health watcher", "stopped: NVML event set: Unknown Error")
	err = l.Check()
	if err == nil || !strings.Contains(err.Error(), "health watcher: stopped: NVML event set") {
		t.Errorf("a stopped health watcher: %v, want an error naming it and why", err)
	}
	l.Running("health watcher")
	if err := l.Check(); err != nil {
		t.Errorf("after the health watcher restarted: %v", err)
	}
	if got := New(clk, 2*time.Second).HeartbeatInterval(); got != 500*time.Millisecond {
		t.Errorf("heartbeat interval %v with a 2s timeout, want 500ms", got)
	}
}
