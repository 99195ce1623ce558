package gpusource

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
)

// TestFakeSourceVFIO checks that a fake node with GPUs on vfio-pci is
// discovered with them, that binding changes show at the next discovery,
// and that its temporary sysfs tree goes at Close.
func TestFakeSourceVFIO(t *testing.T) {
	src, err := OpenFake("l40s-vfio")
	if err != nil {
		t.Fatal(err)
	}
	root := src.SysfsRoot()
	if root == "" {
		t.Fatal("no sysfs tree for a node with VFIO GPUs")
	}
	drivers := func() []string {
		t.Helper()
		inv, _, err := src.Discover()
		if err != nil {
			t.Fatal(err)
		}
		if len(inv.GPUs) != 4 {
			t.Errorf("%d GPUs through NVML, want 4", len(inv.GPUs))
		}
		var out []string
		for _, d := range inv.VFIO {
			out = append(out, d.PCIAddress+"="+d.Driver)
		}
		return out
	}
	want := func(got []string, want ...string) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("VFIO devices %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("VFIO devices %v, want %v", got, want)
				return
			}
		}
	}
	want(drivers(), "0000:47:00.0=vfio-pci", "0000:57:00.0=vfio-pci", "0000:67:00.0=vfio-pci", "0000:77:00.0=vfio-pci")
	if err := src.SetVFIOState(1, fakenode.VFIOUnbound); err != nil {
		t.Fatal(err)
	}
	want(drivers(), "0000:47:00.0=vfio-pci", "0000:57:00.0=", "0000:67:00.0=vfio-pci", "0000:77:00.0=vfio-pci")
	if err := src.SetVFIOState(1, fakenode.VFIORemoved); err != nil {
		t.Fatal(err)
	}
	want(drivers(), "0000:47:00.0=vfio-pci", "0000:67:00.0=vfio-pci", "0000:77:00.0=vfio-pci")
	if err := src.SetVFIOState(1, fakenode.VFIOBound); err != nil {
		t.Fatal(err)
	}
	want(drivers(), "0000:47:00.0=vfio-pci", "0000:57:00.0=vfio-pci", "0000:67:00.0=vfio-pci", "0000:77:00.0=vfio-pci")
	src.Close()
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("the temporary sysfs tree %s is still there after Close: %v", root, err)
	}

	plain, err := OpenFake("l40s-pcie")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if plain.SysfsRoot() != "" {
		t.Errorf("a node without VFIO GPUs has a sysfs tree at %s", plain.SysfsRoot())
	}
}

// TestFakeSourceSysfsRootAndReload checks a tree in a given directory: it
// stays after Close, and follows a fake node file that changes.
func TestFakeSourceSysfsRootAndReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "node.yaml")
	write := func(vfio string) {
		t.Helper()
		data := "name: vm-node\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n  - product: L4\nvfio:\n" + vfio
		if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("  - product: H100-80GB-HBM3\n    count: 2\n")
	root := filepath.Join(dir, "host")
	src, err := OpenFake(file, WithFakeSysfsRoot(root))
	if err != nil {
		t.Fatal(err)
	}
	count := func() int {
		t.Helper()
		inv, _, err := src.Discover()
		if err != nil {
			t.Fatal(err)
		}
		return len(inv.VFIO)
	}
	if n := count(); n != 2 {
		t.Errorf("%d VFIO devices, want 2", n)
	}
	write("  - product: H100-80GB-HBM3\n")
	if n := count(); n != 1 {
		t.Errorf("after the file changed: %d VFIO devices, want 1 (the tree must follow the file)", n)
	}
	src.Close()
	if _, err := os.Stat(filepath.Join(root, "sys/bus/pci/devices")); err != nil {
		t.Errorf("the tree in the given directory is gone after Close: %v", err)
	}
}

// TestRealSourceWithoutNVML checks that a host whose GPUs are all bound to
// vfio-pci is read without NVML: no NVML for the health watcher.
func TestRealSourceWithoutNVML(t *testing.T) {
	node, err := fakenode.Named("l40s-vfio")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := node.WriteSysfs(root); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"0000:07:00.0", "0000:17:00.0", "0000:27:00.0", "0000:37:00.0"} {
		if err := os.Remove(filepath.Join(root, "sys/bus/pci/devices", addr, "driver")); err != nil {
			t.Fatal(err)
		}
	}
	src, err := OpenReal(discovery.NVMLOptions{LibraryPath: filepath.Join(t.TempDir(), "libnvidia-ml.so.1")}, root)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	inv, lib, err := src.Discover()
	if err != nil {
		t.Fatal(err)
	}
	if lib != nil || len(inv.GPUs) != 0 || len(inv.VFIO) != 4 || inv.DriverVersion != "" {
		t.Errorf("NVML %v, %d GPUs, %d VFIO devices, driver %q; want no NVML, 0, 4, none", lib, len(inv.GPUs), len(inv.VFIO), inv.DriverVersion)
	}
}
