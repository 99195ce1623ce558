package mps

import (
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Default restart backoff: 1 s, doubling up to 1 min.
const (
	DefaultBackoffInitial = time.Second
	DefaultBackoffMax     = time.Minute
)

// Backoff is the wait before restarting a daemon that died or failed to
// start: Initial after the first failure, doubling after each further
// consecutive failure, never more than Max. The delays come from
// k8s.io/apimachinery's wait.Backoff, the one backoff featureplug uses.
type Backoff struct {
	// Initial is the first wait (default DefaultBackoffInitial).
	Initial time.Duration
	// Max caps the wait before jitter (default DefaultBackoffMax).
	Max time.Duration
	// Jitter lengthens each wait by a random fraction of up to Jitter
	// (wait.Jitter); zero means none.
	Jitter float64
}

// Delay returns the wait after the given number of earlier consecutive
// failures (0 for the first failure).
func (b Backoff) Delay(failures int) time.Duration {
	wb := wait.Backoff{Duration: min(b.Initial, b.Max), Factor: 2, Jitter: max(b.Jitter, 0), Steps: math.MaxInt32, Cap: b.Max}
	d := wb.Step()
	for i := 0; i < failures; i++ {
		if wb.Steps == 0 {
			// Capped: every further step is the cap.
			d = wb.Step()
			break
		}
		d = wb.Step()
	}
	return d
}

// withDefaults fills unset fields.
func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultBackoffInitial
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoffMax
	}
	b.Max = max(b.Max, b.Initial)
	return b
}
