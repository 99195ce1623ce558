package cdi

import (
	"log/slog"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVCDIOptions configure NewNVCDI.
type NVCDIOptions struct {
	// NVML is the initialized NVML the agent discovers with.
	NVML nvml.Interface
	// DriverRoot is the root of the driver installation ("/" or a driver
	// container's root such as /run/nvidia/driver).
	DriverRoot string
	// DevRoot is the root of the device nodes (default DriverRoot).
	DevRoot string
	// HostDriverRoot is where DriverRoot is on the host, which is what the
	// spec's host paths must name: "/" when the agent sees the host's root
	// at DriverRoot (say /host). Default: DriverRoot (mounted at the same
	// path).
	HostDriverRoot string
	// HookPath is the nvidia-cdi-hook the specs' hooks run, as a host
	// path (default: nvcdi's, /usr/bin/nvidia-cdi-hook).
	HookPath string
	// Logger receives nvcdi's messages (default: discarded).
	Logger *slog.Logger
}
