package labeler

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// Defaults of Loop and Backoff.
const (
	DefaultBackoffInitial = time.Second
	DefaultBackoffMax     = time.Minute
	DefaultBackoffFactor  = 2.0
	DefaultPublishTimeout = 30 * time.Second
	// DefaultFailureLogInterval is how often a Loop that keeps failing
	// logs one summary of its failures.
	DefaultFailureLogInterval = 5 * time.Minute
)

// Backoff computes capped exponential retry delays with
// k8s.io/apimachinery's wait.Backoff. Zero fields take the defaults (1s,
// doubling, capped at 1 minute, no jitter).
type Backoff struct {
	// Initial is the delay after the first failure.
	Initial time.Duration
	// Factor multiplies the delay after each further failure (>= 1).
	Factor float64
	// Max caps the delay (before jitter).
	Max time.Duration
	// Jitter lengthens each delay by a random fraction of up to Jitter
	// (wait.Jitter), so that agents failing together do not retry
	// together; zero means none.
	Jitter float64
}

// waitBackoff returns b as a wait.Backoff with the defaults filled in and
// unlimited steps (the delay grows until it reaches Max).
func (b Backoff) waitBackoff() wait.Backoff {
	initial, factor, maxDelay := b.Initial, b.Factor, b.Max
	if initial <= 0 {
		initial = DefaultBackoffInitial
	}
	if factor < 1 {
		factor = DefaultBackoffFactor
	}
	if maxDelay <= 0 {
		maxDelay = DefaultBackoffMax
	}
	return wait.Backoff{Duration: min(initial, maxDelay), Factor: factor, Jitter: max(b.Jitter, 0), Steps: math.MaxInt32, Cap: maxDelay}
}

// Delay returns the delay before the next attempt after the given number of
// consecutive failures (1 for the first), jittered when Jitter is set.
func (b Backoff) Delay(failures int) time.Duration {
	wb := b.waitBackoff()
	d := wb.Step()
	for i := 1; i < failures; i++ {
		if wb.Steps == 0 {
			// Capped: every further step is the cap.
			d = wb.Step()
			break
		}
		d = wb.Step()
	}
	return d
}

// capped returns the capped delay, used for failures that retrying soon cannot
// fix (NFD's CRDs missing, a NodeFeature that is not ours).
func (b Backoff) capped() time.Duration { return b.Delay(1 << 20) }

// Resyncer is implemented by publishers whose Publish sends nothing for
// content they already wrote; the Loop calls Resync instead of Publish at
// each resync, to check what is published and repair it.
type Resyncer interface {
	Resync(ctx context.Context, c Content) error
}

// Loop publishes the latest Content: at once when new Content arrives, again
// every Resync, and, after a failure, with capped exponential backoff. It
// runs in its own goroutine and never blocks the producer for longer than a
// channel send (see Offer).
type Loop struct {
	// Publisher receives the Content.
	Publisher Publisher
	// Resync republishes the latest Content this often after a success
	// (repairing objects or files changed behind the agent's back); zero or
	// less disables it.
	Resync time.Duration
	// ResyncJitter lengthens each resync period by a random fraction of up
	// to ResyncJitter (wait.Jitter), so that agents started together do
	// not resync together; zero means none.
	ResyncJitter float64
	// Backoff spaces retries after failures.
	Backoff Backoff
	// Timeout bounds each Publish call; zero means DefaultPublishTimeout.
	Timeout time.Duration
	// Clock drives resync and retry timers; nil is the real clock.
	Clock clock.Clock
	// Logger receives failures (warn) and recoveries (info); nil uses
	// slog.Default(). Repeated failures are aggregated: the first is
	// logged, then one summary per FailureLogInterval with a count (the
	// rest go to debug); OnPublish still sees every attempt.
	Logger *slog.Logger
	// FailureLogInterval spaces the summaries of repeated failures; zero
	// means DefaultFailureLogInterval.
	FailureLogInterval time.Duration
	// OnPublish, when set, is called after every attempt with its result,
	// e.g. to feed metrics.
	OnPublish func(err error)
	// Timestamp adds LabelTimestamp (gpu-feature-discovery's
	// nvidia.com/gfd.timestamp) with the clock's Unix time to every
	// attempt. The content then differs each time, so every resync
	// writes: the price of GFD's label, which featureplug otherwise
	// avoids by writing only on change (run --timestamp-label).
	Timestamp bool
}

// stamped returns c with LabelTimestamp set to now (a copy: c is shared).
func stamped(c Content, now time.Time) Content {
	labels := make(map[string]string, len(c.Labels)+1)
	for k, v := range c.Labels {
		labels[k] = v
	}
	labels[LabelTimestamp] = strconv.FormatInt(now.Unix(), 10)
	c.Labels = labels
	return c
}

// Run publishes until ctx ends, then returns nil. Nothing is published
// before the first Content arrives. A closed contents channel means no new
// Content: Run keeps resyncing and retrying the last one until ctx ends.
func (l *Loop) Run(ctx context.Context, contents <-chan Content) error {
	clk := l.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	log := l.Logger
	if log == nil {
		log = slog.Default()
	}
	timeout := l.Timeout
	if timeout <= 0 {
		timeout = DefaultPublishTimeout
	}

	logEvery := l.FailureLogInterval
	if logEvery <= 0 {
		logEvery = DefaultFailureLogInterval
	}

	var (
		latest   Content
		have     bool
		failures int
		timer    clock.Timer
		timerC   <-chan time.Time
		// firstFailure is when the current run of failures began;
		// lastReport is when it was last logged at warn, and
		// unreported counts the failures since.
		firstFailure, lastReport time.Time
		unreported               int
	)
	schedule := func(d time.Duration) {
		if timer != nil {
			timer.Stop()
		}
		timer, timerC = nil, nil
		if d > 0 {
			timer = clk.NewTimer(d)
			timerC = timer.C()
		}
	}
	defer schedule(0)

	resyncer, _ := l.Publisher.(Resyncer)
	publish := func(resync bool) {
		attemptCtx, cancel := context.WithTimeout(ctx, timeout)
		var err error
		switch {
		case l.Timestamp && len(latest.Labels) > 0:
			// A new timestamp is new content: publish (write) it.
			err = l.Publisher.Publish(attemptCtx, stamped(latest, clk.Now()))
		case resync && resyncer != nil:
			err = resyncer.Resync(attemptCtx, latest)
		default:
			err = l.Publisher.Publish(attemptCtx, latest)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if l.OnPublish != nil {
			l.OnPublish(err)
		}
		if err == nil {
			if failures > 0 {
				log.Info("published after failures", "failures", failures,
					"failingFor", clk.Since(firstFailure).Round(time.Millisecond))
			}
			failures, unreported = 0, 0
			if l.Resync > 0 && l.ResyncJitter > 0 {
				schedule(wait.Jitter(l.Resync, l.ResyncJitter))
			} else {
				schedule(l.Resync)
			}
			return
		}
		failures++
		delay := l.Backoff.Delay(failures)
		if errors.Is(err, ErrCRDMissing) || errors.Is(err, ErrNotOurs) {
			delay = l.Backoff.capped()
		}
		now := clk.Now()
		switch {
		case failures == 1:
			firstFailure, lastReport, unreported = now, now, 0
			log.Warn("publish failed; will retry", "error", err, "retryIn", delay)
		case now.Sub(lastReport) >= logEvery:
			log.Warn("publish still failing; will retry", "error", err, "failures", failures,
				"failuresSinceLastReport", unreported+1, "failingFor", now.Sub(firstFailure).Round(time.Millisecond), "retryIn", delay)
			lastReport, unreported = now, 0
		default:
			unreported++
			log.Debug("publish failed again; will retry", "error", err, "failures", failures, "retryIn", delay)
		}
		schedule(delay)
	}

	for {
		select {
		case <-ctx.Done():
			return nil
		case c, ok := <-contents:
			if !ok {
				contents = nil // a nil channel never receives
				continue
			}
			latest, have = c, true
			publish(false)
		case <-timerC:
			// After a success the timer is the resync; after a failure,
			// the retry.
			if have {
				publish(failures == 0)
			}
		}
	}
}
