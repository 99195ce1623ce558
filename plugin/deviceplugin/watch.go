package deviceplugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fsnotify/fsnotify"
)

// maxArmTries bounds the loop of dirWatch.arm, which goes one directory
// level deeper per try while the path toward the directory is being
// created under it.
const maxArmTries = 64

// dirWatch keeps the manager's one fsnotify watch on the device-plugin
// directory, or, while the directory does not exist, on its nearest
// existing ancestor, so that the directory's return is seen and the watch
// moves back onto it. It is used only by the manager's Run goroutine and
// under the manager's lock.
type dirWatch struct {
	w   *fsnotify.Watcher // nil: no inotify; the backstop alone
	dir string
	// on is the path watched now: dir, an ancestor, or "" for none.
	on string
}

// present reports whether the watch is on the directory itself.
func (d *dirWatch) present() bool { return d.on == d.dir }

// arm moves the watch onto the directory, or onto its nearest existing
// ancestor while it is missing. It reports whether the directory exists
// and is watched. An error means no watch could be added (the backstop
// alone then notices changes).
func (d *dirWatch) arm() (bool, error) {
	if d.w == nil {
		return false, errors.New("no file-system watcher")
	}
	for range maxArmTries {
		target := nearestExisting(d.dir)
		if target != d.on {
			if d.on != "" {
				// The watch may be gone already (its directory was
				// deleted or moved); nothing to do then.
				_ = d.w.Remove(d.on)
				d.on = ""
			}
			if err := d.w.Add(target); err != nil {
				if errors.Is(err, os.ErrNotExist) {
					continue // removed between the stat and the watch
				}
				return false, fmt.Errorf("watching %s: %w", target, err)
			}
			d.on = target
		}
		if target == d.dir {
			return true, nil
		}
		// A directory on the way may have appeared before the watch was
		// in place, with no event for it: look again.
		if next := childToward(target, d.dir); !isDir(next) {
			return false, nil
		}
	}
	return false, fmt.Errorf("watching %s: its path keeps changing", d.dir)
}

// gone records that the watched path itself was removed or moved away
// (fsnotify drops its watch then).
func (d *dirWatch) gone(name string) bool {
	if name != d.on {
		return false
	}
	d.on = ""
	return true
}

// concerns reports whether an event while watching an ancestor may be the
// directory's path coming back.
func (d *dirWatch) concerns(name string) bool {
	return name == d.dir || strings.HasPrefix(d.dir, name+string(filepath.Separator))
}

// stale reports whether the watch no longer matches the file system: the
// directory is there but the watch is not on it, or the watched path is
// gone.
func (d *dirWatch) stale() bool {
	if d.w == nil {
		return false
	}
	if d.on == "" {
		return true
	}
	if !isDir(d.on) {
		return true
	}
	return !d.present() && isDir(d.dir)
}

// nearestExisting returns dir or its nearest ancestor that is a directory.
func nearestExisting(dir string) string {
	for {
		if isDir(dir) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return dir
		}
		dir = parent
	}
}

// childToward returns the entry of ancestor on the way to dir.
func childToward(ancestor, dir string) string {
	rel, err := filepath.Rel(ancestor, dir)
	if err != nil {
		return dir
	}
	first, _, _ := strings.Cut(rel, string(filepath.Separator))
	return filepath.Join(ancestor, first)
}

// isDir reports whether path is a directory.
func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}
