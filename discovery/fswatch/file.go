package fswatch

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"k8s.io/utils/clock"
)

// MaxSettleReads bounds ReadStable: a file that is still changing after
// this many reads is reported as unsettled.
const MaxSettleReads = 10

// Snapshot is what a watched file held at one read: its content, or why it
// could not be read (missing, a directory, unreadable).
type Snapshot struct {
	// Data is the content; nil when Err is set.
	Data []byte
	// Err says why the file could not be read.
	Err error
	// Key identifies the state: a content hash, or the kind of error.
	Key string
}

// Same reports whether two snapshots show the same state of the file.
func (s Snapshot) Same(o Snapshot) bool { return s.Key == o.Key }

// ReadSnapshot reads path, following symlinks, up to maxSize+1 bytes (a
// file over maxSize is reported with its first maxSize+1 bytes, so that
// the reader's own size check names it).
func ReadSnapshot(path string, maxSize int64) Snapshot {
	fail := func(kind string, err error) Snapshot {
		return Snapshot{Err: err, Key: "error:" + kind}
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail("missing", fmt.Errorf("%s does not exist", path))
	case err != nil:
		return fail("stat", fmt.Errorf("%s: %w", path, err))
	case fi.IsDir():
		return fail("directory", fmt.Errorf("%s is a directory, not a file", path))
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fail("missing", fmt.Errorf("%s does not exist", path))
	} else if err != nil {
		return fail("open", fmt.Errorf("opening %s: %w", path, err))
	}
	defer func() { _ = f.Close() }() // read-only: a close error loses nothing
	data, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return fail("read", fmt.Errorf("reading %s: %w", path, err))
	}
	sum := sha256.Sum256(data)
	return Snapshot{Data: data, Key: fmt.Sprintf("sha256:%x", sum)}
}

// ReadStable reads path until two reads settle apart agree, and returns
// the last one; ok is false when the file was still changing after
// MaxSettleReads reads or ctx ended.
func ReadStable(ctx context.Context, clk clock.Clock, path string, maxSize int64, settle time.Duration) (snap Snapshot, ok bool) {
	prev := ReadSnapshot(path, maxSize)
	for range MaxSettleReads {
		select {
		case <-ctx.Done():
			return prev, false
		case <-clk.After(settle):
		}
		cur := ReadSnapshot(path, maxSize)
		if cur.Same(prev) {
			return cur, true
		}
		prev = cur
	}
	return prev, false
}

// File watches the file at path and sends its state on the returned
// channel: first at start, then once it has settled after every change
// (even when it settled back to the state sent last: the file changed in
// between, so a reader's picture of it may be stale). The channel holds
// one state; one not yet received is replaced by a newer one. maxSize
// bounds a read (see ReadSnapshot); what names the file in logs; kick,
// when it receives, makes the watcher look at the file at once (SIGHUP);
// fallback, when set, is told whether the file is watched by the periodic
// check alone. The returned function stops the watch.
func (w *Watcher) File(path, what string, maxSize int64, kick <-chan struct{}, fallback func(bool)) (<-chan Snapshot, func()) {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	f := &fileTarget{
		w: w, path: path, what: what, maxSize: maxSize, kick: kick,
		out: make(chan Snapshot, 1), pokes: make(chan struct{}, 1),
	}
	stop := w.add(&target{path: path, what: what, file: f, fallback: fallback})
	return f.out, stop
}

// fileTarget is the goroutine of one File target: it reads the file when
// poked and reports it once settled.
type fileTarget struct {
	w       *Watcher
	path    string
	what    string
	maxSize int64
	kick    <-chan struct{}
	out     chan Snapshot
	pokes   chan struct{}
	cancel  context.CancelFunc
}

// startFile starts f's goroutine under the watcher's context. w.mu is
// held.
func (w *Watcher) startFile(f *fileTarget) {
	ctx, cancel := context.WithCancel(w.ctx)
	f.cancel = cancel
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		f.run(ctx)
	}()
}

// stop ends f's goroutine, if it runs.
func (f *fileTarget) stop() {
	f.w.mu.Lock()
	cancel := f.cancel
	f.w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// poke asks f to read the file again; it never blocks.
func (f *fileTarget) poke() {
	select {
	case f.pokes <- struct{}{}:
	default:
	}
}

// run reads the file at start and whenever poked, and sends each state
// that differs from the last one sent once it has settled.
func (f *fileTarget) run(ctx context.Context) {
	log := f.w.log.With("path", f.path)
	var last *Snapshot
	f.poke()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.kick:
			f.w.wake() // re-arm, then look
		case <-f.pokes:
		}
		cur := ReadSnapshot(f.path, f.maxSize)
		if last != nil && cur.Same(*last) {
			continue
		}
		cur, ok := f.settle(ctx, cur, log)
		if !ok {
			return
		}
		last = &cur
		f.send(cur)
		// The link chain may point elsewhere now: re-arm, and look again
		// at what changed before the new watches were in place.
		f.w.wake()
	}
}

// settle reads the file again every settle window until two reads agree;
// ok is false when ctx ended. Each window's timer exists before the log
// line that announces it (a test's fake clock steps on that line).
func (f *fileTarget) settle(ctx context.Context, cur Snapshot, log *slog.Logger) (Snapshot, bool) {
	msg := f.what + " changed; waiting for it to settle"
	for {
		timer := f.w.opts.Clock.NewTimer(f.w.opts.Settle)
		log.Debug(msg, "bytes", len(cur.Data), "state", cur.Key, "settle", f.w.opts.Settle)
		select {
		case <-ctx.Done():
			timer.Stop()
			return cur, false
		case <-timer.C():
		}
		next := ReadSnapshot(f.path, f.maxSize)
		if next.Same(cur) {
			return next, true
		}
		cur = next
		msg = f.what + " still changing; waiting for it to settle"
	}
}

// send puts s on the channel, replacing a state nobody received yet.
func (f *fileTarget) send(s Snapshot) {
	for {
		select {
		case f.out <- s:
			return
		default:
		}
		select {
		case <-f.out:
		default:
		}
	}
}
