package gctune

import (
	"runtime/debug"
	"testing"
)

// gcPercent reads the collector's setting.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// TestTune: no collection target of 100% during start-up, the serving
// target after it (set once), and $GOGC left alone.
func TestTune(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	afterStartup := Tune()
	if got := gcPercent(); got != startupGCPercent {
		t.Errorf("GC percent during start-up = %d, want %d", got, startupGCPercent)
	}
	afterStartup()
	if got := gcPercent(); got != servingGCPercent {
		t.Errorf("GC percent after start-up = %d, want %d", got, servingGCPercent)
	}
	debug.SetGCPercent(70)
	afterStartup() // a second call changes nothing
	if got := gcPercent(); got != 70 {
		t.Errorf("GC percent after a second call = %d, want 70 (untouched)", got)
	}

	t.Setenv("GOGC", "70")
	afterStartup = Tune()
	if got := gcPercent(); got != 70 {
		t.Errorf("GC percent with $GOGC=70 = %d, want 70 (the operator's choice)", got)
	}
	afterStartup()
	if got := gcPercent(); got != 70 {
		t.Errorf("GC percent with $GOGC=70 after start-up = %d, want 70", got)
	}
}
