package fakenode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// mknodNull makes p a character device with the numbers of /dev/null (1:3),
// mode 0666, through a temporary name renamed over p, so that a plain file
// at p is replaced whole. It returns false, and no error, when the process
// may not make device nodes.
func mknodNull(p string) (bool, error) {
	tmp := filepath.Join(filepath.Dir(p), "."+filepath.Base(p)+".mknod")
	_ = os.Remove(tmp) // left by a run that died between the two calls
	if err := unix.Mknod(tmp, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return false, nil
		}
		return false, fmt.Errorf("making device node %s: %w", p, err)
	}
	// The umask may have taken bits away from the mode mknod was given.
	if err := os.Chmod(tmp, 0o666); err != nil {
		_ = os.Remove(tmp)
		return false, err
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return false, err
	}
	return true, nil
}
