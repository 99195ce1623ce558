// Package fswatch is featureplug's one file watcher: every file and
// directory the agent watches (the rules file, the feature file, the
// kubelet's device-plugin directory, the DRA sockets' directories) is a
// target of one Watcher, which holds one inotify instance and one periodic
// check for all of them.
//
// A target survives what happens to files on a node: editors' atomic
// renames, the kubelet's ConfigMap swaps (..data -> ..<timestamp>), a file
// or directory deleted and re-created (the watch moves to the nearest
// existing ancestor and back when the path returns), symlinks whose
// targets are edited in place (every directory on the link chain is
// watched). The periodic check calls every target as if an event had
// come, so that what events miss is found within one interval; without
// an inotify instance (fs.inotify.max_user_instances exhausted) it is the
// only mechanism, and each periodic check tries to get an instance again.
//
// Two kinds of target: File reports a file's settled content (two reads a
// settle apart agree), so that a half-written file is never reported; Dir
// calls its check function, which looks at what it cares about in the
// directory (Identify tells a file re-created under the same name by its
// inode and change time).
//
// fsnotify sends some errors while it holds the lock its Add and Remove
// take; the watcher reads them through a relay, so that re-arming never
// waits on fsnotify while fsnotify waits on it.
package fswatch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/utils/clock"
)

// Defaults of Options.
const (
	// DefaultInterval is the period of the check behind the inotify
	// watches: a few stat calls per directory target, a stat and a content
	// hash per file target.
	DefaultInterval = 3 * time.Second
	// DefaultSettle is how long a changed file must stay unchanged before
	// it is reported.
	DefaultSettle = 200 * time.Millisecond
)

// maxArmTries bounds one re-arm while the directories toward the targets
// are being created or deleted under it.
const maxArmTries = 64

// Options configure a Watcher. The zero value is usable.
type Options struct {
	// Interval is the period of the periodic check (default
	// DefaultInterval).
	Interval time.Duration
	// Settle is how long a changed file must stay unchanged before a File
	// target reports it (default DefaultSettle).
	Settle time.Duration
	// NewInotify makes the inotify instance (default fsnotify.NewWatcher);
	// tests make it fail to play an exhausted fs.inotify.max_user_instances.
	NewInotify func() (*fsnotify.Watcher, error)
	// Clock drives the periodic check and the settle windows (default the
	// real clock).
	Clock clock.WithTicker
	// Logger receives the watcher's diagnostics (default discarded).
	Logger *slog.Logger
}

// Watcher watches its targets until Run returns. Create it with New, add
// targets with File and Dir (before or while it runs) and run it with Run.
// Its methods are safe for concurrent use.
type Watcher struct {
	opts Options
	log  *slog.Logger

	// changed wakes Run when targets were added or removed, or a File
	// target asks for its watches to be re-armed.
	changed chan struct{}

	mu      sync.Mutex
	targets []*target
	ctx     context.Context // Run's, once it runs: File targets started later use it
	wg      sync.WaitGroup  // File targets' goroutines

	// Run's goroutine only.
	ino        *fsnotify.Watcher // nil: no inotify instance, the periodic check alone
	inotifyErr error             // why there is no inotify instance
	armed      map[string]dirID  // watched directory -> the directory the watch is on
}

// target is one watched path.
type target struct {
	path string
	what string
	// dir is set for a Dir target: called on every change and check.
	dir func(periodic bool)
	// file is set for a File target.
	file *fileTarget
	// fallback, when set, hears whether the target is watched by the
	// periodic check alone.
	fallback func(bool)

	// Run's goroutine only.
	wanted     map[string]bool // the directories the target depends on now
	inFallback bool
	reported   bool // inFallback has been reported once
}

// New returns a Watcher with no target; nothing is watched until Run.
func New(opts Options) *Watcher {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Settle <= 0 {
		opts.Settle = DefaultSettle
	}
	if opts.NewInotify == nil {
		opts.NewInotify = fsnotify.NewWatcher
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Watcher{opts: opts, log: opts.Logger, changed: make(chan struct{}, 1), armed: map[string]dirID{}}
}

// Interval returns the period of the periodic check.
func (w *Watcher) Interval() time.Duration { return w.opts.Interval }

// Dir watches the directory dir: check is called after any change at, in
// or on the way to dir (periodic false), and at every periodic check
// (periodic true), from the watcher's goroutine, one call at a time; it
// should look at what it cares about (stat a few paths) and return
// promptly. what names the directory in logs; fallback, when set, is told
// whether the directory is watched by the periodic check alone. The
// returned function stops the watch.
func (w *Watcher) Dir(dir, what string, check func(periodic bool), fallback func(bool)) (stop func()) {
	return w.add(&target{path: filepath.Clean(dir), what: what, dir: check, fallback: fallback})
}

// add registers t and returns the function that removes it.
func (w *Watcher) add(t *target) func() {
	w.mu.Lock()
	w.targets = append(w.targets, t)
	if t.file != nil && w.ctx != nil {
		w.startFile(t.file)
	}
	w.mu.Unlock()
	w.wake()
	return func() {
		w.mu.Lock()
		w.targets = slices.DeleteFunc(w.targets, func(x *target) bool { return x == t })
		w.mu.Unlock()
		if t.file != nil {
			t.file.stop()
		}
		w.wake()
	}
}

// wake makes Run look at its targets again.
func (w *Watcher) wake() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// snapshotTargets returns the current targets.
func (w *Watcher) snapshotTargets() []*target {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.targets)
}

// Run watches the targets until ctx ends, and returns nil then; it never
// fails for lack of inotify.
func (w *Watcher) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.ctx != nil {
		w.mu.Unlock()
		return errors.New("file watcher: Run called twice")
	}
	w.ctx = ctx
	for _, t := range w.targets {
		if t.file != nil {
			w.startFile(t.file)
		}
	}
	w.mu.Unlock()
	defer w.wg.Wait()

	var events <-chan fsnotify.Event
	var errs <-chan error
	open := func(first bool) {
		if w.openInotify(first) {
			events, errs = w.ino.Events, relayErrors(w.ino)
		}
	}
	open(true)
	defer func() {
		if w.ino != nil {
			_ = w.ino.Close()
		}
	}()
	tick := w.opts.Clock.NewTicker(w.opts.Interval)
	defer tick.Stop()
	w.checkAll(false)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			w.event(ev)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			w.log.Warn("file watch error; the periodic check goes on", "err", err)
			w.checkAll(false)
		case <-tick.C():
			if w.ino == nil {
				open(false)
			}
			w.checkAll(true)
		case <-w.changed:
			w.checkAll(false)
		}
	}
}

// openInotify tries to make the inotify instance; it reports whether
// there is one now.
func (w *Watcher) openInotify(first bool) bool {
	ino, err := w.opts.NewInotify()
	if err != nil {
		if first {
			w.log.Debug("no inotify instance", "err", err)
		} else {
			w.log.Debug("inotify still unavailable", "err", err)
		}
		w.inotifyErr = err
		return false
	}
	w.ino, w.inotifyErr = ino, nil
	clear(w.armed)
	return true
}

// event handles one inotify event: the watches are re-armed (the event may
// be a directory on the way coming or going), then every target the event
// concerns is checked: one that watched the event's directory before the
// re-arm or watches it after, and one whose watches the re-arm moved. The
// directories watched before count, because by the time an event is read
// its directory may be gone: a tree removed at once moves the watches to an
// ancestor before its first event is handled.
func (w *Watcher) event(ev fsnotify.Event) {
	targets := w.snapshotTargets()
	before := make([]map[string]bool, len(targets))
	for i, t := range targets {
		before[i] = t.wanted
	}
	w.rearm(targets)
	for i, t := range targets {
		if t.concerns(before[i], ev.Name) || t.concerns(t.wanted, ev.Name) || !maps.Equal(before[i], t.wanted) {
			w.log.Debug(t.what+" directory event", "event", ev.String())
			t.check(false)
		}
	}
}

// concerns reports whether an event on name matters to the target when it
// watches the directories in wanted: name is in one of them, is one of
// them, or is on the way to the target's path.
func (t *target) concerns(wanted map[string]bool, name string) bool {
	return wanted[filepath.Dir(name)] || wanted[name] || t.dependsOn(name)
}

// dependsOn reports whether name is on the way to the target's path (a
// directory toward it created or removed while an ancestor is watched).
func (t *target) dependsOn(name string) bool {
	return name == t.path || len(name) < len(t.path) && t.path[len(name)] == filepath.Separator && t.path[:len(name)] == name
}

// checkAll re-arms the watches and checks every target.
func (w *Watcher) checkAll(periodic bool) {
	targets := w.snapshotTargets()
	w.rearm(targets)
	for _, t := range targets {
		t.check(periodic)
	}
}

// check calls a Dir target's check or wakes a File target.
func (t *target) check(periodic bool) {
	if t.dir != nil {
		t.dir(periodic)
		return
	}
	t.file.poke()
}

// rearm moves the watches onto the directories the targets depend on now,
// and reports each target's fallback state when it changed.
func (w *Watcher) rearm(targets []*target) {
	failed := map[string]error{}
	if w.ino != nil {
		failed = w.armDirs(targets)
	} else {
		for _, t := range targets {
			t.wanted = t.dirs()
		}
	}
	for _, t := range targets {
		var err error
		if w.ino == nil {
			err = w.inotifyErr
		}
		for d := range t.wanted {
			if e, ok := failed[d]; ok && err == nil {
				err = e
			}
		}
		t.setFallback(w, err, w.ino == nil)
	}
}

// armDirs adds and removes watches until they are on exactly the
// directories the targets want (chosen again while the directories change
// under it, so that the watches end on the nearest existing ancestors). It
// returns the directories that could not be watched, with why.
func (w *Watcher) armDirs(targets []*target) map[string]error {
	failed := map[string]error{}
	for range maxArmTries {
		want := map[string]bool{}
		for _, t := range targets {
			t.wanted = t.dirs()
			for d := range t.wanted {
				want[d] = true
			}
		}
		for d := range w.armed {
			if !want[d] {
				_ = w.ino.Remove(d) // gone already when the directory was deleted
				delete(w.armed, d)
			}
		}
		again := false
		clear(failed)
		for d := range want {
			again = w.armDir(d, failed) || again
		}
		if !again && w.stillWanted(targets, want) {
			return failed
		}
	}
	w.log.Debug("the watched directories keep changing; the next event or check re-arms")
	return failed
}

// armDir watches directory d unless the watch is on it already; it
// reports whether d vanished meanwhile (the choice must be made again).
func (w *Watcher) armDir(d string, failed map[string]error) (again bool) {
	id, ok := statDirID(d)
	if !ok {
		return true
	}
	if prev, ok := w.armed[d]; ok && prev == id {
		return false
	}
	_ = w.ino.Remove(d) // the watch on an earlier directory of that name, if any
	delete(w.armed, d)
	if err := w.ino.Add(d); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return true
		}
		// Out of inotify watches (fs.inotify.max_user_watches): the
		// periodic check serves the targets there, and re-arms.
		failed[d] = fmt.Errorf("watching %s: %w", d, err)
		return false
	}
	w.armed[d] = id
	return false
}

// stillWanted reports whether the targets still want exactly the
// directories armed: a directory on the way may have appeared before its
// parent's watch was in place, with no event for it.
func (w *Watcher) stillWanted(targets []*target, want map[string]bool) bool {
	now := map[string]bool{}
	for _, t := range targets {
		for d := range t.dirs() {
			now[d] = true
		}
	}
	if len(now) != len(want) {
		return false
	}
	for d := range now {
		if !want[d] {
			return false
		}
	}
	return true
}

// dirs returns the directories the target depends on now.
func (t *target) dirs() map[string]bool {
	if t.file != nil {
		return watchDirs(t.path)
	}
	return map[string]bool{nearestExistingDir(t.path): true}
}

// setFallback records whether the target is served by the periodic check
// alone (err says why: no inotify instance, or no watch on one of its
// directories), and says so when that changed.
func (t *target) setFallback(w *Watcher, err error, noInstance bool) {
	on := err != nil
	if t.reported && on == t.inFallback {
		return
	}
	was := t.reported && t.inFallback
	t.inFallback, t.reported = on, true
	switch {
	case on && noInstance:
		w.log.Warn("no inotify instance to watch the "+t.what+"; checking it periodically instead",
			"path", t.path, "interval", w.opts.Interval, "err", err)
	case on:
		w.log.Warn("cannot watch the "+t.what+"; checking it periodically instead",
			"path", t.path, "interval", w.opts.Interval, "err", err)
	case was:
		w.log.Info("inotify available again; watching the "+t.what, "path", t.path)
	}
	if t.fallback != nil {
		t.fallback(on)
	}
}

// errNoInotify is NoInotify's error.
var errNoInotify = errors.New("couldn't initialize inotify: too many open files (inotify disabled)")

// NoInotify is an Options.NewInotify that never gives an instance, as on
// a node whose fs.inotify.max_user_instances is exhausted: the watcher
// runs on its periodic check alone.
func NoInotify() (*fsnotify.Watcher, error) { return nil, errNoInotify }
