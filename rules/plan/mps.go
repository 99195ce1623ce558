package plan

import (
	"path/filepath"
	"strings"
)

// DefaultMPSRoot is the default root of the MPS control daemons'
// directories (MPSLayout.Root).
const DefaultMPSRoot = "/run/featureplug/mps"

// The environment of MPS clients, set by the mps strategy's container edits.
const (
	// EnvMPSPipeDirectory points MPS clients (and the daemon) at the
	// daemon's pipe directory.
	EnvMPSPipeDirectory = "CUDA_MPS_PIPE_DIRECTORY"
	// EnvMPSActiveThreadPercentage limits a client's share of the SMs.
	EnvMPSActiveThreadPercentage = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	// EnvMPSPinnedDeviceMemLimit limits a client's device memory, as a
	// comma-separated list of <device ordinal>=<limit> (NVIDIA's MPS
	// documentation, "Memory limits").
	EnvMPSPinnedDeviceMemLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
)

// MPSLayout is the one layout of the MPS control daemons' directories on
// the host: <Root>/<resource with '/' as '_'>/{pipe,log}. The MPS
// supervisor starts each daemon there and the device plugin mounts the pipe
// directory into containers; both are given the same MPSLayout.
type MPSLayout struct {
	// Root holds one directory per MPS resource (default DefaultMPSRoot).
	Root string
}

// ResourceDir returns <Root>/<resource with '/' as '_'>. Extended resource
// names have a DNS-subdomain prefix, which holds no '_', so the mapping is
// one-to-one.
func (l MPSLayout) ResourceDir(resource string) string {
	return filepath.Join(l.Root, strings.ReplaceAll(resource, "/", "_"))
}

// PipeDir returns the pipe directory of resource's daemon: clients need it
// in EnvMPSPipeDirectory.
func (l MPSLayout) PipeDir(resource string) string {
	return filepath.Join(l.ResourceDir(resource), "pipe")
}

// LogDir returns the log directory of resource's daemon.
func (l MPSLayout) LogDir(resource string) string {
	return filepath.Join(l.ResourceDir(resource), "log")
}
