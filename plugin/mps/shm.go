package mps

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DefaultDaemonShm is the /dev/shm the control daemons see: the agent's
// own, as they are its children.
const DefaultDaemonShm = "/dev/shm"

// shmMode is the mode of the shared memory directory: like /dev/shm,
// world-writable with the sticky bit, so that clients running as any user
// create their segments and none removes another's.
const shmMode = os.ModeDir | os.ModeSticky | 0o777

// ensureShm creates the shared memory directory that Allocate mounts as
// the MPS clients' /dev/shm (plan.MPSLayout.ShmDir), and checks once per
// creation that the daemons see the same directory as their /dev/shm:
// the MPS server and its clients meet there. When they do not, it logs a
// warning saying what to mount, and featureplug_mps_shm_shared is 0.
func (s *Supervisor) ensureShm() error {
	s.shmMu.Lock()
	defer s.shmMu.Unlock()
	if s.shmReady {
		return nil
	}
	dir := s.shmDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating the MPS shared memory directory: %w", err)
	}
	// MkdirAll's mode passes the umask, and the directory may be left
	// from an earlier agent: set the mode explicitly.
	if err := os.Chmod(dir, shmMode); err != nil {
		return fmt.Errorf("setting the mode of the MPS shared memory directory: %w", err)
	}
	s.shmReady = true
	shared, why := sameDir(dir, s.opts.DaemonShm)
	s.shmShared = shared
	if shared {
		s.metrics.shmShared.Set(1)
		s.log.Info("MPS shared memory directory ready", "dir", dir, "daemonShm", s.opts.DaemonShm)
		return nil
	}
	s.metrics.shmShared.Set(0)
	s.log.Warn("MPS clients get the shared memory directory as /dev/shm, but the MPS daemons see another /dev/shm; mount the host directory at /dev/shm in the agent's container, or MPS clients cannot reach their server",
		"dir", dir, "daemonShm", s.opts.DaemonShm, "reason", why)
	return nil
}

// cleanShm empties and removes the shared memory directory once no daemon
// runs: what is left there belonged to servers that are gone. The
// directory itself stays when it is the daemons' /dev/shm (bind-mounted
// into the agent's container): removing it would leave that mount on a
// deleted directory, no longer shared with the clients of later daemons.
func (s *Supervisor) cleanShm() {
	s.mu.Lock()
	idle := len(s.workers) == 0
	s.mu.Unlock()
	if !idle {
		return
	}
	s.shmMu.Lock()
	defer s.shmMu.Unlock()
	if !s.shmReady {
		return
	}
	s.shmReady = false
	dir := s.shmDir()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("cannot clean the MPS shared memory directory", "dir", dir, "error", err.Error())
		return
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			s.log.Warn("cannot clean the MPS shared memory directory", "dir", dir, "error", err.Error())
		}
	}
	if s.shmShared {
		s.log.Info("MPS shared memory directory emptied", "dir", dir)
		return
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Debug("MPS shared memory directory emptied but kept", "dir", dir, "reason", err.Error())
		return
	}
	s.log.Info("MPS shared memory directory removed", "dir", dir)
}

// sameDir reports whether a and b are the same directory (the same inode,
// as a bind mount makes them); why says how they differ.
func sameDir(a, b string) (same bool, why string) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, err.Error()
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false, err.Error()
	}
	if !os.SameFile(fa, fb) {
		return false, fmt.Sprintf("%s and %s are different directories", a, b)
	}
	return true, ""
}
