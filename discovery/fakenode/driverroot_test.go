package fakenode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteDriverRoot(t *testing.T) {
	n, err := Named("a100-80gb-mixed")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for range 2 { // a second call adds nothing and fails on nothing
		if err := n.WriteDriverRoot(dir); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{
		"dev/nvidia0", "dev/nvidia1", "dev/nvidiactl", "dev/nvidia-uvm",
		"dev/nvidia-caps/nvidia-cap3", "dev/nvidia-caps/nvidia-cap272",
		DriverRootLibDir + "/libcuda.so.550.127.05", DriverRootBinDir + "/nvidia-smi",
	} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "dev/nvidia2")); err == nil {
		t.Error("dev/nvidia2 exists on a two-GPU node")
	}
	minors, err := os.ReadFile(filepath.Join(dir, MIGMinorsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"config 1", "gpu0/gi0/access 3", "gpu0/gi0/ci0/access 4", "gpu0/gi1/access 12", "gpu1/gi14/ci7/access 272"} {
		if !strings.Contains(string(minors), line+"\n") {
			t.Errorf("mig-minors lacks %q", line)
		}
	}
	if got := MIGCapMinor(1, 14, 7); got != 272 {
		t.Errorf("MIGCapMinor(1, 14, 7) = %d, want 272", got)
	}
}
