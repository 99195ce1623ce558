package main

import (
	"context"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/discovery/gpusource"
)

// sourceFlags select where GPUs are read from: the real NVML library or a
// fake node.
type sourceFlags struct {
	fakeNode    string
	driverRoot  string
	nvmlLibrary string
	sysfsRoot   string
}

func (s *sourceFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&s.fakeNode, "fake-node", "",
		"read GPUs from a fake node instead of NVML: a bundled name ("+bundledNodeList()+") or a YAML file")
	fs.StringVar(&s.driverRoot, "driver-root", "/",
		"root of the NVIDIA driver installation, where libnvidia-ml.so.1 is searched (e.g. /run/nvidia/driver)")
	fs.StringVar(&s.nvmlLibrary, "nvml-library", "",
		"explicit path to libnvidia-ml.so.1 (wins over --driver-root)")
	fs.StringVar(&s.sysfsRoot, "sysfs-root", "/",
		"root under which the host's /sys and /dev are read: GPUs bound to vfio-pci, NUMA nodes NVML does not report (e.g. /host); with --fake-node, where the fake node lays out its sysfs tree (default: a temporary directory)")
}

func bundledNodeList() string {
	names := fakenode.BundledNames()
	out := ""
	for i, n := range names {
		if i > 0 {
			out += ", "
		}
		out += n
	}
	return out
}

// open opens the GPU source the flags select: a fake node or the real
// NVML library. The caller must Close it.
func (s sourceFlags) open() (agentconfig.GPUSource, error) {
	if s.fakeNode != "" {
		var opts []gpusource.FakeOption
		if s.sysfsRoot != "" && s.sysfsRoot != "/" {
			opts = append(opts, gpusource.WithFakeSysfsRoot(s.sysfsRoot))
		}
		if s.driverRoot != "" && s.driverRoot != "/" {
			// The fake driver keeps its MIG devices across restarts,
			// as a real one does while the machine is up.
			opts = append(opts, gpusource.WithFakeMIGState(filepath.Join(s.driverRoot, fakenode.MIGStateFile)))
		}
		return gpusource.OpenFake(s.fakeNode, opts...)
	}
	return gpusource.OpenReal(discovery.NVMLOptions{LibraryPath: s.nvmlLibrary, DriverRoot: s.driverRoot}, s.sysfsRoot)
}

// discoverInventory opens the source, reads the Inventory once, with the
// MIG geometry of its GPUs (what rules that partition GPUs on demand plan
// from, and what `discover` shows), and closes the source again.
func discoverInventory(ctx context.Context, s sourceFlags) (*discovery.Inventory, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	src, err := s.open()
	if err != nil {
		return nil, err
	}
	defer src.Close()
	inv, lib, err := src.Discover()
	if err != nil {
		return nil, err
	}
	if err := discovery.ReadMIGGeometry(lib, inv); err != nil {
		return nil, err
	}
	return inv, nil
}
