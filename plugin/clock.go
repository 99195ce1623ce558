package plugin

import "time"

// Clock is the time source of health recovery. Tests inject a fake one;
// production uses the system clock.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has elapsed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call from happening; it reports whether it did.
	Stop() bool
}

// systemClock is the Clock backed by package time.
type systemClock struct{}

var _ Clock = systemClock{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
