package fswatch

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/fsnotify/fsnotify"
)

// maxSymlinkHops bounds the symlink chain a File target follows (the
// kernel's own limit is 40).
const maxSymlinkHops = 40

// relayBuffer is how many errors the relay holds for a reader that is
// busy; more are dropped.
const relayBuffer = 16

// watchDirs returns the directories to watch for a file at path: the
// nearest existing ancestor of the file's directory and of every symlink
// target on its link chain, each canonical (symlinks resolved), so that a
// rename, a swap of any link, an edit of the final target or a re-created
// directory all show up as an event in one of them.
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

// dirID identifies a directory by device and inode.
type dirID struct{ dev, ino uint64 }

// statDirID returns the identity of the directory at path; ok is false
// when path is not a directory (any more).
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

// relayErrors relays w's errors so that fsnotify never waits on their
// reader. fsnotify (v1.10) sends some errors while it holds the lock that
// Add and Remove take (after a watched directory is moved, say); the
// watcher, which reads the errors and re-arms on the same goroutine, would
// then wait on fsnotify while fsnotify waits on it, and no event would
// ever come again. The relay reads w.Errors at once and holds up to
// relayBuffer errors, dropping the ones that do not fit: the errors are
// only logged, and the periodic check finds whatever they hid. The
// returned channel is closed when w is.
func relayErrors(w *fsnotify.Watcher) <-chan error {
	out := make(chan error, relayBuffer)
	go func() {
		defer close(out)
		for err := range w.Errors {
			select {
			case out <- err:
			default:
			}
		}
	}()
	return out
}
