package cdi

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// Paths of a driver root, relative to it.
const (
	// migMinorsFile lists the device minor of every MIG capability.
	migMinorsFile = "proc/driver/nvidia-caps/mig-minors"
	// migCapDevice is the device node of a MIG capability, by minor.
	migCapDevice = "dev/nvidia-caps/nvidia-cap%d"
	// gpuDevice is the device node of a GPU, by minor.
	gpuDevice = "dev/nvidia%d"
)

// Where Root looks for the driver's files, relative to the root, and
// which it takes: the files nvidia-ctk cdi generate mounts for compute
// (libraries, tools), and the control device nodes every GPU needs.
var (
	rootLibDirs     = []string{"usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/lib", "lib/x86_64-linux-gnu", "lib64"}
	rootLibPatterns = []string{"libcuda.so.*", "libcudadebugger.so.*", "libnvidia-ml.so.*", "libnvidia-ptxjitcompiler.so.*", "libnvidia-nvvm.so.*", "libnvidia-opencl.so.*", "libnvidia-cfg.so.*", "libnvidia-gpucomp.so.*"}
	rootBinDirs     = []string{"usr/bin", "usr/sbin", "bin"}
	rootTools       = []string{"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"}
	rootControl     = []string{"dev/nvidiactl", "dev/nvidia-uvm", "dev/nvidia-uvm-tools", "dev/nvidia-modeset"}
	// rootRequired are the control devices a GPU cannot be used without.
	rootRequired = []string{"dev/nvidiactl"}
	// mountOptions are those nvidia-ctk gives the driver's files.
	mountOptions = []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}
)

// Root finds the container edits in a driver root laid out in files: the
// device nodes dev/nvidia<minor>, dev/nvidiactl, dev/nvidia-uvm{,-tools},
// the MIG capability nodes dev/nvidia-caps/nvidia-cap<minor> numbered by
// proc/driver/nvidia-caps/mig-minors, and the driver's libraries and tools.
// The fake node lays one out (fakenode.WriteDriverRoot); the edits have the
// shape of nvidia-ctk cdi generate's without its hooks (the fake root has
// no nvidia-cdi-hook to run). Host paths are under the root; container
// paths are the paths relative to it. A device node that is missing is an
// error: a spec must not name what is not there.
type Root struct {
	// Dir is the driver root.
	Dir string
}

var _ Generator = Root{}

// Edits implements Generator.
func (r Root) Edits(inv *discovery.Inventory, devs []plan.Device) (Edits, error) {
	if r.Dir == "" {
		return Edits{}, errors.New("driver root: empty path")
	}
	common, err := r.common()
	if err != nil {
		return Edits{}, err
	}
	out := Edits{Common: common, Devices: make(map[string]specs.ContainerEdits, len(devs))}
	var minors map[string]int
	for _, d := range devs {
		gpu, ok := inv.GPUByUUID(d.GPUUUID)
		if !ok {
			return Edits{}, fmt.Errorf("device %s: GPU %s is not in the inventory", d.ID, d.GPUUUID)
		}
		nodes := []string{fmt.Sprintf(gpuDevice, gpu.Minor)}
		if d.Kind == plan.DeviceMIG {
			mig, ok := findMIG(gpu, d.ID)
			if !ok {
				return Edits{}, fmt.Errorf("device %s: not a MIG device of GPU %d in the inventory", d.ID, gpu.Index)
			}
			if minors == nil {
				if minors, err = r.migMinors(); err != nil {
					return Edits{}, err
				}
			}
			for _, c := range []string{
				fmt.Sprintf("gpu%d/gi%d/access", gpu.Minor, mig.GPUInstanceID),
				fmt.Sprintf("gpu%d/gi%d/ci%d/access", gpu.Minor, mig.GPUInstanceID, mig.ComputeInstanceID),
			} {
				m, ok := minors[c]
				if !ok {
					return Edits{}, fmt.Errorf("device %s: MIG capability %s is not in %s", d.ID, c, r.path(migMinorsFile))
				}
				nodes = append(nodes, fmt.Sprintf(migCapDevice, m))
			}
		}
		var e specs.ContainerEdits
		for _, n := range nodes {
			if !r.exists(n) {
				return Edits{}, fmt.Errorf("device %s: device node %s is missing", d.ID, r.path(n))
			}
			e.DeviceNodes = append(e.DeviceNodes, r.deviceNode(n))
		}
		out.Devices[d.ID] = e
	}
	return out, nil
}

// common returns the edits every device needs.
func (r Root) common() (specs.ContainerEdits, error) {
	e := specs.ContainerEdits{Env: []string{"NVIDIA_VISIBLE_DEVICES=void"}}
	for _, n := range rootRequired {
		if !r.exists(n) {
			return e, fmt.Errorf("driver root %s: device node %s is missing", r.Dir, n)
		}
	}
	for _, n := range rootControl {
		if r.exists(n) {
			e.DeviceNodes = append(e.DeviceNodes, r.deviceNode(n))
		}
	}
	var files []string
	for _, dir := range rootLibDirs {
		for _, p := range rootLibPatterns {
			m, err := filepath.Glob(filepath.Join(r.Dir, filepath.FromSlash(dir), p))
			if err != nil {
				return e, fmt.Errorf("driver root %s: %w", r.Dir, err)
			}
			for _, f := range m {
				rel, _ := filepath.Rel(r.Dir, f)
				files = append(files, filepath.ToSlash(rel))
			}
		}
	}
	slices.Sort(files)
	for _, t := range rootTools {
		for _, dir := range rootBinDirs {
			if p := path.Join(dir, t); r.exists(p) {
				files = append(files, p)
				break
			}
		}
	}
	for _, f := range files {
		e.Mounts = append(e.Mounts, &specs.Mount{
			HostPath:      r.path(f),
			ContainerPath: "/" + f,
			Options:       mountOptions,
		})
	}
	return e, nil
}

// migMinors reads the MIG capability minors, by capability name.
func (r Root) migMinors() (map[string]int, error) {
	f, err := os.Open(r.path(migMinorsFile))
	if err != nil {
		return nil, fmt.Errorf("MIG capability minors: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only: a close error loses nothing
	out := map[string]int{}
	s := bufio.NewScanner(f)
	for line := 1; s.Scan(); line++ {
		name, minor, ok := strings.Cut(strings.TrimSpace(s.Text()), " ")
		if !ok {
			continue
		}
		m, err := strconv.Atoi(minor)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: minor %q: %w", f.Name(), line, minor, err)
		}
		out[name] = m
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name(), err)
	}
	return out, nil
}

func (r Root) path(rel string) string { return filepath.Join(r.Dir, filepath.FromSlash(rel)) }

func (r Root) exists(rel string) bool {
	_, err := os.Stat(r.path(rel))
	return err == nil || !errors.Is(err, fs.ErrNotExist)
}

// deviceNode is the CDI device node of rel: /rel in the container, the
// root's file on the host.
func (r Root) deviceNode(rel string) *specs.DeviceNode {
	n := &specs.DeviceNode{Path: "/" + rel}
	if hp := r.path(rel); hp != n.Path {
		n.HostPath = hp
	}
	return n
}

// findMIG returns the MIG device with the given UUID of gpu.
func findMIG(gpu *discovery.GPU, uuid string) (*discovery.MIGDevice, bool) {
	for i := range gpu.MIGDevices {
		if gpu.MIGDevices[i].UUID == uuid {
			return &gpu.MIGDevices[i], true
		}
	}
	return nil, false
}
