package discovery_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
)

// plainLib hides the fake node's own sysfs, as real NVML has none.
type plainLib struct{ nvml.Interface }

// TestPCIeRootFromSysfsRoot reads PCIe roots from a sysfs tree under
// --sysfs-root laid out as Linux lays it out, and leaves them empty where
// sysfs has no link for a GPU or there is no sysfs at all.
func TestPCIeRootFromSysfsRoot(t *testing.T) {
	node, err := fakenode.Named("workstation")
	if err != nil {
		t.Fatal(err)
	}
	lib := plainLib{node.NVML()}
	root := t.TempDir()
	inv, err := discovery.Discover(lib, discovery.WithSysfsRoot(root))
	if err != nil {
		t.Fatal(err)
	}
	if got := inv.GPUs[0].PCIeRoot; got != "" {
		t.Errorf("without sysfs: PCIe root %q, want none", got)
	}

	bus := inv.GPUs[0].PCIBusID
	devices := filepath.Join(root, "sys", "bus", "pci", "devices")
	dir := filepath.Join(root, "sys", "devices", "pci0000:3a", "0000:3a:02.0", bus)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(devices, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "..", "..", "devices", "pci0000:3a", "0000:3a:02.0", bus), filepath.Join(devices, bus)); err != nil {
		t.Fatal(err)
	}
	if inv, err = discovery.Discover(lib, discovery.WithSysfsRoot(root)); err != nil {
		t.Fatal(err)
	}
	if got := inv.GPUs[0].PCIeRoot; got != "pci0000:3a" {
		t.Errorf("PCIe root %q, want pci0000:3a (from the link of %s)", got, bus)
	}
	// The fake node's own sysfs wins over the machine's.
	if inv, err = discovery.Discover(node.NVML(), discovery.WithSysfsRoot(root)); err != nil {
		t.Fatal(err)
	}
	if got := inv.GPUs[0].PCIeRoot; got != "pci0000:00" {
		t.Errorf("fake node: PCIe root %q, want its own pci0000:00", got)
	}
}

// atsLib is a fake node whose GPUs are on a coherent platform in ATS mode.
type atsLib struct{ nvml.Interface }

func (l atsLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	d, ret := l.Interface.DeviceGetHandleByIndex(i)
	return atsDevice{d}, ret
}

type atsDevice struct{ nvml.Device }

func (atsDevice) GetAddressingMode() (nvml.DeviceAddressingMode, nvml.Return) {
	return nvml.DeviceAddressingMode{Value: uint32(nvml.DEVICE_ADDRESSING_MODE_ATS)}, nvml.SUCCESS
}

// TestAddressingMode reads "ATS" on a coherent platform and nothing where
// NVML does not support addressing modes (the fake node's GPUs).
func TestAddressingMode(t *testing.T) {
	node, err := fakenode.Named("workstation")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := discovery.Discover(node.NVML())
	if err != nil {
		t.Fatal(err)
	}
	if got := inv.GPUs[0].AddressingMode; got != "" {
		t.Errorf("addressing mode %q where NVML supports none, want \"\"", got)
	}
	if inv, err = discovery.Discover(atsLib{node.NVML()}); err != nil {
		t.Fatal(err)
	}
	if got := inv.GPUs[0].AddressingMode; got != "ATS" {
		t.Errorf("addressing mode %q on a coherent platform, want ATS", got)
	}
}

// TestNUMANodeFromSysfs: a GPU whose NVML does not report its NUMA node
// gets the one sysfs names, read from the fake node's own sysfs or from
// --sysfs-root (never the host's /sys for a fake node).
func TestNUMANodeFromSysfs(t *testing.T) {
	node, err := fakenode.Parse("numa.yaml", []byte("name: numa\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n  - product: L4\n    numa: -1\n"))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := discovery.Discover(node.NVML())
	if err != nil {
		t.Fatal(err)
	}
	if got := inv.GPUs[0].NUMANode; got != discovery.NoNUMANode {
		t.Errorf("fake node without NUMA: NUMA node %d, want none", got)
	}
	root := t.TempDir()
	bus := inv.GPUs[0].PCIBusID
	dir := filepath.Join(root, "sys", "bus", "pci", "devices", bus)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if inv, err = discovery.Discover(plainLib{node.NVML()}, discovery.WithSysfsRoot(root)); err != nil {
		t.Fatal(err)
	}
	if got := inv.GPUs[0].NUMANode; got != 1 {
		t.Errorf("NUMA node %d from %s, want 1", got, dir)
	}
}
