package fakenode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// A driver root as the NVIDIA driver lays it out on a host, for tests and
// demos that need files, not only NVML: CDI spec generation reads device
// nodes, the MIG capability minors and the driver's libraries from it.
const (
	// DriverRootLibDir is where the driver's libraries go, relative to
	// the root (Debian and Ubuntu's multiarch directory).
	DriverRootLibDir = "usr/lib/x86_64-linux-gnu"
	// DriverRootBinDir is where the driver's tools go.
	DriverRootBinDir = "usr/bin"
	// MIGMinorsFile lists the device minor of every MIG capability, as
	// /proc/driver/nvidia-caps/mig-minors does.
	MIGMinorsFile = "proc/driver/nvidia-caps/mig-minors"
	// migCapsDevDir holds the MIG capability device nodes.
	migCapsDevDir = "dev/nvidia-caps"
	// migMaxGPUInstances and migMaxComputeInstances are the GPU and
	// compute instance IDs the driver lists capabilities for, per GPU
	// (gi0-gi14, ci0-ci7).
	migMaxGPUInstances     = 15
	migMaxComputeInstances = 8
)

// driverLibraries are the libraries (name stems) and tools a fake driver
// root holds; libraries get the driver version as suffix.
var (
	driverLibraries = []string{"libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so", "libnvidia-nvvm.so", "libcudadebugger.so"}
	driverTools     = []string{"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"}
	// controlDevices are the device nodes shared by all GPUs.
	controlDevices = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}
)

// MIGCapMinor returns the device minor of a MIG capability as the driver
// numbers them in mig-minors: "config" 1, "monitor" 2, then per GPU and
// GPU instance the instance's access capability followed by its compute
// instances' (gpu0/gi0/access 3, gpu0/gi0/ci0/access 4, ...,
// gpu0/gi1/access 12). ci < 0 gives the GPU instance's capability.
func MIGCapMinor(gpu, gi, ci int) int {
	base := 3 + (gpu*migMaxGPUInstances+gi)*(1+migMaxComputeInstances)
	if ci < 0 {
		return base
	}
	return base + 1 + ci
}

// WriteDriverRoot lays out a fake driver root for the node in dir, as the
// driver does on a host: device nodes dev/nvidia<minor> (the minor is the
// GPU index, as GetMinorNumber says), dev/nvidiactl, dev/nvidia-uvm,
// dev/nvidia-uvm-tools and dev/nvidia-caps/nvidia-cap<minor> for every MIG
// capability of the node's GPUs, the mig-minors file listing them
// (MIGMinorsFile), and the driver's libraries (<name>.so.<driver version>)
// and tools as empty stub files.
//
// Device nodes are character devices with the numbers of /dev/null when
// the process may make device nodes (root), so that a container runtime
// injecting a CDI spec made from the root creates them in the container
// (it refuses a device node that is a plain file), and a process that
// opens one reads nothing; otherwise they are plain empty files, enough to
// generate specs.
//
// It can be called again for the same dir (e.g. after the node changed):
// it adds what is missing, turns plain device-node files into device
// nodes where it may, and rewrites the mig-minors file; files of an
// earlier driver version stay.
func (n *Node) WriteDriverRoot(dir string) error {
	if dir == "" {
		return errors.New("fake driver root: empty directory")
	}
	var nodes, files []string
	for i := range n.gpus {
		nodes = append(nodes, fmt.Sprintf("dev/nvidia%d", i))
	}
	for _, d := range controlDevices {
		nodes = append(nodes, "dev/"+d)
	}
	var minors strings.Builder
	minors.WriteString("config 1\nmonitor 2\n")
	for g := range n.gpus {
		for gi := range migMaxGPUInstances {
			m := MIGCapMinor(g, gi, -1)
			fmt.Fprintf(&minors, "gpu%d/gi%d/access %d\n", g, gi, m)
			nodes = append(nodes, fmt.Sprintf("%s/nvidia-cap%d", migCapsDevDir, m))
			for ci := range migMaxComputeInstances {
				m := MIGCapMinor(g, gi, ci)
				fmt.Fprintf(&minors, "gpu%d/gi%d/ci%d/access %d\n", g, gi, ci, m)
				nodes = append(nodes, fmt.Sprintf("%s/nvidia-cap%d", migCapsDevDir, m))
			}
		}
	}
	nodes = append(nodes, migCapsDevDir+"/nvidia-cap1", migCapsDevDir+"/nvidia-cap2")
	mknod := true
	for _, f := range nodes {
		var err error
		if mknod, err = deviceNode(filepath.Join(dir, filepath.FromSlash(f)), mknod); err != nil {
			return fmt.Errorf("fake driver root of node %s: %w", n.spec.Name, err)
		}
	}
	for _, l := range driverLibraries {
		files = append(files, DriverRootLibDir+"/"+l+"."+n.spec.DriverVersion)
	}
	for _, t := range driverTools {
		files = append(files, DriverRootBinDir+"/"+t)
	}
	for _, f := range files {
		if err := touch(filepath.Join(dir, filepath.FromSlash(f))); err != nil {
			return fmt.Errorf("fake driver root of node %s: %w", n.spec.Name, err)
		}
	}
	p := filepath.Join(dir, filepath.FromSlash(MIGMinorsFile))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("fake driver root of node %s: %w", n.spec.Name, err)
	}
	if err := os.WriteFile(p, []byte(minors.String()), 0o644); err != nil {
		return fmt.Errorf("fake driver root of node %s: %w", n.spec.Name, err)
	}
	return nil
}

// touch creates an empty file (and its directories) unless it exists.
func touch(p string) error {
	if _, err := os.Stat(p); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, nil, 0o644)
}

// deviceNode makes p a character device with /dev/null's numbers when
// mknod is true and the process may, replacing a plain file left by an
// earlier run that could not; else it touches p. It returns whether the
// next node should be tried with mknod: false once the kernel refused, so
// a process without CAP_MKNOD does not ask again for every node.
func deviceNode(p string, mknod bool) (bool, error) {
	fi, err := os.Lstat(p)
	switch {
	case err == nil && fi.Mode()&fs.ModeCharDevice != 0:
		return mknod, nil
	case err == nil && !fi.Mode().IsRegular():
		return mknod, fmt.Errorf("%s: neither a device node nor a plain file (%s)", p, fi.Mode().Type())
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return mknod, err
	}
	if !mknod {
		return false, touch(p)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return mknod, err
	}
	made, err := mknodNull(p)
	if err != nil {
		return mknod, err
	}
	if !made {
		return false, touch(p)
	}
	return true, nil
}
