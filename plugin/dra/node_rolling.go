package dra

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/featureplug/featureplug/discovery/fswatch"
)

// Rolling updates. With NodeOptions.Instance (the pod's UID) the driver's
// sockets carry it, so that the agent a DaemonSet update starts registers
// beside the one it replaces (the kubelet, 1.33 and later, accepts several
// registrations of one driver and calls the newest); each agent removes
// only the sockets it made, so the old one stopping leaves the new one
// registered, and no call finds no driver. The kubelet may call either
// agent for any claim while both run: every prepare and unprepare takes the
// checkpoint's lock and reads the checkpoint again first (shareLocked), so
// each agent answers from the claims both prepared. The names are those of
// k8s.io/dynamic-resource-allocation/kubeletplugin's RollingUpdate.

// Lengths of the hashed forms of a rolling-update registration socket's
// name, in bytes of SHA-256 before base64.
const (
	rollingInstanceHashBytes = 8
	rollingDriverHashBytes   = 16
)

// registrationSocketName is the registration socket's name in
// registryDir: RegistrationSocketName without an instance; with one, the
// first of <driver>-<instance>-reg.sock, <driver>-<hash of
// instance>-reg.sock and dra-<hash of driver and instance>-reg.sock whose
// path fits a unix socket.
func registrationSocketName(registryDir, instance string) string {
	if instance == "" {
		return RegistrationSocketName
	}
	instanceHash := sha256.Sum256([]byte(instance))
	driverHash := sha256.Sum256([]byte(DriverName + "\x00" + instance))
	names := []string{
		DriverName + "-" + instance + "-reg.sock",
		DriverName + "-" + base64.RawURLEncoding.EncodeToString(instanceHash[:rollingInstanceHashBytes]) + "-reg.sock",
		"dra-" + base64.RawURLEncoding.EncodeToString(driverHash[:rollingDriverHashBytes]) + "-reg.sock",
	}
	for _, name := range names {
		if len(filepath.Join(registryDir, name)) <= maxSocketPath {
			return name
		}
	}
	return names[len(names)-1]
}

// pluginSocketName is the DRA service socket's name in the plugin
// directory: PluginSocketName, or dra-<instance>.sock.
func pluginSocketName(instance string) string {
	if instance == "" {
		return PluginSocketName
	}
	return "dra-" + instance + ".sock"
}

// shareLocked, called with n.mu held by a rolling update's agent, takes
// the checkpoint's lock and reads the claims the other agent may have
// prepared or unprepared since; it returns the lock's release. With no
// Instance (one agent per node) or no checkpoint it does nothing. A lock
// or read that fails is logged, and the call goes on with this agent's own
// claims (its checkpoint write then fails the same way, and says so).
func (n *Node) shareLocked() (release func()) {
	if n.opts.Instance == "" || n.ckpt == nil {
		return func() {}
	}
	unlock, err := n.ckpt.lock()
	if err != nil {
		n.log.Error("DRA checkpoint not shared with another agent of this node", "err", err)
		return func() {}
	}
	n.reloadLocked()
	return unlock
}

// reloadLocked, with n.mu held, reads the shared checkpoint again when a
// rolling update's agents share it. A checkpoint is replaced by rename, so
// a read without the lock sees a whole one; prepare does so first to skip
// the API reads of claims the other agent prepared.
func (n *Node) reloadLocked() {
	if n.opts.Instance == "" || n.ckpt == nil {
		return
	}
	claims, err := n.ckpt.read()
	if err != nil {
		n.log.Error("DRA checkpoint not read again; answering from this agent's claims", "file", n.ckpt.path, "err", err)
		return
	}
	n.claims = claims
	// MIG devices the other agent created for its claims are claims'
	// devices here too, not devices someone else made.
	n.created.addClaims(claims)
	n.metrics.preparedClaims.Set(float64(len(claims)))
}

// handoverGrace is how long a rolling update's agent keeps its DRA
// service after removing its registration socket at stop: the kubelet's
// plugin manager notices the removal at its next pass (every second) and
// turns to the other agent; a call it sends meanwhile is still answered.
const handoverGrace = 2 * time.Second

// staleRecheck is how long a socket that refused a connection is given
// before it is probed again: a socket is refused for the moment between
// its bind and its listen.
const staleRecheck = 200 * time.Millisecond

// sweepStale removes the sockets of this driver that no process serves
// any more: those of an agent killed before it could remove them (a
// rolling update's names differ per pod, so no later agent reuses them),
// or the fixed names of an agent without an instance. Left there, the
// kubelet's plugin watcher keeps calling a dead registration socket. A
// socket something answers on, or that is not a socket, stays.
func (n *Node) sweepStale() {
	for _, pattern := range []string{
		filepath.Join(n.opts.RegistryDir, DriverName+"-*reg.sock"),
		filepath.Join(n.opts.PluginDir, "dra*.sock"),
	} {
		paths, _ := filepath.Glob(pattern) // the patterns are well-formed
		for _, p := range paths {
			if p == n.regPath || p == n.draPath {
				continue
			}
			id, ok := refusedSocket(p)
			if !ok {
				continue
			}
			time.Sleep(staleRecheck)
			if again, ok := refusedSocket(p); !ok || again != id {
				continue
			}
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				n.log.Warn("stale DRA socket not removed", "socket", p, "err", err)
				continue
			}
			n.log.Info("removed a stale DRA socket of an agent no longer running", "socket", p)
		}
	}
}

// refusedSocket reports whether path is a unix socket that refuses
// connections (no process listens on it), with its identity.
func refusedSocket(path string) (fswatch.ID, bool) {
	st, err := os.Lstat(path)
	if err != nil || st.Mode().Type() != fs.ModeSocket {
		return fswatch.ID{}, false
	}
	id, ok := fswatch.Identify(path)
	if !ok {
		return fswatch.ID{}, false
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		_ = conn.Close()
		return fswatch.ID{}, false
	}
	return id, errors.Is(err, syscall.ECONNREFUSED)
}
