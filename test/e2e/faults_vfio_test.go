package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestFault25VFIOUnbound: a GPU on vfio-pci that an operator unbinds (echo
// into vfio-pci's unbind: its driver link and its group's /dev/vfio node
// go) is Unhealthy within the VFIO probe's period, through a re-discovery
// too (its driver_override still names vfio-pci, so it stays in the plan);
// one removed from the PCI bus is Unhealthy the same way; bound again, it
// is Healthy, all four allocatable (probe period 1 s).
func TestFault25VFIOUnbound(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug against the kubelet's device manager")
	}
	peer, sysfs, a := startVFIOKubelet(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	const gpu = "0000:77:00.0"
	bus := filepath.Join(sysfs, "sys/bus/pci/devices", gpu)
	driver := filepath.Join(bus, "driver")
	node := filepath.Join(sysfs, "dev/vfio", vfioGroups[gpu])
	target, err := os.Readlink(driver)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// waitAllocatable waits until n of the four are allocatable (the
	// kubelet counts only Healthy devices) and says how long it took.
	waitAllocatable := func(step string, n int64, since time.Time) {
		t.Helper()
		if err := peer.WaitCapacity(ctx, vfioL40S, 4, n); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		_, listed := peer.Devices(vfioL40S)[gpu]
		if listed != (n == 4) {
			t.Errorf("%s: %s allocatable: %v", step, gpu, listed)
		}
		t.Logf("%s: %d allocatable after %v", step, n, time.Since(since).Round(time.Millisecond))
	}

	start := time.Now()
	must(os.Remove(driver))
	must(os.Remove(node))
	waitAllocatable("unbound", 3, start)
	discoveries := a.metric(t, "featureplug_discoveries_total", `result="ok"`)
	a.hup(t)
	if err := waitFor(ctx, func() (bool, string) {
		n := a.metric(t, "featureplug_discoveries_total", `result="ok"`)
		return n > discoveries, "no re-discovery after SIGHUP"
	}); err != nil {
		t.Fatal(err)
	}
	waitAllocatable("unbound, re-discovered", 3, start)
	gfdWaitLog(t, a, "devices Unhealthy while a condition lasts", gpu+": bound to no driver")

	start = time.Now()
	must(os.Symlink(target, driver))
	must(os.WriteFile(node, nil, 0o644))
	waitAllocatable("bound again", 4, start)

	start = time.Now()
	gone := bus + ".removed"
	must(os.Rename(bus, gone))
	waitAllocatable("removed from the bus", 3, start)
	start = time.Now()
	must(os.Rename(gone, bus))
	waitAllocatable("back on the bus", 4, start)
}
