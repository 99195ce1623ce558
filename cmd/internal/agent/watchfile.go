package agent

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// settleDelay lets an editor's or the kubelet's multi-step write finish
// before the file is read.
const settleDelay = 100 * time.Millisecond

// watchFile sends on changed whenever the content of path changes. It
// watches the file's directory, not the file, so that it follows an atomic
// rename and the symlink swap the kubelet does for ConfigMap volumes
// (..data -> ..<timestamp>), and compares contents so that unrelated events
// do not trigger reloads. It returns when ctx ends.
func watchFile(ctx context.Context, path string, changed chan<- struct{}, log *slog.Logger) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", path, err)
	}
	defer func() { _ = w.Close() }()
	dir := filepath.Dir(path)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watching directory %s of %s: %w", dir, path, err)
	}
	last, _ := os.ReadFile(path)
	var settle <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			log.Debug("rules directory event", "event", ev.String())
			settle = time.After(settleDelay)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			log.Warn("watching rules file", "path", path, "err", err)
		case <-settle:
			settle = nil
			data, err := os.ReadFile(path)
			if err != nil {
				// Mid-swap or removed: the next event settles it.
				log.Debug("rules file not readable", "path", path, "err", err)
				continue
			}
			if bytes.Equal(data, last) {
				continue
			}
			last = data
			select {
			case changed <- struct{}{}:
			default: // a reload is already pending
			}
		}
	}
}
