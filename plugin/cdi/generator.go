package cdi

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/featureplug/featureplug/discovery/gpusource"
)

// DriverConfig says where the agent's CDI spec goes and where the driver
// its edits come from is.
type DriverConfig struct {
	// SpecDir is the directory the spec is written to (default
	// DefaultSpecDir, /var/run/cdi).
	SpecDir string
	// DriverRoot is the root of the driver installation NVIDIA's nvcdi
	// reads on real hardware (default "/"). With a fake node, it is where
	// the fake driver root is laid out when set; otherwise a temporary
	// directory is, and removed when the agent stops.
	DriverRoot string
	// HostDriverRoot is where DriverRoot is on the host, for the spec's
	// host paths: "/" when the agent sees the host's root at DriverRoot
	// (default: DriverRoot, mounted at the same path). Real GPUs only.
	HostDriverRoot string
	// HookPath is the nvidia-cdi-hook that the real specs' hooks run
	// (default: nvcdi's /usr/bin/nvidia-cdi-hook).
	HookPath string
}

// NewGenerator returns the Generator of the GPU source src: nvcdi over a
// real node's NVML, a fake driver root (FakeRoot) for a fake node, laid
// out in c.DriverRoot or a temporary directory that cleanup removes.
func NewGenerator(src any, c DriverConfig, log *slog.Logger) (gen Generator, cleanup func(), err error) {
	switch src := src.(type) {
	case *gpusource.Fake:
		dir, cleanup := c.DriverRoot, func() {}
		if dir == "" || dir == "/" {
			tmp, err := os.MkdirTemp("", "featureplug-fake-driver-root-")
			if err != nil {
				return nil, nil, fmt.Errorf("fake driver root: %w", err)
			}
			dir, cleanup = tmp, func() { _ = os.RemoveAll(tmp) }
		}
		log.Info("CDI specs come from a fake driver root", "driverRoot", dir)
		return FakeRoot{Dir: dir, Layout: func(dir string) error { return src.Node().WriteDriverRoot(dir) }}, cleanup, nil
	case *gpusource.Real:
		gen, err := NewNVCDIGenerator(NVCDIOptions{NVML: src.NVML(), DriverRoot: c.DriverRoot,
			HostDriverRoot: c.HostDriverRoot, HookPath: c.HookPath, Logger: log})
		if err != nil {
			return nil, nil, err
		}
		return gen, func() {}, nil
	default:
		return nil, nil, fmt.Errorf("CDI specs: GPU source %T has no driver root", src)
	}
}
