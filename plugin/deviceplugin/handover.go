package deviceplugin

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Two agents on one node (a DaemonSet's rolling update with maxSurge, an
// upgrade overlapping the old pod) serve the same resources side by side.
// The kubelet's device manager keeps one endpoint per resource and socket
// path: a second Register for a resource from another socket becomes the
// endpoint it allocates through, the first stays connected, and when the
// first one's ListAndWatch stream ends the second is promoted with no
// moment without an endpoint. A second Register from the same socket path
// is refused while the first is connected, and one agent unlinking the
// other's socket breaks it. So each agent takes a socket of its own: the
// resource's usual socket when it is free, else the next free slot
// (featureplug-<resource>@1.sock, ...), and a socket is only ever removed
// by the server that made it or, when no process listens on it any more,
// as stale.

// socketSlots is how many sockets one resource may have in the
// device-plugin directory at once: one per agent of a handover (two with
// maxSurge: 1), with room for an agent that is slow to stop.
const socketSlots = 4

// slotSeparator joins a socket name and its slot number. Extended resource
// names never hold '@', so a slot's name never is another resource's.
const slotSeparator = "@"

// staleDialTimeout bounds the dial that tells a live socket from a stale
// one; a refused connection answers at once.
const staleDialTimeout = 200 * time.Millisecond

// errSocketBusy says a socket path is served by another process (or is
// something other than a socket).
var errSocketBusy = errors.New("in use by another process")

// slotPath is the socket of resource's server in slot slot of dir: slot 0
// is SocketPath's name, slot n adds "@n" before ".sock".
func slotPath(dir, resource string, slot int) (string, error) {
	if slot == 0 {
		return SocketPath(dir, resource)
	}
	return socketPathWithSuffix(dir, resource, slotSeparator+strconv.Itoa(slot)+socketSuffix)
}

// listenSocket listens on a socket of resource in dir that no other
// process serves: prefer first (the server's socket before a restart),
// then the slots in order. It returns the listener and its path.
func listenSocket(dir, resource, prefer string) (*net.UnixListener, string, error) {
	paths := make([]string, 0, socketSlots+1)
	if prefer != "" {
		paths = append(paths, prefer)
	}
	for slot := range socketSlots {
		p, err := slotPath(dir, resource, slot)
		if err != nil {
			return nil, "", err
		}
		if p != prefer {
			paths = append(paths, p)
		}
	}
	for _, p := range paths {
		ln, err := claimSocket(p)
		if err == nil {
			return ln, p, nil
		}
		if !errors.Is(err, errSocketBusy) {
			return nil, "", err
		}
	}
	return nil, "", fmt.Errorf("all %d sockets of the resource in %s (%s, ...) are served by other processes: more featureplug agents run on this node than a handover needs",
		socketSlots, dir, strings.Join(paths[:min(2, len(paths))], ", "))
}

// claimSocket listens on path. A free path is taken; so is a socket no
// process listens on any more (left by an agent that was killed), which is
// removed first. A socket another process serves is never touched
// (errSocketBusy).
func claimSocket(path string) (*net.UnixListener, error) {
	ln, err := listenUnix(path)
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) {
		return ln, err
	}
	if !staleSocket(path) {
		return nil, fmt.Errorf("%s: %w", path, errSocketBusy)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing stale socket %s: %w", path, err)
	}
	ln, err = listenUnix(path)
	if errors.Is(err, syscall.EADDRINUSE) { // another agent took it meanwhile
		return nil, fmt.Errorf("%s: %w", path, errSocketBusy)
	}
	return ln, err
}

// listenUnix listens on path. Closing the listener leaves the socket file:
// it is removed by the server's stop, and only while it is still the one
// made here, so that a socket made again at the same path by someone else
// survives.
func listenUnix(path string) (*net.UnixListener, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	return ln, nil
}

// staleSocket reports whether path is a socket no process listens on: a
// connection to it is refused. A listener, one too busy to answer within
// staleDialTimeout, and a file that is not a socket are not stale.
func staleSocket(path string) bool {
	st, err := os.Lstat(path)
	if err != nil || st.Mode()&os.ModeSocket == 0 {
		return false
	}
	c, err := net.DialTimeout("unix", path, staleDialTimeout)
	if err == nil {
		_ = c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}
