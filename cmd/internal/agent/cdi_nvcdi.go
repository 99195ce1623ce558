//go:build !nonvcdi

package agent

import (
	"log/slog"

	"github.com/featureplug/featureplug/plugin/cdi"
)

// newNVCDIGenerator makes the CDI edits of real GPUs with NVIDIA's nvcdi.
// Building with -tags nonvcdi leaves nvcdi (and its dependencies) out of
// the binary; see cdi_nonvcdi.go.
func newNVCDIGenerator(src *RealSource, c CDIConfig, log *slog.Logger) (cdi.Generator, error) {
	return cdi.NewNVCDI(cdi.NVCDIOptions{
		NVML: src.lib, DriverRoot: c.DriverRoot, HostDriverRoot: c.HostDriverRoot, HookPath: c.HookPath, Logger: log,
	})
}
