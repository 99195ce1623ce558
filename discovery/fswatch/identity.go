package fswatch

import (
	"os"
	"syscall"
)

// ID identifies a file: its device and inode, and its change time. The
// change time moves whenever the file is created, renamed, linked or has
// its metadata changed, so a file removed and created again under the
// same name is told apart from the old one even when the file system
// gives it the old inode, as ext4 does with a socket re-made at once. The
// zero ID is "no file".
type ID struct {
	Dev, Ino uint64
	// Ctime is the change time in nanoseconds since the epoch.
	Ctime int64
}

// Identify returns the identity of the file at path, not following a
// final symlink; ok is false when there is none.
func Identify(path string) (id ID, ok bool) {
	fi, err := os.Lstat(path)
	if err != nil {
		return ID{}, false
	}
	return IDOf(fi), true
}

// IDOf returns the identity of a file from its FileInfo (the zero ID when
// the platform gives no inode).
func IDOf(fi os.FileInfo) ID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ID{}
	}
	return ID{Dev: uint64(st.Dev), Ino: st.Ino, Ctime: st.Ctim.Nano()} //nolint:unconvert // Dev is uint32 on some platforms
}

// SameInode reports whether id and o are the same inode, whatever their
// change times: a directory's change time moves with every entry made or
// removed in it.
func (id ID) SameInode(o ID) bool { return id.Dev == o.Dev && id.Ino == o.Ino }
