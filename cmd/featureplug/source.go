package main

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/pflag"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
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
		"root under which /sys is read for NUMA nodes NVML does not report")
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

// gpuSource is an opened NVML: the real library or a fake node.
type gpuSource struct {
	lib   nvml.Interface
	fake  *fakenode.Node // nil with the real library
	close func()
	flags sourceFlags
}

// openSource opens the NVML the flags select. The caller must call close.
func (s sourceFlags) open() (*gpuSource, error) {
	if s.fakeNode != "" {
		node, err := fakenode.Open(s.fakeNode)
		if err != nil {
			return nil, err
		}
		lib := node.NVML()
		if ret := lib.Init(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("initializing fake node %s: %s", node.Name(), ret.Error())
		}
		return &gpuSource{lib: lib, fake: node, close: func() { _ = lib.Shutdown() }, flags: s}, nil
	}
	lib, closeFn, err := discovery.OpenNVML(discovery.NVMLOptions{LibraryPath: s.nvmlLibrary, DriverRoot: s.driverRoot})
	if err != nil {
		return nil, err
	}
	return &gpuSource{lib: lib, close: closeFn, flags: s}, nil
}

// discover reads the Inventory through the source.
func (g *gpuSource) discover() (*discovery.Inventory, error) {
	return discovery.Discover(g.lib, discovery.WithSysfsRoot(g.flags.sysfsRoot))
}

// discoverInventory opens the source, reads the Inventory once and closes
// the source again.
func discoverInventory(ctx context.Context, s sourceFlags) (*discovery.Inventory, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	src, err := s.open()
	if err != nil {
		return nil, err
	}
	defer src.close()
	return src.discover()
}
