package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/featureplug/featureplug/discovery/statedir"
)

// CheckpointFile is the name of the prepared-claims checkpoint in the
// state directory.
const CheckpointFile = statedir.DRAClaimsFile

// corruptSuffix is added to the name of a checkpoint that cannot be
// parsed when it is moved aside; a later corrupt file replaces it.
const corruptSuffix = ".corrupt"

// checkpointVersion is the format version of the checkpoint.
const checkpointVersion = 1

// maxCheckpointBytes bounds the checkpoint read at start: a node prepares
// at most a few hundred claims at once (one per pod's claim of a device of
// this node), each record well under 2 kB.
const maxCheckpointBytes = 8 << 20

// PreparedDevice is one device of a prepared claim, as the kubelet was
// told: the allocation result it came from and its CDI device IDs.
type PreparedDevice struct {
	// Requests are the claim's requests the device was allocated for
	// (subrequest names stripped, as the kubelet expects).
	Requests []string `json:"requests"`
	// Pool and Device name the device in the ResourceSlice.
	Pool   string `json:"pool"`
	Device string `json:"device"`
	// CDIDeviceIDs are the fully qualified CDI device names given to the
	// container runtime.
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
	// ShareID identifies the allocation's share of a device that allows
	// multiple allocations; empty otherwise.
	ShareID string `json:"shareID,omitempty"`
	// AdminAccess is set for a device of an admin-access request: the
	// container sees it beside the claims that use it, and it is not
	// counted as in use.
	AdminAccess bool `json:"adminAccess,omitempty"`
	// Status is the device's data in the claim's status.devices.
	Status *DeviceStatusData `json:"status,omitempty"`
}

// PreparedClaim is a claim prepared on this node.
type PreparedClaim struct {
	UID       string           `json:"uid"`
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	Devices   []PreparedDevice `json:"devices"`
}

// String names the claim as errors and logs do: namespace/name (uid).
func (c PreparedClaim) String() string {
	return claimRef(c.Namespace, c.Name, c.UID)
}

// claimRef names a claim: namespace/name (uid).
func claimRef(namespace, name, uid string) string {
	return fmt.Sprintf("%s/%s (uid %s)", namespace, name, uid)
}

// checkpointState is the content of the checkpoint file.
type checkpointState struct {
	Version int             `json:"version"`
	Claims  []PreparedClaim `json:"claims"`
}

// checkpoint reads and writes the prepared-claims file. A nil checkpoint
// keeps nothing (no state directory).
type checkpoint struct {
	path, lockPath string
}

// newCheckpoint returns the checkpoint in stateDir, or nil when stateDir
// is empty.
func newCheckpoint(stateDir string) *checkpoint {
	if stateDir == "" {
		return nil
	}
	d := statedir.Dir(stateDir)
	return &checkpoint{path: d.Path(CheckpointFile), lockPath: d.Path(statedir.DRAClaimsLockFile)}
}

// lock takes the checkpoint's lock file exclusively, waiting for another
// process (the other agent of a rolling update) to release it, and
// returns its release. The lock goes with the process, so a crashed
// agent holds nothing.
func (c *checkpoint) lock() (func(), error) {
	f, err := os.OpenFile(c.lockPath, os.O_CREATE|os.O_RDWR, statedir.Private)
	if err != nil {
		return nil, fmt.Errorf("DRA checkpoint lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("DRA checkpoint lock %s: %w", c.lockPath, err)
	}
	return func() { _ = f.Close() }, nil // closing the file releases the lock
}

// errCorrupt marks a checkpoint whose content is unusable (as opposed to
// one that cannot be read at all).
var errCorrupt = errors.New("corrupt checkpoint")

// load reads the prepared claims. A missing file is no claims. A file
// whose content is unusable is moved aside (to path+".corrupt") and gives
// no claims, with an error (wrapping errCorrupt) that names the file, what
// is wrong and where it went; the caller logs it and starts empty. Any
// other error (the file cannot be read) is returned with no claims.
func (c *checkpoint) load() (map[string]PreparedClaim, error) {
	claims, err := c.read()
	if err == nil || !errors.Is(err, errCorrupt) {
		return claims, err
	}
	aside := c.path + corruptSuffix
	if mvErr := os.Rename(c.path, aside); mvErr != nil {
		return nil, fmt.Errorf("%w; moving it aside: %v", err, mvErr)
	}
	return nil, fmt.Errorf("%w; moved aside to %s", err, aside)
}

// read reads and checks the checkpoint.
func (c *checkpoint) read() (map[string]PreparedClaim, error) {
	f, err := os.Open(c.path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]PreparedClaim{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading DRA checkpoint: %w", err)
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading DRA checkpoint: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w %s: not a regular file (%v)", errCorrupt, c.path, st.Mode().Type())
	}
	if st.Size() > maxCheckpointBytes {
		return nil, fmt.Errorf("%w %s: %d bytes, more than the %d a checkpoint may have", errCorrupt, c.path, st.Size(), maxCheckpointBytes)
	}
	var state checkpointState
	if err := json.NewDecoder(f).Decode(&state); err != nil {
		return nil, fmt.Errorf("%w %s: %v", errCorrupt, c.path, err)
	}
	if state.Version != checkpointVersion {
		return nil, fmt.Errorf("%w %s: version %d, want %d", errCorrupt, c.path, state.Version, checkpointVersion)
	}
	claims := make(map[string]PreparedClaim, len(state.Claims))
	for i, cl := range state.Claims {
		if err := cl.check(); err != nil {
			return nil, fmt.Errorf("%w %s: claims[%d]: %v", errCorrupt, c.path, i, err)
		}
		if _, dup := claims[cl.UID]; dup {
			return nil, fmt.Errorf("%w %s: claims[%d]: uid %q appears twice", errCorrupt, c.path, i, cl.UID)
		}
		claims[cl.UID] = cl
	}
	return claims, nil
}

// check reports a record that could not have been written by write.
func (c PreparedClaim) check() error {
	if c.UID == "" || c.Namespace == "" || c.Name == "" {
		return fmt.Errorf("uid, namespace and name must be set (have %q, %q, %q)", c.UID, c.Namespace, c.Name)
	}
	if len(c.Devices) == 0 {
		return fmt.Errorf("claim %s: no devices", c)
	}
	for j, d := range c.Devices {
		if d.Device == "" || d.Pool == "" || len(d.CDIDeviceIDs) == 0 {
			return fmt.Errorf("claim %s: devices[%d]: pool, device and cdiDeviceIDs must be set (have %q, %q, %q)",
				c, j, d.Pool, d.Device, d.CDIDeviceIDs)
		}
	}
	return nil
}

// write replaces the checkpoint atomically with claims: a temporary file
// in the same directory is written and synced, then renamed over the old
// one, and the directory is synced, so a crash leaves the old or the new
// file, never a mix. Records are sorted by UID, so equal sets give equal
// files.
func (c *checkpoint) write(claims map[string]PreparedClaim) error {
	state := checkpointState{Version: checkpointVersion, Claims: make([]PreparedClaim, 0, len(claims))}
	for _, cl := range claims {
		state.Claims = append(state.Claims, cl)
	}
	slices.SortFunc(state.Claims, func(a, b PreparedClaim) int { return strings.Compare(a.UID, b.UID) })
	data, err := json.MarshalIndent(state, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", c.path, err)
	}
	data = append(data, '\n')
	return statedir.WriteFile(c.path, data, statedir.Private, nil)
}
