package discovery

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVMLLibraryName is the file name of the NVML library the driver installs.
const NVMLLibraryName = "libnvidia-ml.so.1"

// ErrNoDriver means the NVML library could not be loaded: there is no
// NVIDIA driver on this machine (or it is not where we were told to look).
var ErrNoDriver = errors.New("no NVIDIA driver found: " + NVMLLibraryName +
	" could not be loaded; use --fake-node to try featureplug without a GPU")

// libraryDirs are where distributions and containerized drivers put NVML,
// relative to a driver root.
func libraryDirs() []string {
	return []string{
		"usr/lib64",
		"usr/lib/x86_64-linux-gnu",
		"usr/lib/aarch64-linux-gnu",
		"usr/lib",
		"lib64",
		"lib/x86_64-linux-gnu",
		"lib/aarch64-linux-gnu",
		"lib",
	}
}

// NVMLOptions says where to find the real NVML library.
type NVMLOptions struct {
	// LibraryPath is an explicit path to libnvidia-ml.so.1. It wins over
	// DriverRoot.
	LibraryPath string
	// DriverRoot is the root of the driver installation, e.g. "/" or
	// "/run/nvidia/driver" when the driver runs in a container. The library
	// is searched in the usual library directories under it.
	DriverRoot string
}

// ResolveLibrary returns the NVML library path the options select: the
// explicit path, the library found under the driver root, or the bare
// library name (searched by the dynamic loader) when neither is set.
func (o NVMLOptions) ResolveLibrary() (string, error) {
	if o.LibraryPath != "" {
		if _, err := os.Stat(o.LibraryPath); err != nil {
			return "", fmt.Errorf("NVML library %q: %w", o.LibraryPath, err)
		}
		return o.LibraryPath, nil
	}
	if o.DriverRoot == "" || o.DriverRoot == "/" {
		return NVMLLibraryName, nil
	}
	for _, dir := range libraryDirs() {
		p := filepath.Join(o.DriverRoot, dir, NVMLLibraryName)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w (searched %s under driver root %q)", ErrNoDriver, NVMLLibraryName, o.DriverRoot)
}

// OpenNVML loads and initializes the real NVML library. The returned close
// function shuts NVML down. Without a driver it returns ErrNoDriver and no
// NVML function is ever called (calling one after a failed Init aborts the
// process).
func OpenNVML(o NVMLOptions) (lib nvml.Interface, closeFn func(), err error) {
	path, err := o.ResolveLibrary()
	if err != nil {
		return nil, nil, err
	}
	lib = nvml.New(nvml.WithLibraryPath(path))
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
		return lib, func() { _ = lib.Shutdown() }, nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, nil, ErrNoDriver
	default:
		return nil, nil, initError(path, ret)
	}
}

// initError explains a failed nvmlInit: the failures an operator can fix
// (permissions, a library that does not match the driver) in one sentence.
func initError(path string, ret nvml.Return) error {
	if hint := returnHint(ret); hint != "" {
		return fmt.Errorf("initializing NVML from %s: %s (%s)", path, hint, ret.Error())
	}
	return fmt.Errorf("initializing NVML from %s: %s", path, ret.Error())
}
