package dra

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"sync"

	"github.com/featureplug/featureplug/discovery/statedir"
)

// sliceMarker records in the state directory that the node may have a
// ResourceSlice of featureplug's: it is written before the first device
// is offered to the DRA publisher and removed once a sync has left no
// slice. The publisher stays away from the API server while nothing is
// served through DRA (so that nodes that never use DRA need no
// ResourceSlice permissions); without the marker, an agent restarted with
// rules that no longer serve anything through DRA would leave the old
// slice in place, offering through DRA the devices its device plugins now
// serve. With it, such an agent deletes the slice at start.
//
// offer and clearIf run under one lock, so that a removal never follows
// an offer of devices it did not see.
type sliceMarker struct {
	path string // "" without a state directory: no marker
	log  *slog.Logger

	mu sync.Mutex
}

// exists reports whether an earlier run left the marker.
func (m *sliceMarker) exists() bool {
	if m.path == "" {
		return false
	}
	_, err := os.Stat(m.path)
	return err == nil
}

// offer writes the marker when devices are offered (nonEmpty), then
// calls do (the offer itself).
func (m *sliceMarker) offer(nonEmpty bool, do func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if nonEmpty && m.path != "" && !m.exists() {
		if err := statedir.WriteFile(m.path, []byte("a ResourceSlice of gpu.featureplug.io may exist for this node\n"), statedir.Private, nil); err != nil {
			m.log.Warn("cannot record that the node has a ResourceSlice; a restart with no DRA resource would leave it in place", "err", err)
		}
	}
	do()
}

// clearIf removes the marker when empty reports that nothing is offered
// (called after a successful sync: the node then has no slice).
func (m *sliceMarker) clearIf(empty func() bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.path == "" || !empty() {
		return
	}
	if err := os.Remove(m.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.log.Warn("cannot remove the ResourceSlice marker", "path", m.path, "err", err)
	}
}
