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

// Defaults of Loop.
const (
	DefaultPublishTimeout = 30 * time.Second
	// DefaultFailureLogInterval is how often a Loop that keeps failing
	// logs one summary of its failures.
	DefaultFailureLogInterval = 5 * time.Minute
)

// DefaultBackoff spaces a Loop's retries after failures: 1 s, doubling,
// capped at 1 minute, no jitter.
var DefaultBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Steps: math.MaxInt32, Cap: time.Minute}

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
	// Backoff spaces retries after failures (default DefaultBackoff).
	// Failures that retrying soon cannot fix (NFD's CRDs missing, a
	// NodeFeature that is not ours) wait its Cap.
	Backoff wait.Backoff
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
	r := newLoopRun(l)
	defer r.schedule(0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case c, ok := <-contents:
			if !ok {
				contents = nil // a nil channel never receives
				continue
			}
			r.latest, r.have = c, true
			r.publish(ctx, false)
		case <-r.timerC:
			// After a success the timer is the resync; after a failure,
			// the retry.
			if r.have {
				r.publish(ctx, r.failures == 0)
			}
		}
	}
}

// loopRun is the state of one Loop.Run.
type loopRun struct {
	l        *Loop
	clk      clock.Clock
	log      *slog.Logger
	timeout  time.Duration
	logEvery time.Duration
	initial  wait.Backoff
	backoff  wait.Backoff
	resyncer Resyncer

	latest   Content
	have     bool
	failures int
	timer    clock.Timer
	timerC   <-chan time.Time
	// firstFailure is when the current run of failures began; lastReport
	// is when it was last logged at warn, and unreported counts the
	// failures since.
	firstFailure, lastReport time.Time
	unreported               int
}

// newLoopRun fills the defaults of l.
func newLoopRun(l *Loop) *loopRun {
	r := &loopRun{l: l, clk: l.Clock, log: l.Logger, timeout: l.Timeout, logEvery: l.FailureLogInterval, initial: l.Backoff}
	if r.clk == nil {
		r.clk = clock.RealClock{}
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.timeout <= 0 {
		r.timeout = DefaultPublishTimeout
	}
	if r.logEvery <= 0 {
		r.logEvery = DefaultFailureLogInterval
	}
	if r.initial.Duration <= 0 {
		r.initial = DefaultBackoff
	}
	r.backoff = r.initial
	r.resyncer, _ = l.Publisher.(Resyncer)
	return r
}

// schedule arms the timer for d (none for 0).
func (r *loopRun) schedule(d time.Duration) {
	if r.timer != nil {
		r.timer.Stop()
	}
	r.timer, r.timerC = nil, nil
	if d > 0 {
		r.timer = r.clk.NewTimer(d)
		r.timerC = r.timer.C()
	}
}

// publish makes one attempt with the latest content (a resync when
// resync is set) and schedules the next: the resync after a success, a
// retry after a failure.
func (r *loopRun) publish(ctx context.Context, resync bool) {
	attemptCtx, cancel := context.WithTimeout(ctx, r.timeout)
	var err error
	switch {
	case r.l.Timestamp && len(r.latest.Labels) > 0:
		// A new timestamp is new content: publish (write) it.
		err = r.l.Publisher.Publish(attemptCtx, stamped(r.latest, r.clk.Now()))
	case resync && r.resyncer != nil:
		err = r.resyncer.Resync(attemptCtx, r.latest)
	default:
		err = r.l.Publisher.Publish(attemptCtx, r.latest)
	}
	cancel()
	if ctx.Err() != nil {
		return
	}
	if r.l.OnPublish != nil {
		r.l.OnPublish(err)
	}
	if err != nil {
		r.failed(err)
		return
	}
	if r.failures > 0 {
		r.log.Info("published after failures", "failures", r.failures,
			"failingFor", r.clk.Since(r.firstFailure).Round(time.Millisecond))
	}
	r.failures, r.unreported, r.backoff = 0, 0, r.initial
	if r.l.Resync > 0 && r.l.ResyncJitter > 0 {
		r.schedule(wait.Jitter(r.l.Resync, r.l.ResyncJitter))
	} else {
		r.schedule(r.l.Resync)
	}
}

// failed logs a failed attempt (the first of a run at warn, then one
// summary per logEvery) and schedules the retry.
func (r *loopRun) failed(err error) {
	r.failures++
	delay := r.backoff.Step()
	if errors.Is(err, ErrCRDMissing) || errors.Is(err, ErrNotOurs) {
		delay = r.initial.Cap
		if r.initial.Jitter > 0 {
			delay = wait.Jitter(delay, r.initial.Jitter)
		}
	}
	now := r.clk.Now()
	switch {
	case r.failures == 1:
		r.firstFailure, r.lastReport, r.unreported = now, now, 0
		r.log.Warn("publish failed; will retry", "error", err, "retryIn", delay)
	case now.Sub(r.lastReport) >= r.logEvery:
		r.log.Warn("publish still failing; will retry", "error", err, "failures", r.failures,
			"failuresSinceLastReport", r.unreported+1, "failingFor", now.Sub(r.firstFailure).Round(time.Millisecond), "retryIn", delay)
		r.lastReport, r.unreported = now, 0
	default:
		r.unreported++
		r.log.Debug("publish failed again; will retry", "error", err, "failures", r.failures, "retryIn", delay)
	}
	r.schedule(delay)
}
