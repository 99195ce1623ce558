//go:build !nonvcdi

package cdi

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// TestNVCDIOnFakeNVML runs NVIDIA's nvcdi over the fake node's NVML for
// whole GPUs, with a driver root whose device nodes are real character
// devices (nvcdi ignores plain files), which needs CAP_MKNOD. MIG devices
// are left out: nvcdi reads their capabilities from the host's /proc.
func TestNVCDIOnFakeNVML(t *testing.T) {
	n, inv := fakeInventory(t, "l40s-pcie")
	root := t.TempDir()
	if err := n.WriteDriverRoot(root); err != nil {
		t.Fatal(err)
	}
	nodes := []string{"dev/nvidiactl", "dev/nvidia-uvm"}
	for _, g := range inv.GPUs {
		nodes = append(nodes, fmt.Sprintf("dev/nvidia%d", g.Minor))
	}
	for i, p := range nodes {
		p = filepath.Join(root, p)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(195, uint32(i)))); err != nil {
			t.Skipf("cannot make character devices here (%v): nvcdi needs them", err)
		}
	}
	gen, err := NewNVCDI(NVCDIOptions{NVML: n.NVML(), DriverRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	p := planAll(inv)
	o := Options{Kind: "nvidia.com/gpu"}
	spec, err := Build(o, gen, inv, p)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := (Writer{Dir: dir}).Write(o.Kind, spec); err != nil {
		t.Fatal(err)
	}
	cache := loadCache(t, dir)
	for _, d := range p.Resources[0].Devices {
		name := o.Kind + "=" + o.DeviceName(d)
		if got, want := resolve(t, cache, name), wantNodes(t, inv, d); !slices.Equal(got, want) {
			t.Errorf("%s: device nodes %v, want %v", name, got, want)
		}
	}
	libcuda := "/usr/lib/x86_64-linux-gnu/libcuda.so." + inv.DriverVersion
	if !slices.ContainsFunc(spec.ContainerEdits.Mounts, func(m *specs.Mount) bool {
		return m.ContainerPath == libcuda && m.HostPath == filepath.Join(root, libcuda)
	}) {
		t.Errorf("nvcdi's common edits lack libcuda under the driver root: %v", spec.ContainerEdits.Mounts)
	}

	// The agent sees the host's driver root at root: host paths name the
	// host's.
	const hostRoot = "/run/nvidia/driver"
	gen, err = NewNVCDI(NVCDIOptions{NVML: n.NVML(), DriverRoot: root, HostDriverRoot: hostRoot})
	if err != nil {
		t.Fatal(err)
	}
	spec, err = Build(o, gen, inv, p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(spec.ContainerEdits.Mounts, func(m *specs.Mount) bool {
		return m.ContainerPath == libcuda && m.HostPath == hostRoot+libcuda
	}) {
		t.Errorf("with host driver root %s: mounts %v lack libcuda at %s", hostRoot, spec.ContainerEdits.Mounts, hostRoot+libcuda)
	}
	for _, d := range spec.Devices {
		for _, dn := range d.ContainerEdits.DeviceNodes {
			if want := hostRoot + dn.Path; dn.HostPath != want {
				t.Errorf("device %s: node %s has host path %q, want %q", d.Name, dn.Path, dn.HostPath, want)
			}
		}
	}
}
