package fakenode_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery/fakenode"
)

const vfioHeader = "name: vm-node\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n  - product: L40S\n"

// TestVFIOSpecErrors checks that bad vfio entries are refused naming the
// field and value.
func TestVFIOSpecErrors(t *testing.T) {
	for _, tt := range []struct{ vfio, want string }{
		{"vfio:\n  - product: B300\n", `vfio[0].product: "B300" is not a known product (known products: A100-SXM4-40GB,`},
		{"vfio:\n  - numa: 0\n", `vfio[0].product: is required`},
		{"vfio:\n  - product: L40S\n    count: 0\n", `vfio[0].count: 0 is out of range (1-16)`},
		{"vfio:\n  - product: L40S\n    numa: -2\n", `vfio[0].numa: -2 is out of range (-1 for none, 0-63)`},
		{"vfio:\n  - product: H100-80GB-HBM3\n    audio: vfio-pci\n", `vfio[0].audio: H100-80GB-HBM3 has no audio function (no display outputs); remove audio`},
		{"vfio:\n  - product: L40S\n    audio: Snd HDA\n", `vfio[0].audio: "Snd HDA" is not a driver name like vfio-pci or snd_hda_intel`},
		{"vfio:\n  - product: L40S\n    count: 16\n", `vfio: 17 GPUs with those of gpus; a node may have at most 16`},
		{"vfio:\n  - product: L40S\n    iommu: shared\n", `vfio[0].iommu: unknown field (known: audio, count, numa, product, sharedGroup)`},
	} {
		_, err := fakenode.Parse("vm.yaml", []byte(vfioHeader+tt.vfio))
		if err == nil || !strings.Contains(err.Error(), "vm.yaml: "+tt.want) {
			t.Errorf("%q: error %v, want %q", tt.vfio, err, tt.want)
		}
	}
}

// TestVFIOStates unbinds, removes and binds again a VFIO GPU of the
// bundled l40s-vfio node, and checks its sysfs tree and /dev/vfio as the
// kernel would leave them.
func TestVFIOStates(t *testing.T) {
	node, err := fakenode.Named("l40s-vfio")
	if err != nil {
		t.Fatal(err)
	}
	if node.VFIOCount() != 4 {
		t.Fatalf("VFIOCount = %d, want 4", node.VFIOCount())
	}
	roots := []string{t.TempDir(), t.TempDir()}
	for _, r := range roots {
		if err := node.WriteSysfs(r); err != nil {
			t.Fatal(err)
		}
	}
	addr, err := node.VFIOAddress(1)
	if err != nil || addr != "0000:57:00.0" {
		t.Fatalf("VFIOAddress(1) = %q, %v", addr, err)
	}
	driver := func(root, addr string) string {
		target, err := os.Readlink(filepath.Join(root, "sys/bus/pci/devices", addr, "driver"))
		if err != nil {
			return ""
		}
		return filepath.Base(target)
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	check := func(state fakenode.VFIOState, wantDriver string, wantDev, wantDevice bool) {
		t.Helper()
		for _, r := range roots {
			if got := driver(r, addr); got != wantDriver {
				t.Errorf("%s: driver of %s = %q, want %q", state, addr, got, wantDriver)
			}
			if got := exists(filepath.Join(r, "dev/vfio/35")); got != wantDev {
				t.Errorf("%s: /dev/vfio/35 exists = %v, want %v", state, got, wantDev)
			}
			if got := exists(filepath.Join(r, "sys/bus/pci/devices", addr, "vendor")); got != wantDevice {
				t.Errorf("%s: device on the bus = %v, want %v", state, got, wantDevice)
			}
			if override, err := os.ReadFile(filepath.Join(r, "sys/bus/pci/devices", addr, "driver_override")); wantDevice && (err != nil || string(override) != "vfio-pci\n") {
				t.Errorf("%s: driver_override = %q, %v; want vfio-pci", state, override, err)
			}
		}
	}
	check(fakenode.VFIOBound, "vfio-pci", true, true)
	if err := node.SetVFIOState(1, fakenode.VFIOUnbound); err != nil {
		t.Fatal(err)
	}
	check(fakenode.VFIOUnbound, "", false, true)
	if err := node.SetVFIOState(1, fakenode.VFIORemoved); err != nil {
		t.Fatal(err)
	}
	check(fakenode.VFIORemoved, "", false, false)
	if _, err := os.Lstat(filepath.Join(roots[0], "sys/kernel/iommu_groups/35/devices", addr)); err == nil {
		t.Error("removed: still listed in its IOMMU group")
	}
	if err := node.SetVFIOState(1, fakenode.VFIOBound); err != nil {
		t.Fatal(err)
	}
	check(fakenode.VFIOBound, "vfio-pci", true, true)

	// The first GPU's audio function stays on vfio-pci: its group stays
	// open while the GPU is unbound.
	if err := node.SetVFIOState(0, fakenode.VFIOUnbound); err != nil {
		t.Fatal(err)
	}
	if !exists(filepath.Join(roots[0], "dev/vfio/34")) {
		t.Error("/dev/vfio/34 is gone though the audio function of its group is still on vfio-pci")
	}
	if got := driver(roots[0], "0000:47:00.1"); got != "vfio-pci" {
		t.Errorf("audio function driver = %q, want vfio-pci", got)
	}

	for _, bad := range []int{-1, 4} {
		if err := node.SetVFIOState(bad, fakenode.VFIOUnbound); err == nil || !strings.Contains(err.Error(), "has no VFIO GPU") {
			t.Errorf("SetVFIOState(%d): %v, want an error naming the missing GPU", bad, err)
		}
	}
	if err := node.SetVFIOState(0, fakenode.VFIOState(7)); err == nil {
		t.Error("SetVFIOState with an unknown state: no error")
	}
}

// TestVFIOSharedGroup checks that sharedGroup puts an entry's GPUs in one
// IOMMU group, after the groups of the NVML GPUs.
func TestVFIOSharedGroup(t *testing.T) {
	node, err := fakenode.Parse("vm.yaml", []byte(vfioHeader+"vfio:\n  - product: H100-80GB-HBM3\n    count: 2\n    sharedGroup: true\n  - product: L4\n"))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := node.WriteSysfs(root); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(root, "sys/kernel/iommu_groups/31/devices"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "0000:17:00.0 0000:27:00.0" {
		t.Errorf("group 31 holds %v, want the two H100s", names)
	}
	if _, err := os.Stat(filepath.Join(root, "sys/kernel/iommu_groups/32/devices/0000:37:00.0")); err != nil {
		t.Errorf("the L4 is not alone in group 32: %v", err)
	}
}

// TestWriteSysfsRefusesARealRoot checks that a fake tree is never laid out
// over a sys directory it did not write, such as a host's root.
func TestWriteSysfsRefusesARealRoot(t *testing.T) {
	node, err := fakenode.Named("l40s-vfio")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	kept := filepath.Join(root, "sys/bus/pci/devices/0000:00:00.0")
	if err := os.MkdirAll(kept, 0o755); err != nil {
		t.Fatal(err)
	}
	err = node.WriteSysfs(root)
	if err == nil || !strings.Contains(err.Error(), "holds a sys no fake node laid out") {
		t.Errorf("WriteSysfs over a foreign sys: %v, want a refusal", err)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("the foreign tree was touched: %v", err)
	}
	// A tree the node wrote is written again.
	own := t.TempDir()
	for range 2 {
		if err := node.WriteSysfs(own); err != nil {
			t.Fatal(err)
		}
	}
}
