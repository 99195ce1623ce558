package fswatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// testWait bounds every wait of these tests.
const testWait = 20 * time.Second

// configMapVolume lays out dir as the kubelet lays out a ConfigMap volume:
// the file is a symlink through ..data to a timestamped directory, and an
// update swaps ..data atomically.
type configMapVolume struct {
	t   *testing.T
	dir string
	n   int
}

func (v *configMapVolume) publish(content string) {
	v.t.Helper()
	v.n++
	ts := filepath.Join(v.dir, fmt.Sprintf("..2026_11_29_00_00_%02d", v.n))
	if err := os.Mkdir(ts, 0o755); err != nil {
		v.t.Fatal(err)
	}
	if content != "" {
		if err := os.WriteFile(filepath.Join(ts, "rules.yaml"), []byte(content), 0o644); err != nil {
			v.t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	link := filepath.Join(v.dir, "rules.yaml")
	if _, err := os.Lstat(link); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join("..data", "rules.yaml"), link); err != nil {
			v.t.Fatal(err)
		}
	}
}

// fileSpec is a File target of a test watcher.
type fileSpec struct {
	path       string
	interval   time.Duration
	settle     time.Duration
	clock      clock.WithTicker
	newInotify func() (*fsnotify.Watcher, error)
	fallback   func(bool)
	log        *slog.Logger
}

// watchTest runs a Watcher with one File target and short intervals.
type watchTest struct {
	t   *testing.T
	out <-chan Snapshot
}

func startWatch(t *testing.T, fs fileSpec) *watchTest {
	t.Helper()
	if fs.interval == 0 {
		fs.interval = 100 * time.Millisecond
	}
	if fs.settle == 0 {
		fs.settle = 20 * time.Millisecond
	}
	if fs.log == nil {
		fs.log = slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	w := New(Options{Interval: fs.interval, Settle: fs.settle, Clock: fs.clock, NewInotify: fs.newInotify, Logger: fs.log})
	out, _ := w.File(fs.path, "test file", 1<<20, nil, fs.fallback)
	wt := &watchTest{t: t, out: out}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watcher.Run: %v", err)
		}
	})
	return wt
}

// expect waits for a reported state whose content is want ("" waits for a
// file that cannot be read, whose error contains errPart).
func (wt *watchTest) expect(what, want, errPart string) {
	wt.t.Helper()
	timeout := time.After(testWait)
	for {
		select {
		case s := <-wt.out:
			if want == "" && s.Err != nil && strings.Contains(s.Err.Error(), errPart) {
				return
			}
			if want != "" && s.Err == nil && string(s.Data) == want {
				return
			}
			wt.t.Logf("%s: state %q (err %v) is not the one awaited", what, s.Data, s.Err)
		case <-timeout:
			wt.t.Fatalf("%s: no state with content %q / error %q reported", what, want, errPart)
		}
	}
}

// expectNone checks that nothing is reported before marker, a change made
// afterwards, is.
func (wt *watchTest) expectNoneBefore(what string, marker func(), want string) {
	wt.t.Helper()
	marker()
	select {
	case s := <-wt.out:
		if s.Err != nil || string(s.Data) != want {
			wt.t.Errorf("%s: reported %q (err %v) before the marker %q", what, s.Data, s.Err, want)
		}
	case <-time.After(testWait):
		wt.t.Fatalf("%s: the marker change %q was not reported", what, want)
	}
}

func TestFileFollowsConfigMapSwaps(t *testing.T) {
	v := &configMapVolume{t: t, dir: t.TempDir()}
	v.publish("first")
	path := filepath.Join(v.dir, "rules.yaml")
	wt := startWatch(t, fileSpec{path: path, interval: time.Hour})
	wt.expect("the initial state", "first", "")

	v.publish("second")
	wt.expect("a ConfigMap update", "second", "")
	v.publish("second")
	if err := os.WriteFile(filepath.Join(v.dir, "unrelated"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	wt.expectNoneBefore("an update with the same content and another file", func() { v.publish("third") }, "third")

	v.publish("") // a new ..data without the file
	wt.expect("the file missing from a new ..data", "", "does not exist")
	v.publish("back")
	wt.expect("the file back in a later ..data", "back", "")
}

func TestFileSurvivesDirectoryRecreated(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "config", "rules")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Events only: the periodic check must not be what finds the changes.
	wt := startWatch(t, fileSpec{path: path, interval: time.Hour})
	wt.expect("the initial state", "one", "")

	for i, content := range []string{"two", "three"} {
		if err := os.RemoveAll(filepath.Join(root, "config")); err != nil {
			t.Fatal(err)
		}
		wt.expect(fmt.Sprintf("round %d: directory deleted", i), "", "does not exist")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		wt.expect(fmt.Sprintf("round %d: directory re-created", i), content, "")
	}
	// The watch is back on the re-created directory: an in-place edit
	// shows up.
	if err := os.WriteFile(path, []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	wt.expect("an edit in the re-created directory", "edited", "")
}

// TestFileSeesAVolumeRemovedBeforeItsEvents: a ConfigMap volume removed
// while the watcher is busy is gone by the time its first event is read;
// the re-arm that follows moves the watches to an ancestor (and drops the
// events still queued for the old ones), so the event must be matched
// against the directories watched before it: the loss is reported from
// events alone.
func TestFileSeesAVolumeRemovedBeforeItsEvents(t *testing.T) {
	root := t.TempDir()
	v := &configMapVolume{t: t, dir: filepath.Join(root, "vol")}
	if err := os.Mkdir(v.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	v.publish("one")
	busy := filepath.Join(root, "busy")
	if err := os.Mkdir(busy, 0o755); err != nil {
		t.Fatal(err)
	}
	// A Dir target whose check holds the watcher's goroutine when asked.
	var hold atomic.Bool
	entered, release := make(chan struct{}, 1), make(chan struct{})
	w := New(Options{Interval: time.Hour, Settle: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	out, _ := w.File(filepath.Join(v.dir, "rules.yaml"), "test file", 1<<20, nil, nil)
	w.Dir(busy, "busy directory", func(bool) {
		if hold.Load() {
			entered <- struct{}{}
			<-release
		}
	}, nil)
	wt := &watchTest{t: t, out: out}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watcher.Run: %v", err)
		}
	})
	wt.expect("the initial state", "one", "")

	hold.Store(true)
	if err := os.WriteFile(filepath.Join(busy, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(testWait):
		t.Fatal("the busy directory's check was not called")
	}
	hold.Store(false)
	// The resolved file and its directory go first, as RemoveAll may
	// take them; then the rest of the volume.
	ts := filepath.Join(v.dir, "..2026_11_29_00_00_01")
	for _, p := range []string{filepath.Join(ts, "rules.yaml"), ts, filepath.Join(v.dir, "..data"), filepath.Join(v.dir, "rules.yaml"), v.dir} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	wt.expect("the volume removed while the watcher was busy", "", "does not exist")
}

func TestFileFollowsSymlinkTargets(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"etc", "real", "other"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	target := filepath.Join(root, "real", "rules.yaml")
	if err := os.WriteFile(target, []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "etc", "rules.yaml")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	wt := startWatch(t, fileSpec{path: path, interval: time.Hour})
	wt.expect("the initial state", "v1", "")

	// Edited in place, behind the link.
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("v2"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	wt.expect("the target edited in place", "v2", "")

	// The link re-pointed to another directory; edits there are followed.
	other := filepath.Join(root, "other", "rules.yaml")
	if err := os.WriteFile(other, []byte("v3"), 0o644); err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.Symlink(other, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	wt.expect("the link re-pointed", "v3", "")
	if err := os.WriteFile(other, []byte("v4"), 0o644); err != nil {
		t.Fatal(err)
	}
	wt.expect("the new target edited in place", "v4", "")

	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	wt.expect("the target deleted", "", "does not exist")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	wt.expect("the target replaced by a directory", "", "is a directory")
}

func TestFileWithoutInotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	var fallback atomic.Int32
	var attempts atomic.Int32
	wt := startWatch(t, fileSpec{
		path: path, interval: 50 * time.Millisecond,
		newInotify: func() (*fsnotify.Watcher, error) {
			attempts.Add(1)
			return nil, errors.New("too many open files")
		},
		fallback: func(on bool) {
			if on {
				fallback.Store(1)
			} else {
				fallback.Store(0)
			}
		},
	})
	wt.expect("the initial state", "v1", "")
	if fallback.Load() != 1 {
		t.Errorf("fallback not reported while inotify is unavailable")
	}
	if err := os.WriteFile(path, []byte("v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	wt.expect("an edit found without inotify", "v2", "")
	deadline := time.Now().Add(testWait)
	for attempts.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("inotify was tried %d times, want a retry at each periodic check", attempts.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recordHandler sends each log record's message and attributes to a channel.
type recordHandler struct{ records chan string }

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	select {
	case h.records <- b.String():
	default:
	}
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

// waitRecord waits for a log record holding every part.
func waitRecord(t *testing.T, logs recordHandler, parts ...string) {
	t.Helper()
	timeout := time.After(testWait)
	for {
		select {
		case r := <-logs.records:
			all := true
			for _, p := range parts {
				all = all && strings.Contains(r, p)
			}
			if all {
				return
			}
		case <-timeout:
			t.Fatalf("no log record containing %q", parts)
		}
	}
}

// TestFileWatcherWaitsForSlowWriter plays a writer that pauses half-way:
// the half-written file is seen, but only the complete one is reported.
func TestFileWaitsForSlowWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(time.Now())
	logs := recordHandler{records: make(chan string, 100)}
	const interval, settle = time.Second, 100 * time.Millisecond
	wt := startWatch(t, fileSpec{
		path: path, interval: interval, settle: settle, clock: clk,
		newInotify: func() (*fsnotify.Watcher, error) { return nil, errors.New("no inotify in this test") },
		log:        slog.New(logs),
	})
	waitLog := func(want string) {
		t.Helper()
		waitRecord(t, logs, want)
	}
	waitLog("waiting for it to settle bytes=2")
	clk.Step(settle)
	wt.expect("the initial state", "v1", "")

	half, full := "rules:\n- name: a\n", "rules:\n- name: a\n- name: b\n"
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if _, err := f.WriteString(half); err != nil {
		t.Fatal(err)
	}
	clk.Step(interval)
	waitLog(fmt.Sprintf("waiting for it to settle bytes=%d", len(half)))
	if _, err := f.WriteString(full[len(half):]); err != nil {
		t.Fatal(err)
	}
	clk.Step(settle)
	waitLog(fmt.Sprintf("still changing; waiting for it to settle bytes=%d", len(full)))
	select {
	case s := <-wt.out:
		t.Fatalf("reported %q before the file settled", s.Data)
	default:
	}
	clk.Step(settle)
	wt.expect("the complete file", full, "")
}

func TestReadStable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(time.Now())
	type result struct {
		s  Snapshot
		ok bool
	}
	run := func() chan result {
		done := make(chan result, 1)
		go func() {
			s, ok := ReadStable(context.Background(), clk, path, 1<<20, time.Second)
			done <- result{s, ok}
		}()
		return done
	}

	// A file that changes before every read never settles.
	done, steps := run(), 0
	for r := (result{}); ; {
		select {
		case r = <-done:
		default:
			if !clk.HasWaiters() {
				runtime.Gosched()
				continue
			}
			// readStable has read and waits: change the file, then
			// let it read again.
			steps++
			if err := os.WriteFile(path, []byte(strings.Repeat("x", steps+1)), 0o644); err != nil {
				t.Fatal(err)
			}
			clk.Step(time.Second)
			continue
		}
		if r.ok {
			t.Fatalf("readStable settled on %q while the file changed before every read", r.s.Data)
		}
		if steps != MaxSettleReads {
			t.Errorf("readStable gave up after %d reads, want %d", steps, MaxSettleReads)
		}
		break
	}

	// A file that stays put settles after one window.
	done = run()
	for !clk.HasWaiters() {
		runtime.Gosched()
	}
	clk.Step(time.Second)
	if r := <-done; !r.ok || string(r.s.Data) != strings.Repeat("x", steps+1) {
		t.Errorf("readStable of an unchanged file = %q, %v; want its content, true", r.s.Data, r.ok)
	}
}

// testLogWriter sends the watcher's debug log to the test log, shown when a
// test fails.
type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestFileWatcherReportsChangeBackToTheLastState: a file that changes and
// settles back to the state sent last is reported again. The agent writes
// the feature file itself; deleted within the settle window after that
// write, the file settles as "missing", the state sent at start, and the
// agent must hear of it to write the file again (fault 12).
func TestFileReportsChangeBackToTheLastState(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "features")
	logs := recordHandler{records: make(chan string, 1000)}
	wt := startWatch(t, fileSpec{path: path, settle: time.Second, log: slog.New(logs)})
	wt.expect("at start", "", "does not exist")

	if err := os.WriteFile(path, []byte("written by the agent"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The watcher has seen the write and waits for it to settle ...
	waitRecord(t, logs, "changed; waiting for it to settle", "state=sha256:")
	// ... when the file is deleted.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	wt.expect("after the write and the delete", "", "does not exist")
}
