package deviceplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/statedir"
)

// HealthStateFile is the name of the health state file in Options.StateDir.
const HealthStateFile = "health.json"

// healthStateVersion is the format version of the health state file.
const healthStateVersion = 1

// maxHealthStateBytes bounds the state file read at start: a node has at
// most a few hundred GPUs and MIG devices, each record a few hundred bytes.
const maxHealthStateBytes = 4 << 20

// healthRecord is one device held Unhealthy, as the state file keeps it.
type healthRecord struct {
	// Key is the device the record holds Unhealthy: the MIG UUID for an
	// event on one MIG device, else the GPU UUID.
	Key string `json:"device"`
	// GPUUUID is the physical GPU.
	GPUUUID string `json:"gpuUUID"`
	// MIGUUID is the MIG device, empty for the whole GPU.
	MIGUUID string `json:"migUUID,omitempty"`
	// Kind and XID are those of the latest event.
	Kind discovery.HealthEventKind `json:"kind"`
	XID  uint64                    `json:"xid,omitempty"`
	// FirstSeen and LastSeen are the first and latest event.
	FirstSeen time.Time `json:"firstSeen"`
	LastSeen  time.Time `json:"lastSeen"`
	// Deadline is when the device recovers unless more events come; zero
	// means never (recovery disabled).
	Deadline time.Time `json:"recoverAt,omitzero"`
	// Events counts the events since FirstSeen.
	Events uint64 `json:"events"`
}

// healthState is the content of the state file.
type healthState struct {
	Version int            `json:"version"`
	Devices []healthRecord `json:"devices"`
}

// healthStore reads and writes the health state file.
type healthStore struct {
	path string
}

// newHealthStore returns the store in stateDir, or nil when stateDir is
// empty (persistence disabled).
func newHealthStore(stateDir string) *healthStore {
	if stateDir == "" {
		return nil
	}
	return &healthStore{path: filepath.Join(stateDir, HealthStateFile)}
}

// load reads the records. A missing file is no records; a file that cannot
// be read or parsed is logged at WARN, naming the file, and also gives no
// records: the agent starts, and health events rebuild the state.
func (s *healthStore) load(log *slog.Logger) []healthRecord {
	recs, err := s.read()
	if err != nil {
		log.Warn("ignoring the health state file; starting with no unhealthy devices", "file", s.path, "err", err)
		return nil
	}
	return recs
}

// read reads and checks the state file.
func (s *healthStore) read() ([]healthRecord, error) {
	f, err := os.Open(s.path)
	if errors.Is(err, os.ErrNotExist) {
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
		return nil, fmt.Errorf("%s is not a regular file (%v)", s.path, st.Mode().Type())
	}
	if st.Size() > maxHealthStateBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a state file may have", s.path, st.Size(), maxHealthStateBytes)
	}
	var state healthState
	dec := json.NewDecoder(f)
	if err := dec.Decode(&state); err != nil {
		return nil, fmt.Errorf("%s: %w", s.path, err)
	}
	if state.Version != healthStateVersion {
		return nil, fmt.Errorf("%s: version %d, want %d", s.path, state.Version, healthStateVersion)
	}
	for i, r := range state.Devices {
		if r.Key == "" || r.GPUUUID == "" {
			return nil, fmt.Errorf("%s: devices[%d]: device and gpuUUID must be set (have %q, %q)", s.path, i, r.Key, r.GPUUUID)
		}
	}
	return state.Devices, nil
}

// write replaces the state file atomically: a temporary file in the same
// directory is written and synced, then renamed over the old one, and the
// directory is synced, so a crash leaves the old or the new file, never a
// mix.
func (s *healthStore) write(recs []healthRecord) error {
	if recs == nil {
		recs = []healthRecord{}
	}
	data, err := json.MarshalIndent(healthState{Version: healthStateVersion, Devices: recs}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", s.path, err)
	}
	data = append(data, '\n')
	return statedir.WriteFile(s.path, data)
}
