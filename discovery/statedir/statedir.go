// Package statedir owns the agent's state directory, the host directory
// (--state-dir) of what must survive a restart or a crash whole: the names
// of its files, and the atomic write every file featureplug writes for
// others to read goes through (state files, CDI specs, the nfd-worker
// feature file).
package statedir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// The files of the state directory.
const (
	// HealthFile records the devices held Unhealthy, with their recovery
	// deadlines (plugin/health).
	HealthFile = "health.json"
	// DRAClaimsFile is the checkpoint of the DRA claims prepared on this
	// node (plugin/dra).
	DRAClaimsFile = "dra-claims.json"
	// DRAClaimsLockFile is locked while a DRA call reads and writes the
	// checkpoint, so that two agents of a rolling update take turns
	// (plugin/dra).
	DRAClaimsLockFile = "dra-claims.lock"
	// DRASliceMarkerFile records that the node may have a ResourceSlice
	// of featureplug's (plugin/dra).
	DRASliceMarkerFile = "dra-slice"
)

// Dir is the state directory; the empty Dir keeps nothing (persistence
// disabled).
type Dir string

// Enabled reports whether the agent has a state directory.
func (d Dir) Enabled() bool { return d != "" }

// Path returns the path of the state file name, or "" without a state
// directory.
func (d Dir) Path(name string) string {
	if d == "" {
		return ""
	}
	return filepath.Join(string(d), name)
}

// Private is the mode of state files: only the agent reads them.
const Private fs.FileMode = 0o600

// WriteFile replaces the file at path with data atomically: a temporary
// dotfile in the same directory (created, with its parents, when missing)
// is written with mode perm and synced, checked by verify when set, then
// renamed over path, and the directory is synced, so that a crash leaves
// the old or the new file, never a mix, and readers never see a part.
// Errors name the file.
func WriteFile(path string, data []byte, perm fs.FileMode, verify func(tmpPath string) error) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating directory %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // a no-op after the rename
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(perm)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if verify != nil {
		if err := verify(tmp.Name()); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// ReadFile reads the file at path, refusing one that is not a regular
// file or holds more than maxBytes. A missing file is no data and no
// error.
func ReadFile(path string, maxBytes int64) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%v)", path, st.Mode().Type())
	}
	if st.Size() > maxBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a state file may have", path, st.Size(), maxBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(len(data)) > maxBytes {
		return nil, fmt.Errorf("%s: more than the %d bytes a state file may have", path, maxBytes)
	}
	return data, nil
}
