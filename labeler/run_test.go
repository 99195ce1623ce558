package labeler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
)

// fakePublisher records every Publish and fails while failures remain.
type fakePublisher struct {
	calls chan Content

	mu       sync.Mutex
	failures int
	err      error
}

func newFakePublisher(failures int, err error) *fakePublisher {
	return &fakePublisher{calls: make(chan Content, 100), failures: failures, err: err}
}

func (f *fakePublisher) Publish(_ context.Context, c Content) error {
	f.calls <- c
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failures > 0 {
		f.failures--
		return f.err
	}
	return nil
}

// loopHarness runs a Loop on a fake clock.
type loopHarness struct {
	t        *testing.T
	clk      *testingclock.FakeClock
	contents chan Content
	cancel   context.CancelFunc
	done     chan error
	results  chan error
}

func startLoop(t *testing.T, pub Publisher, resync time.Duration, backoff wait.Backoff) *loopHarness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &loopHarness{
		t:        t,
		clk:      testingclock.NewFakeClock(time.Unix(0, 0)),
		contents: make(chan Content, 1),
		cancel:   cancel,
		done:     make(chan error, 1),
		results:  make(chan error, 100),
	}
	loop := &Loop{
		Publisher: pub,
		Resync:    resync,
		Backoff:   backoff,
		Clock:     h.clk,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnPublish: func(err error) { h.results <- err },
	}
	go func() { h.done <- loop.Run(ctx, h.contents) }()
	t.Cleanup(h.stop)
	return h
}

func (h *loopHarness) stop() {
	h.cancel()
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("Run returned %v after cancel, want nil", err)
		}
	case <-time.After(10 * time.Second):
		h.t.Error("Run did not return after cancel")
	}
}

// result waits for the next attempt's result.
func (h *loopHarness) result() error {
	h.t.Helper()
	select {
	case err := <-h.results:
		return err
	case <-time.After(10 * time.Second):
		h.t.Fatal("no publish attempt")
		return nil
	}
}

// noResult checks that no attempt happened. Attempts only start on a
// content or a fake-clock timer, so after the loop is parked on its timer
// nothing can arrive without a Step.
func (h *loopHarness) noResult() {
	h.t.Helper()
	select {
	case err := <-h.results:
		h.t.Fatalf("unexpected publish attempt (err %v)", err)
	default:
	}
}

// step advances the fake clock once the loop has armed its timer.
func (h *loopHarness) step(d time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !h.clk.HasWaiters() {
		if time.Now().After(deadline) {
			h.t.Fatal("loop armed no timer")
		}
		time.Sleep(time.Millisecond)
	}
	h.clk.Step(d)
}

func TestLoopBackoffThenResync(t *testing.T) {
	unavailable := errors.New("connection refused")
	pub := newFakePublisher(4, unavailable)
	h := startLoop(t, pub, 10*time.Minute, wait.Backoff{Duration: time.Second, Factor: 2, Steps: 1 << 30, Cap: 4 * time.Second})

	Offer(h.contents, Content{Labels: map[string]string{"a": "1"}})
	// Attempts fail 4 times; delays 1s, 2s, 4s, 4s (capped).
	for i, delay := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		if err := h.result(); !errors.Is(err, unavailable) {
			t.Fatalf("attempt %d: %v, want the injected failure", i+1, err)
		}
		h.step(delay - time.Millisecond)
		h.noResult()
		h.step(time.Millisecond)
	}
	if err := h.result(); err != nil {
		t.Fatalf("attempt 5: %v, want success", err)
	}
	// After the success: the next attempt is the resync, not a retry.
	h.step(10*time.Minute - time.Millisecond)
	h.noResult()
	h.step(time.Millisecond)
	if err := h.result(); err != nil {
		t.Fatalf("resync: %v", err)
	}
	if got := len(pub.calls); got != 6 {
		t.Errorf("%d publishes, want 6", got)
	}
}

// TestLoopSlowRetryForCRDMissing: a missing NFD API is retried at the cap,
// not with the short initial delay.
func TestLoopSlowRetryForCRDMissing(t *testing.T) {
	pub := newFakePublisher(1, fmt.Errorf("publish: %w", ErrCRDMissing))
	h := startLoop(t, pub, 0, wait.Backoff{Duration: time.Second, Factor: 2, Steps: 1 << 30, Cap: time.Minute})
	Offer(h.contents, Content{})
	if err := h.result(); !errors.Is(err, ErrCRDMissing) {
		t.Fatalf("first attempt: %v", err)
	}
	h.step(time.Minute - time.Millisecond)
	h.noResult()
	h.step(time.Millisecond)
	if err := h.result(); err != nil {
		t.Fatalf("retry: %v", err)
	}
}

// TestLoopNewContentDuringBackoff: new content is published at once, even
// while a retry is pending.
func TestLoopNewContentDuringBackoff(t *testing.T) {
	pub := newFakePublisher(1, errors.New("boom"))
	h := startLoop(t, pub, 0, wait.Backoff{Duration: time.Hour, Factor: 2, Steps: 1 << 30, Cap: time.Hour})
	Offer(h.contents, Content{Labels: map[string]string{"v": "1"}})
	if err := h.result(); err == nil {
		t.Fatal("first attempt succeeded, want the injected failure")
	}
	Offer(h.contents, Content{Labels: map[string]string{"v": "2"}})
	if err := h.result(); err != nil {
		t.Fatalf("second attempt: %v", err)
	}
	<-pub.calls
	if got := (<-pub.calls).Labels["v"]; got != "2" {
		t.Errorf("second publish had v=%q, want 2", got)
	}
}

// TestLoopClosedChannelKeepsResyncing: closing contents stops updates, not
// the loop.
func TestLoopClosedChannelKeepsResyncing(t *testing.T) {
	pub := newFakePublisher(0, nil)
	h := startLoop(t, pub, time.Minute, wait.Backoff{})
	h.contents <- Content{Labels: map[string]string{"v": "1"}}
	close(h.contents)
	if err := h.result(); err != nil {
		t.Fatal(err)
	}
	h.step(time.Minute)
	if err := h.result(); err != nil {
		t.Fatal(err)
	}
}

// TestLoopNodeFeatureBackoff drives the NodeFeature publisher through an
// API server that is unavailable for three attempts: the loop retries with
// backoff and creates the object on the fourth.
func TestLoopNodeFeatureBackoff(t *testing.T) {
	nf := newNFHarness(t)
	failures := 3
	nf.nfd.PrependReactor("get", "nodefeatures", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures > 0 {
			failures--
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		}
		return false, nil, nil
	})
	h := startLoop(t, nf.pub, time.Hour, wait.Backoff{Duration: time.Second, Factor: 2, Steps: 1 << 30, Cap: time.Minute})
	Offer(h.contents, testContent())
	for i, delay := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if err := h.result(); !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("attempt %d: %v, want ServiceUnavailable", i+1, err)
		}
		h.step(delay)
	}
	if err := h.result(); err != nil {
		t.Fatalf("attempt 4: %v", err)
	}
	if s := nf.pub.Stats(); s.Creates != 1 {
		t.Errorf("stats %+v, want the object created once", s)
	}
	// Resyncs of unchanged content write nothing.
	for range 3 {
		h.step(time.Hour)
		if err := h.result(); err != nil {
			t.Fatal(err)
		}
	}
	if s := nf.pub.Stats(); s.Writes() != 1 || s.Unchanged != 3 {
		t.Errorf("stats %+v after 3 resyncs, want 1 write and 3 unchanged", s)
	}
}

func TestRunStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	l := &Loop{Publisher: newFakePublisher(0, nil), Resync: time.Minute}
	go func() { done <- l.Run(ctx, make(chan Content)) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop with its context")
	}
}

func TestOfferKeepsLatest(t *testing.T) {
	ch := make(chan Content, 1)
	for i := range 5 {
		Offer(ch, Content{Labels: map[string]string{"v": fmt.Sprint(i)}})
	}
	if got := (<-ch).Labels["v"]; got != "4" {
		t.Errorf("Offer kept v=%s, want the latest (4)", got)
	}
	select {
	case c := <-ch:
		t.Errorf("channel still holds %v", c)
	default:
	}
}

// levelCounter counts log records by level and keeps their messages.
type levelCounter struct {
	mu       sync.Mutex
	counts   map[slog.Level]int
	messages []string
}

func (c *levelCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *levelCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[r.Level]++
	if r.Level >= slog.LevelInfo {
		c.messages = append(c.messages, r.Message)
	}
	return nil
}
func (c *levelCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *levelCounter) WithGroup(string) slog.Handler      { return c }

func (c *levelCounter) get() (map[slog.Level]int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[slog.Level]int{}
	for k, v := range c.counts {
		out[k] = v
	}
	return out, append([]string(nil), c.messages...)
}

// TestLoopAggregatesFailureLogs: a publisher failing every second for a
// minute logs its first failure and one summary per interval, not one line
// per attempt; every attempt still reaches OnPublish.
func TestLoopAggregatesFailureLogs(t *testing.T) {
	const failing = 60
	pub := newFakePublisher(failing, errors.New("connection refused"))
	logs := &levelCounter{counts: map[slog.Level]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	results := make(chan error, 100)
	loop := &Loop{
		Publisher:          pub,
		Backoff:            wait.Backoff{Duration: time.Second, Factor: 2, Steps: 1 << 30, Cap: time.Second},
		FailureLogInterval: 20 * time.Second,
		Clock:              clk,
		Logger:             slog.New(logs),
		OnPublish:          func(err error) { results <- err },
	}
	contents := make(chan Content, 1)
	Offer(contents, Content{})
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx, contents) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("loop: %v", err)
		}
	}()
	h := &loopHarness{t: t, clk: clk, results: results}

	for i := 1; i <= failing; i++ {
		if err := h.result(); err == nil {
			t.Fatalf("attempt %d succeeded, want the injected failure", i)
		}
		h.step(time.Second)
	}
	if err := h.result(); err != nil {
		t.Fatalf("attempt %d: %v, want success", failing+1, err)
	}
	counts, messages := logs.get()
	// Failures at t=0..59s: the first at 0s, summaries at 20s and 40s.
	if counts[slog.LevelWarn] != 3 {
		t.Errorf("%d warnings for %d failures in %d s, want 3 (the first, then one per 20 s): %q",
			counts[slog.LevelWarn], failing, failing, messages)
	}
	if counts[slog.LevelDebug] != failing-3 {
		t.Errorf("%d debug lines, want %d (every failure not logged at warn)", counts[slog.LevelDebug], failing-3)
	}
	if want := "published after failures"; len(messages) == 0 || messages[len(messages)-1] != want {
		t.Errorf("last message %q, want %q", messages, want)
	}
}

// resyncPublisher is a fakePublisher that also implements Resyncer.
type resyncPublisher struct {
	*fakePublisher
	resyncs chan Content
}

func (r *resyncPublisher) Resync(_ context.Context, c Content) error {
	r.resyncs <- c
	return nil
}

// TestLoopResyncCallsResync: a publisher that is a Resyncer gets Resync,
// not Publish, at each resync, and the resync period is jittered: never
// early, at the latest Resync*(1+ResyncJitter).
func TestLoopResyncCallsResync(t *testing.T) {
	pub := &resyncPublisher{fakePublisher: newFakePublisher(0, nil), resyncs: make(chan Content, 10)}
	ctx, cancel := context.WithCancel(context.Background())
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	results := make(chan error, 10)
	loop := &Loop{
		Publisher: pub, Resync: time.Minute, ResyncJitter: 0.5, Clock: clk,
		Logger:    slog.New(slog.DiscardHandler),
		OnPublish: func(err error) { results <- err },
	}
	contents := make(chan Content, 1)
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx, contents) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("loop: %v", err)
		}
	}()
	h := &loopHarness{t: t, clk: clk, results: results}

	Offer(contents, Content{Labels: map[string]string{"v": "1"}})
	if err := h.result(); err != nil {
		t.Fatal(err)
	}
	if len(pub.calls) != 1 {
		t.Fatalf("%d Publish calls for new content, want 1", len(pub.calls))
	}
	h.step(time.Minute - time.Millisecond)
	h.noResult()
	h.step(30*time.Second + time.Millisecond)
	if err := h.result(); err != nil {
		t.Fatal(err)
	}
	if len(pub.resyncs) != 1 || len(pub.calls) != 1 {
		t.Errorf("after a resync: %d Resync and %d Publish calls, want 1 and 1", len(pub.resyncs), len(pub.calls))
	}
}

// TestLoopTimestampWritesEveryResync: with Timestamp (run
// --timestamp-label) every attempt, resyncs included, publishes the
// content with nvidia.com/gfd.timestamp set to the clock's time, so a
// NodeFeature publisher writes each time; the content handed in is not
// changed.
func TestLoopTimestampWritesEveryResync(t *testing.T) {
	pub := &resyncPublisher{fakePublisher: newFakePublisher(0, nil), resyncs: make(chan Content, 10)}
	ctx, cancel := context.WithCancel(context.Background())
	clk := testingclock.NewFakeClock(time.Unix(1700000000, 0))
	results := make(chan error, 10)
	loop := &Loop{
		Publisher: pub, Resync: time.Minute, Clock: clk, Timestamp: true,
		Logger:    slog.New(slog.DiscardHandler),
		OnPublish: func(err error) { results <- err },
	}
	contents := make(chan Content, 1)
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx, contents) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("loop: %v", err)
		}
	}()
	h := &loopHarness{t: t, clk: clk, results: results}

	in := Content{Labels: map[string]string{"v": "1"}}
	Offer(contents, in)
	if err := h.result(); err != nil {
		t.Fatal(err)
	}
	h.step(time.Minute)
	if err := h.result(); err != nil {
		t.Fatal(err)
	}
	if len(pub.resyncs) != 0 || len(pub.calls) != 2 {
		t.Fatalf("%d Resync and %d Publish calls, want 0 and 2 (a timestamp is new content)", len(pub.resyncs), len(pub.calls))
	}
	for _, want := range []string{"1700000000", "1700000060"} {
		c := <-pub.calls
		if got := c.Labels[LabelTimestamp]; got != want || c.Labels["v"] != "1" {
			t.Errorf("published %v, want %s=%s and v=1", c.Labels, LabelTimestamp, want)
		}
	}
	if _, ok := in.Labels[LabelTimestamp]; ok {
		t.Error("the Loop changed the content it was given")
	}
}
