package fswatch

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// dirChecks records the calls of a Dir target's check.
type dirChecks struct{ events, periodic chan struct{} }

func newDirChecks() *dirChecks {
	return &dirChecks{events: make(chan struct{}, 100), periodic: make(chan struct{}, 100)}
}

func (c *dirChecks) check(periodic bool) {
	ch := c.events
	if periodic {
		ch = c.periodic
	}
	select {
	case ch <- struct{}{}:
	default:
	}
}

// drain forgets the calls made so far.
func (c *dirChecks) drain() {
	for {
		select {
		case <-c.events:
		case <-c.periodic:
		default:
			return
		}
	}
}

// wait waits for a call of the given kind.
func (c *dirChecks) wait(t *testing.T, what string, periodic bool) {
	t.Helper()
	ch := c.events
	if periodic {
		ch = c.periodic
	}
	select {
	case <-ch:
	case <-time.After(testWait):
		t.Fatalf("%s: no check (periodic %v)", what, periodic)
	}
}

// runWatcher runs w until the test ends.
func runWatcher(t *testing.T, w *Watcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watcher.Run: %v", err)
		}
	})
}

// TestDirSurvivesDeletion: a Dir target is checked on every change in its
// directory, through the directory's deletion and re-creation, by events
// alone (the periodic check is an hour away).
func TestDirSurvivesDeletion(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "kubelet", "device-plugins")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w := New(Options{Interval: time.Hour})
	c := newDirChecks()
	w.Dir(dir, "test directory", c.check, nil)
	runWatcher(t, w)
	c.wait(t, "at start", false)

	for round := range 3 {
		c.drain()
		if err := os.WriteFile(filepath.Join(dir, "kubelet.sock"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		c.wait(t, "an entry created", false)
		c.drain()
		if err := os.RemoveAll(filepath.Join(root, "kubelet")); err != nil {
			t.Fatal(err)
		}
		c.wait(t, "the directory deleted", false)
		c.drain()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		c.wait(t, "the directory re-created", false)
		t.Logf("round %d done", round)
	}
}

// TestOneInstanceForEveryTarget: the watcher takes one inotify instance,
// whatever the number of targets.
func TestOneInstanceForEveryTarget(t *testing.T) {
	var instances atomic.Int32
	w := New(Options{Interval: time.Hour, NewInotify: func() (*fsnotify.Watcher, error) {
		instances.Add(1)
		return fsnotify.NewWatcher()
	}})
	var checks []*dirChecks
	for range 3 {
		c := newDirChecks()
		w.Dir(t.TempDir(), "test directory", c.check, nil)
		checks = append(checks, c)
	}
	out, _ := w.File(filepath.Join(t.TempDir(), "rules.yaml"), "test file", 1<<10, nil, nil)
	runWatcher(t, w)
	for _, c := range checks {
		c.wait(t, "at start", false)
	}
	<-out
	if n := instances.Load(); n != 1 {
		t.Errorf("%d inotify instances for 4 targets, want 1", n)
	}
}

// TestInotifyComesBack: without an inotify instance the targets are served
// by the periodic check, with their fallback on; once an instance can be
// had, the next periodic check takes it, the fallback goes off and events
// are seen again.
func TestInotifyComesBack(t *testing.T) {
	var available atomic.Bool
	w := New(Options{Interval: 20 * time.Millisecond, NewInotify: func() (*fsnotify.Watcher, error) {
		if !available.Load() {
			return nil, errors.New("too many open files")
		}
		return fsnotify.NewWatcher()
	}})
	dir := t.TempDir()
	c := newDirChecks()
	var fallback atomic.Int32
	fallback.Store(-1)
	w.Dir(dir, "test directory", c.check, func(on bool) {
		if on {
			fallback.Store(1)
		} else {
			fallback.Store(0)
		}
	})
	runWatcher(t, w)
	c.wait(t, "without inotify", true)
	if fallback.Load() != 1 {
		t.Fatalf("fallback = %d without inotify, want 1", fallback.Load())
	}
	available.Store(true)
	deadline := time.Now().Add(testWait)
	for fallback.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("fallback still on after inotify became available")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// From now on an event reaches the target before any periodic check
	// would (an hour would be a slow test; the event check is what counts).
	c.drain()
	if err := os.WriteFile(filepath.Join(dir, "kubelet.sock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c.wait(t, "an entry created with inotify back", false)
}

// TestIdentifyTellsReCreatedSocket: a unix socket removed and made again
// at once under the same name has another ID, even when the file system
// gives it the old inode.
func TestIdentifyTellsReCreatedSocket(t *testing.T) {
	path := filepath.Join(shortDir(t), "kubelet.sock")
	var ids []ID
	for range 3 {
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		id, ok := Identify(path)
		if !ok {
			t.Fatal("Identify: no socket")
		}
		ids = append(ids, id)
		_ = ln.Close() // removes the socket
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			t.Errorf("socket %d has the ID of socket %d: %+v", i, i-1, ids[i])
		}
		if ids[i].SameInode(ids[i-1]) {
			t.Logf("socket %d re-used the inode of socket %d; told apart by its change time", i, i-1)
		}
	}
	if _, ok := Identify(path); ok {
		t.Error("Identify found a removed socket")
	}
}

// shortDir is a temporary directory short enough for unix socket paths.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fsw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
