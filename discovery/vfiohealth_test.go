package discovery_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
)

// TestCheckVFIODevice walks the GPUs of the bundled l40s-vfio tree through
// what an operator does to them on a host: unbind, remove, re-bind, bind to
// nvidia, lose the group's device node.
func TestCheckVFIODevice(t *testing.T) {
	node, err := fakenode.Named("l40s-vfio")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := node.WriteSysfs(root); err != nil {
		t.Fatal(err)
	}
	inv, err := discovery.ReadSysfs(root)
	if err != nil {
		t.Fatal(err)
	}
	gpu := func(i int) (string, int) { return inv.VFIO[i].PCIAddress, inv.VFIO[i].IOMMUGroup }
	check := func(step string, i int, want discovery.HealthEventKind) {
		t.Helper()
		addr, group := gpu(i)
		got, bad := discovery.CheckVFIODevice(root, addr, group)
		if got.Kind != want || bad != (want != "") {
			t.Errorf("%s: GPU %d (%s): %+v, %v; want kind %q", step, i, addr, got, bad, want)
		}
		if bad && got.Reason == "" {
			t.Errorf("%s: GPU %d: no reason", step, i)
		}
	}
	set := func(i int, s fakenode.VFIOState) {
		t.Helper()
		if err := node.SetVFIOState(i, s); err != nil {
			t.Fatal(err)
		}
	}
	for i := range inv.VFIO {
		check("bound", i, "")
	}
	// GPU 0 shares its group with its audio function, still on vfio-pci:
	// the group's node stays, the GPU alone is unbound.
	set(0, fakenode.VFIOUnbound)
	check("GPU 0 unbound", 0, discovery.EventVFIOUnbound)
	check("GPU 1 beside it", 1, "")
	set(1, fakenode.VFIOUnbound)
	check("GPU 1 unbound", 1, discovery.EventVFIOUnbound)
	set(2, fakenode.VFIORemoved)
	check("GPU 2 removed", 2, discovery.EventVFIOGone)
	for _, i := range []int{0, 1, 2} {
		set(i, fakenode.VFIOBound)
		check("re-bound", i, "")
	}

	addr, group := gpu(3)
	dev := filepath.Join(root, discovery.SysfsPCIDevices, addr)
	if err := os.Remove(filepath.Join(dev, "driver")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../bus/pci/drivers/nvidia", filepath.Join(dev, "driver")); err != nil {
		t.Fatal(err)
	}
	if got, _ := discovery.CheckVFIODevice(root, addr, group); got.Kind != discovery.EventVFIOUnbound || got.Reason != "bound to nvidia, not vfio-pci" {
		t.Errorf("GPU 3 on nvidia: %+v", got)
	}
	set(3, fakenode.VFIOBound)
	if err := os.Remove(filepath.Join(root, "dev/vfio", strconv.Itoa(group))); err != nil {
		t.Fatal(err)
	}
	check("GPU 3 without its group's node", 3, discovery.EventVFIONoGroupNode)

	// A root whose /dev is not the host's (an unprivileged container):
	// the binding alone says.
	if err := os.Remove(filepath.Join(root, "dev/vfio/vfio")); err != nil {
		t.Fatal(err)
	}
	check("GPU 3 without the host's /dev", 3, "")
}

// BenchmarkCheckVFIODevice is one look of the VFIO probe at one GPU of the
// l40s-vfio tree: what the probe costs per GPU every period.
func BenchmarkCheckVFIODevice(b *testing.B) {
	node, err := fakenode.Named("l40s-vfio")
	if err != nil {
		b.Fatal(err)
	}
	root := b.TempDir()
	if err := node.WriteSysfs(root); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if p, bad := discovery.CheckVFIODevice(root, "0000:47:00.0", 34); bad {
			b.Fatal(p)
		}
	}
}
