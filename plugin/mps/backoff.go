package mps

import "time"

// Default restart backoff: 1 s, doubling up to 1 min.
const (
	DefaultBackoffInitial = time.Second
	DefaultBackoffMax     = time.Minute
)

// Backoff is the wait before restarting a daemon that died or failed to
// start: Initial after the first failure, doubling after each further
// consecutive failure, never more than Max.
type Backoff struct {
	// Initial is the first wait (default DefaultBackoffInitial).
	Initial time.Duration
	// Max caps the wait (default DefaultBackoffMax).
	Max time.Duration
}

// Delay returns the wait after the given number of earlier consecutive
// failures (0 for the first failure).
func (b Backoff) Delay(failures int) time.Duration {
	d := b.Initial
	for i := 0; i < failures && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
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
