// Package fswatch holds what featureplug's fsnotify watchers share.
package fswatch

import "github.com/fsnotify/fsnotify"

// relayBuffer is how many errors the relay holds for a reader that is
// busy; more are dropped.
const relayBuffer = 16

// Errors relays w's errors so that fsnotify never waits on their reader.
//
// fsnotify (v1.10) sends some errors while it holds the lock that Add and
// Remove take: after a watched directory is moved, say. A goroutine that
// both reads w.Errors and calls Add or Remove (as every featureplug
// watcher does when it re-arms) would then wait on fsnotify while
// fsnotify waits on it, and no event would ever come again. The relay
// reads w.Errors at once and holds up to relayBuffer errors for the
// reader, dropping the ones that do not fit: the errors are only logged,
// and each watcher's periodic backstop check finds whatever they hid.
// The returned channel is closed when w is.
func Errors(w *fsnotify.Watcher) <-chan error {
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
