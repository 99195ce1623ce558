//go:build unix

package kubeletsim

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// RestartBindFirst restarts like Restart, but opens the registration socket
// the way a starting kubelet can be caught doing: the socket is bound (so
// kubelet.sock exists and plugins notice it) and, until beforeListen
// returns, not listening, so a plugin's dial in between is refused. A test
// makes beforeListen wait for such a refused dial to have happened, which
// makes the race between bind and listen deterministic.
func (k *Kubelet) RestartBindFirst(cleanPluginSockets bool, beforeListen func() error) error {
	if err := k.stopAndClean(cleanPluginSockets); err != nil {
		return err
	}
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("kubeletsim: socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), k.socket)
	defer func() { _ = f.Close() }()
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: k.socket}); err != nil {
		return fmt.Errorf("kubeletsim: binding %s: %w", k.socket, err)
	}
	if err := beforeListen(); err != nil {
		_ = os.Remove(k.socket)
		return err
	}
	if err := syscall.Listen(fd, syscall.SOMAXCONN); err != nil {
		return fmt.Errorf("kubeletsim: listening on %s: %w", k.socket, err)
	}
	ln, err := net.FileListener(f)
	if err != nil {
		return fmt.Errorf("kubeletsim: listener on %s: %w", k.socket, err)
	}
	k.serveListener(ln)
	return nil
}
