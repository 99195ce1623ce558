package labeler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/featureplug/featureplug/discovery/statedir"
)

// DefaultFeatureFile is where nfd-worker's local source reads featureplug's
// feature file.
const DefaultFeatureFile = "/etc/kubernetes/node-feature-discovery/features.d/featureplug"

// MaxFeatureFileSize is nfd-worker's limit on a feature file (its local
// source skips larger files).
const MaxFeatureFileSize = 64 * 1024

// featureFileHeader opens every feature file. nfd-worker skips comment lines
// that do not start with "# +" (its directive prefix).
const featureFileHeader = "# Written by featureplug: GPU labels for nfd-worker's local source. Do not edit.\n"

// expiryDirective is nfd-worker's directive that drops the lines after it
// once the RFC 3339 time has passed.
const expiryDirective = "# +expiry-time="

// FileConfig configures a FilePublisher.
type FileConfig struct {
	// Path is the feature file; empty means DefaultFeatureFile.
	Path string
	// Expiry, when positive, adds nfd-worker's "# +expiry-time" directive so
	// that the labels disappear that long after the agent stops refreshing
	// them. The file is then also rewritten when less than half of Expiry
	// is left. Zero writes no expiry: labels stay until the file changes.
	Expiry time.Duration
	// Clock is used for the expiry; nil is the real clock.
	Clock clock.PassiveClock
	// Logger receives write messages; nil uses slog.Default().
	Logger *slog.Logger
}

// FilePublisher publishes a node's labels as an nfd-worker feature file:
// sorted key=value lines that nfd-worker's local source turns into node
// labels (and local.feature attributes). Instance features such as
// nvidia.gpu cannot be expressed in that format, so Content.Features is not
// written; use NodeFeaturePublisher for them.
//
// The file is written atomically (a dotfile in the same directory, which
// nfd-worker ignores, renamed over the target) and only when its content
// would change. A file over MaxFeatureFileSize is refused.
type FilePublisher struct {
	path   string
	expiry time.Duration
	clock  clock.PassiveClock
	log    *slog.Logger

	mu         sync.Mutex // serializes Publish; guards lastBody, lastExpiry, onDisk
	lastBody   []byte
	lastExpiry time.Time
	// onDisk is the content the file last held by this publisher's
	// account (written or found up to date); nil before the first.
	onDisk []byte

	writes, unchanged atomic.Uint64
}

var _ Publisher = (*FilePublisher)(nil)

// NewFilePublisher returns a publisher for cfg. It touches no file.
func NewFilePublisher(cfg FileConfig) (*FilePublisher, error) {
	path := cfg.Path
	if path == "" {
		path = DefaultFeatureFile
	}
	if cfg.Expiry < 0 {
		return nil, fmt.Errorf("feature file %s: expiry %v is negative", path, cfg.Expiry)
	}
	if filepath.Base(path)[0] == '.' {
		return nil, fmt.Errorf("feature file %s: nfd-worker ignores files whose name starts with '.'", path)
	}
	c := cfg.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &FilePublisher{path: path, expiry: cfg.Expiry, clock: c, log: log.With("file", path)}, nil
}

// Path returns the feature file's path.
func (p *FilePublisher) Path() string { return p.path }

// Stats returns how many publishes wrote the file and how many found it
// up to date.
func (p *FilePublisher) Stats() WriteStats {
	return WriteStats{Updates: p.writes.Load(), Unchanged: p.unchanged.Load()}
}

// Publish writes c.Labels to the feature file unless it already holds them.
func (p *FilePublisher) Publish(ctx context.Context, c Content) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var body bytes.Buffer
	if err := formatLabels(&body, c.Labels); err != nil {
		return fmt.Errorf("feature file %s: %w", p.path, err)
	}

	p.mu.Lock()
	defer p.mu.Unlock()

	data := p.render(body.Bytes())
	if len(data) > MaxFeatureFileSize {
		return fmt.Errorf("feature file %s: %d bytes for %d labels exceed nfd-worker's limit of %d bytes",
			p.path, len(data), len(c.Labels), MaxFeatureFileSize)
	}
	cur, err := os.ReadFile(p.path)
	switch {
	case err == nil && bytes.Equal(cur, data):
		p.onDisk = data
		p.unchanged.Add(1)
		return nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("feature file %s: read current content: %w", p.path, err)
	}
	// A file that no longer holds what was last written here was deleted
	// or edited behind the agent's back: say so, then repair it.
	if p.onDisk != nil {
		switch {
		case err != nil:
			p.log.Warn("feature file was deleted; rewriting it")
		case !bytes.Equal(cur, p.onDisk):
			p.log.Warn("feature file was changed by someone else; rewriting it", "bytes", len(cur))
		}
	}
	if err := writeAtomic(p.path, data); err != nil {
		return err
	}
	p.onDisk = data
	p.writes.Add(1)
	p.log.Info("wrote feature file", "labels", len(c.Labels), "bytes", len(data))
	return nil
}

// render returns the file content for body, choosing the expiry time: the
// previous one while the body is unchanged and at least half of the expiry
// is left, a fresh one otherwise.
func (p *FilePublisher) render(body []byte) []byte {
	var b bytes.Buffer
	b.WriteString(featureFileHeader)
	if p.expiry > 0 {
		now := p.clock.Now()
		if !bytes.Equal(body, p.lastBody) || p.lastExpiry.Sub(now) < p.expiry/2 {
			p.lastExpiry = now.Add(p.expiry).UTC().Truncate(time.Second)
		}
		b.WriteString(expiryDirective)
		b.WriteString(p.lastExpiry.Format(time.RFC3339))
		b.WriteByte('\n')
	}
	p.lastBody = bytes.Clone(body)
	b.Write(body)
	return b.Bytes()
}

// writeAtomic writes data to a dotfile next to path (which nfd-worker
// ignores) and renames it over path, so readers see the old or the new
// content, never a partial file.
func writeAtomic(path string, data []byte) error {
	if err := statedir.WriteFile(path, data, 0o644, nil); err != nil {
		return fmt.Errorf("feature file %s: %w", path, err)
	}
	return nil
}
