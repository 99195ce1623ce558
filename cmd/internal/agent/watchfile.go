package agent

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
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/utils/clock"

	"github.com/featureplug/featureplug/discovery/fswatch"
)

// Defaults of the file watcher.
const (
	// DefaultFileCheckInterval is the period of the backstop check of a
	// watched file: a stat and a content hash, no API calls.
	DefaultFileCheckInterval = 5 * time.Second
	// DefaultFileSettle is how long a changed file must stay unchanged
	// before it is reported (two reads this far apart must agree), so that
	// a slow writer's half-written file is never applied.
	DefaultFileSettle = 200 * time.Millisecond
)

// maxSettleReads bounds readStable: a file that is still changing after
// this many reads is reported as unsettled and left to the watcher.
const maxSettleReads = 10

// maxSymlinkHops bounds the symlink chain a watcher follows (the kernel's
// own limit is 40).
const maxSymlinkHops = 40

// fileSnapshot is what a watched file held at one read: its content, or
// why it could not be read (missing, a directory, unreadable).
type fileSnapshot struct {
	// Data is the content; nil when Err is set.
	Data []byte
	// Err says why the file could not be read.
	Err error
	// key identifies the state: a content hash, or the kind of error.
	key string
}

// same reports whether two snapshots show the same state of the file.
func (s fileSnapshot) same(o fileSnapshot) bool { return s.key == o.key }

// readFileSnapshot reads path, following symlinks, up to maxSize+1 bytes
// (a file over maxSize is reported with its first maxSize+1 bytes, so that
// the reader's own size check names it).
func readFileSnapshot(path string, maxSize int64) fileSnapshot {
	fail := func(kind string, err error) fileSnapshot {
		return fileSnapshot{Err: err, key: "error:" + kind}
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
	return fileSnapshot{Data: data, key: fmt.Sprintf("sha256:%x", sum)}
}

// readStable reads path until two reads settle apart agree, and returns the
// last one; ok is false when the file was still changing after
// maxSettleReads reads or ctx ended.
func readStable(ctx context.Context, clk clock.Clock, path string, maxSize int64, settle time.Duration) (snap fileSnapshot, ok bool) {
	prev := readFileSnapshot(path, maxSize)
	for range maxSettleReads {
		select {
		case <-ctx.Done():
			return prev, false
		case <-clk.After(settle):
		}
		cur := readFileSnapshot(path, maxSize)
		if cur.same(prev) {
			return cur, true
		}
		prev = cur
	}
	return prev, false
}

// fileWatcher reports the settled states of one file. It survives what
// happens to a file on a node: editors' atomic renames, the kubelet's
// ConfigMap swaps (..data -> ..<timestamp>), the file or its directory
// deleted and re-created (it then watches the nearest existing ancestor and
// re-arms when the directory is back), and symlinks whose targets are edited
// in place (it watches every directory on the link chain and re-resolves the
// chain after every change). A periodic check (stat plus content hash)
// catches what events miss; when no inotify instance can be had it is the
// only mechanism, with one warning and the fallback metric set.
type fileWatcher struct {
	// path is the watched file.
	path string
	// what names the file in logs ("rules file", "feature file").
	what string
	// interval is the period of the backstop check.
	interval time.Duration
	// settle is how long a change must stay unchanged to be reported.
	settle time.Duration
	// maxSize bounds a read (see readFileSnapshot).
	maxSize int64
	// clock drives the check and settle timers.
	clock clock.WithTicker
	// newWatcher makes the inotify watcher; tests make it fail.
	newWatcher func() (*fsnotify.Watcher, error)
	// fallback, when set, is called with true while the watcher runs on
	// the periodic check alone and false while inotify serves it.
	fallback func(bool)
	// log receives the watcher's diagnostics.
	log *slog.Logger
	// kick, when it receives, makes the watcher re-arm and check at once
	// (SIGHUP).
	kick <-chan struct{}
}

// Run sends the file's state on out, first at start and then once it has
// settled after every change (even when it settled back to the state sent
// last), until ctx ends. out should be buffered (capacity 1): a state not
// yet received is replaced by a newer one. Run returns nil when ctx ends;
// it never fails for lack of inotify.
func (fw *fileWatcher) Run(ctx context.Context, out chan fileSnapshot) error {
	clk := fw.clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	newWatcher := fw.newWatcher
	if newWatcher == nil {
		newWatcher = fsnotify.NewWatcher
	}
	interval, settle := fw.interval, fw.settle
	if interval <= 0 {
		interval = DefaultFileCheckInterval
	}
	if settle <= 0 {
		settle = DefaultFileSettle
	}
	log := fw.log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("path", fw.path)
	setFallback := func(on bool) {
		if fw.fallback != nil {
			fw.fallback(on)
		}
	}

	var w *fsnotify.Watcher
	var events <-chan fsnotify.Event
	var watchErrs <-chan error
	openWatcher := func(first bool) {
		nw, err := newWatcher()
		if err != nil {
			if first {
				log.Warn("no inotify instance to watch the "+fw.what+"; checking it periodically instead",
					"interval", interval, "err", err)
				setFallback(true)
			} else {
				log.Debug("inotify still unavailable", "err", err)
			}
			return
		}
		w, events, watchErrs = nw, nw.Events, fswatch.Errors(nw) // never nw.Errors: see fswatch
		if !first {
			log.Info("inotify available again; watching the " + fw.what)
		}
		setFallback(false)
	}
	openWatcher(true)
	defer func() {
		if w != nil {
			_ = w.Close()
		}
	}()

	// armed maps each watched directory to the identity of the directory
	// the watch was put on, so that one deleted and re-created under the
	// same name (whose old watch fsnotify may not have dropped yet) is
	// watched afresh.
	armed := map[string]dirID{}
	// arm watches the directories the file now depends on; it returns
	// whether it added a watch (a change made there before cannot have
	// been seen). arm chooses again while the directories change under
	// it (one vanishes before it is watched, or one toward the file
	// appears before its parent is watched), so that the watches always
	// end on the nearest existing ancestors.
	arm := func() (added bool) {
		if w == nil {
			return false
		}
		for range maxArmTries {
			want := watchDirs(fw.path)
			for d := range armed {
				if !want[d] {
					_ = w.Remove(d) // gone already when the directory was deleted
					delete(armed, d)
				}
			}
			again := false
			for d := range want {
				id, ok := statDirID(d)
				if !ok {
					again = true // removed since watchDirs looked
					continue
				}
				if prev, ok := armed[d]; ok && prev == id {
					continue
				}
				_ = w.Remove(d) // the watch on an earlier directory of that name, if any
				delete(armed, d)
				if err := w.Add(d); err != nil {
					if errors.Is(err, fs.ErrNotExist) {
						again = true
						continue
					}
					// Out of inotify watches: the next event or check
					// re-arms.
					log.Debug("cannot watch directory", "dir", d, "err", err)
					continue
				}
				armed[d] = id
				added = true
			}
			// A directory on the way may have appeared before its
			// parent's watch was in place, with no event for it: done
			// only when the choice still stands.
			if !again && sameKeys(watchDirs(fw.path), armed) {
				return added
			}
		}
		log.Debug("the " + fw.what + "'s directories keep changing; the next event or check re-arms")
		return added
	}

	var (
		last      *fileSnapshot // the last state sent
		candidate *fileSnapshot // a changed state waiting to settle
		settleT   clock.Timer
		settleC   <-chan time.Time
	)
	startSettle := func() {
		settleT = clk.NewTimer(settle)
		settleC = settleT.C()
	}
	defer func() {
		if settleT != nil {
			settleT.Stop()
		}
	}()
	// check reads the file; a state that differs from the last one sent
	// starts (or continues) the settle window.
	check := func() {
		arm()
		if candidate != nil {
			return // a settle window is running; it reads again at its end
		}
		cur := readFileSnapshot(fw.path, fw.maxSize)
		if last != nil && cur.same(*last) {
			return
		}
		candidate = &cur
		startSettle()
		log.Debug(fw.what+" changed; waiting for it to settle", "bytes", len(cur.Data), "state", cur.key, "settle", settle)
	}
	send := func(s fileSnapshot) {
		for {
			select {
			case out <- s:
				return
			default:
			}
			select {
			case <-out: // replace a state nobody received yet
			default:
			}
		}
	}

	tick := clk.NewTicker(interval)
	defer tick.Stop()
	check()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			log.Debug(fw.what+" directory event", "event", ev.String())
			check()
		case err, ok := <-watchErrs:
			if !ok {
				watchErrs = nil
				continue
			}
			log.Warn("watching the "+fw.what+" failed; the periodic check goes on", "err", err)
		case <-fw.kick:
			check()
		case <-tick.C():
			if w == nil {
				openWatcher(false)
			}
			check()
		case <-settleC:
			settleC = nil
			cur := readFileSnapshot(fw.path, fw.maxSize)
			if !cur.same(*candidate) {
				candidate = &cur
				startSettle()
				log.Debug(fw.what+" still changing; waiting for it to settle", "bytes", len(cur.Data), "state", cur.key)
				continue
			}
			// Sent even when it is the state sent last: the file changed
			// in between, so a reader's picture of it may be stale. The
			// agent writes the feature file itself (a change it is not
			// sent), and that file deleted within the settle window
			// settles as "missing" again, the state sent at start;
			// skipping it left the file deleted for good. Readers ignore
			// a state they already hold (the rules digest, the
			// publisher's comparison).
			candidate = nil
			last = &cur
			send(cur)
			// The link chain may point elsewhere now: watch there, and
			// look again at what changed before the watch was added.
			if arm() {
				check()
			}
		}
	}
}

// watchDirs returns the directories to watch for path: the nearest existing
// ancestor of the file's directory and of every symlink target on its link
// chain, each canonical (symlinks resolved), so that a rename, a swap of any
// link, an edit of the final target or a re-created directory all show up as
// an event in one of them.
func watchDirs(path string) map[string]bool {
	dirs := map[string]bool{}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	dirs[nearestExistingDir(filepath.Dir(abs))] = true
	p := abs
	for range maxSymlinkHops {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			break
		}
		target, err := os.Readlink(p)
		if err != nil {
			break
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		dirs[nearestExistingDir(filepath.Dir(target))] = true
		p = target
	}
	if resolved, err := filepath.EvalSymlinks(abs); err == nil {
		dirs[nearestExistingDir(filepath.Dir(resolved))] = true
	}
	delete(dirs, "")
	return dirs
}

// sameKeys reports whether the directories wanted are exactly those armed.
func sameKeys(want map[string]bool, armed map[string]dirID) bool {
	if len(want) != len(armed) {
		return false
	}
	for d := range want {
		if _, ok := armed[d]; !ok {
			return false
		}
	}
	return true
}

// maxArmTries bounds the retries of one arm while the directories toward
// the file are being deleted or created under it.
const maxArmTries = 64

// dirID identifies a directory by device and inode.
type dirID struct{ dev, ino uint64 }

// statDirID returns the identity of the directory at path; ok is false when
// path is not a directory (any more).
func statDirID(path string) (id dirID, ok bool) {
	fi, err := os.Stat(path)
	if err != nil || !fi.IsDir() {
		return dirID{}, false
	}
	if st, isStat := fi.Sys().(*syscall.Stat_t); isStat {
		id = dirID{dev: uint64(st.Dev), ino: st.Ino} //nolint:unconvert // Dev is uint32 on some platforms
	}
	return id, true
}

// nearestExistingDir returns dir, or its nearest ancestor that exists and
// is a directory, with symlinks resolved.
func nearestExistingDir(dir string) string {
	for {
		if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
			if r, err := filepath.EvalSymlinks(dir); err == nil {
				return r
			}
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
