package fakenode

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWriteDriverRootDeviceNodes: as root the device nodes are character
// devices with /dev/null's numbers, which a container runtime can create
// in a container, a plain file an earlier unprivileged run left included;
// without CAP_MKNOD they are plain files.
func TestWriteDriverRootDeviceNodes(t *testing.T) {
	n, err := Named("a100-80gb-mixed")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stale := filepath.Join(dir, "dev", "nvidia1")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.WriteDriverRoot(dir); err != nil {
		t.Fatal(err)
	}
	root := os.Geteuid() == 0
	for _, f := range []string{"dev/nvidia0", "dev/nvidia1", "dev/nvidiactl", "dev/nvidia-uvm-tools", "dev/nvidia-caps/nvidia-cap4", "dev/nvidia-caps/nvidia-cap1"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, f), &st); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		isChar := st.Mode&unix.S_IFMT == unix.S_IFCHR
		switch {
		case root && !isChar:
			t.Errorf("%s: mode %o, want a character device (running as root)", f, st.Mode)
		case root && (unix.Major(st.Rdev) != 1 || unix.Minor(st.Rdev) != 3):
			t.Errorf("%s: device %d:%d, want /dev/null's 1:3", f, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		case !root && st.Mode&unix.S_IFMT != unix.S_IFREG:
			t.Errorf("%s: mode %o, want a plain file (not root)", f, st.Mode)
		}
	}
	// Libraries and tools stay plain files either way.
	if fi, err := os.Lstat(filepath.Join(dir, DriverRootBinDir, "nvidia-smi")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("%s/nvidia-smi: %v, %v; want a plain file", DriverRootBinDir, fi, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "dev", ".*.mknod")); len(left) > 0 {
		t.Errorf("temporary device nodes left behind: %v", left)
	}
}
