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

// MPSShmContainerPath is where MPS clients get the shared memory directory
// (MPSLayout.ShmDir): the MPS server and its clients talk through POSIX
// shared memory, so they must see the same /dev/shm.
const MPSShmContainerPath = "/dev/shm"

// MPSLayout is the one layout of the MPS control daemons' directories on
// the host: <Root>/<resource with '/' as '_'>/{pipe,log}, and <Root>/shm,
// the shared memory directory of all the daemons and their clients. The MPS
// supervisor starts each daemon there and the device plugin mounts the pipe
// and shm directories into containers; both are given the same MPSLayout.
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

// ShmDir returns the shared memory directory of the MPS daemons and their
// clients, mounted at MPSShmContainerPath in every MPS client. It is one
// directory for all resources, as in NVIDIA's device plugin: the daemons
// are children of one agent and share its /dev/shm.
func (l MPSLayout) ShmDir() string {
	return filepath.Join(l.Root, "shm")
}
