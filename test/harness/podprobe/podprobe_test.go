package podprobe

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestReadMounts(t *testing.T) {
	dir := t.TempDir()
	info := filepath.Join(dir, "mountinfo")
	content := "22 1 0:21 / / rw,relatime - overlay overlay rw,lowerdir=/a\n" +
		"30 22 0:5 / /dev rw,nosuid - tmpfs tmpfs rw,mode=755\n" +
		"41 30 254:0 /tmp/fp/driver/usr/bin/nvidia-smi /usr/bin/nvidia-smi ro,nosuid,nodev shared:1 - ext4 /dev/vda rw\n" +
		"42 22 254:0 /tmp/with\\040space /mnt/with\\040space rw - ext4 /dev/vda rw\n"
	if err := os.WriteFile(info, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	ms, err := readMounts(info)
	if err != nil {
		t.Fatal(err)
	}
	r := Report{Mounts: ms}
	if m, ok := r.Mount("/usr/bin/nvidia-smi"); !ok || m.FSType != "ext4" || m.Options != "ro,nosuid,nodev" {
		t.Errorf("/usr/bin/nvidia-smi: %+v (found %v), want ext4 ro,nosuid,nodev", m, ok)
	}
	if _, ok := r.Mount("/mnt/with space"); !ok {
		t.Errorf("the escaped mount point is not unescaped: %+v", ms)
	}
	if m, _ := r.Mount("/"); m.Dev == 0 {
		t.Errorf("/ was not stat'ed: %+v", m)
	}
	if err := os.WriteFile(info, []byte("1 2 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readMounts(info); err == nil {
		t.Error("a malformed mountinfo line parsed")
	}
}

func TestDeviceNumbers(t *testing.T) {
	for _, c := range [][2]uint32{{1, 3}, {195, 255}, {511, 300000}, {4095, 1 << 19}} {
		dev := unix.Mkdev(c[0], c[1])
		if ma, mi := major(dev), minor(dev); ma != c[0] || mi != c[1] {
			t.Errorf("device %#x: %d:%d, want %d:%d", dev, ma, mi, c[0], c[1])
		}
	}
}
