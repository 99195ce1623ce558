package mps

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/featureplug/featureplug/rules/plan"
)

// maxSocketPath is the longest unix socket path Linux accepts: sun_path
// holds 108 bytes including the terminating NUL. The daemon listens on
// <pipe dir>/control.
const maxSocketPath = 107

// controlSocket is the name of the daemon's socket in its pipe directory.
const controlSocket = "control"

// Daemon is what one MPS-shared resource needs from its control daemon.
type Daemon struct {
	// Resource is the extended resource name, e.g. "nvidia.com/gpu.shared".
	Resource string
	// Devices are the GPUs the daemon serves.
	Devices []Device
	// ActiveThreadPercentage is the default share of the SMs of every
	// client, 1..100; 0 leaves the daemon's default (100).
	ActiveThreadPercentage int
}

// Device is one GPU of a Daemon.
type Device struct {
	// UUID is the GPU UUID ("GPU-...").
	UUID string
	// Index is the GPU's NVML index; it orders the devices.
	Index int
	// PinnedMemoryLimitMiB is the default device memory limit of every
	// client on this GPU; 0 sets no limit.
	PinnedMemoryLimitMiB uint64
}

// normalized returns a copy of d with its devices ordered by index and
// UUID, so that two Daemons listing the same devices compare equal.
func (d Daemon) normalized() Daemon {
	d.Devices = slices.Clone(d.Devices)
	slices.SortFunc(d.Devices, func(a, b Device) int {
		return cmp.Or(cmp.Compare(a.Index, b.Index), strings.Compare(a.UUID, b.UUID))
	})
	return d
}

// equal reports whether two normalized Daemons need the same daemon.
func (d Daemon) equal(o Daemon) bool {
	return d.Resource == o.Resource && d.ActiveThreadPercentage == o.ActiveThreadPercentage &&
		slices.Equal(d.Devices, o.Devices)
}

// uuids returns the device UUIDs in order.
func (d Daemon) uuids() []string {
	out := make([]string, len(d.Devices))
	for i, dev := range d.Devices {
		out[i] = dev.UUID
	}
	return out
}

// validateDaemons checks a whole Apply: every error names the field path
// (daemons[i].devices[j].uuid) and the offending value.
func validateDaemons(daemons []Daemon) error {
	var errs []error
	seen := make(map[string]int, len(daemons))
	for i, d := range daemons {
		path := fmt.Sprintf("daemons[%d]", i)
		if err := validateResource(d.Resource); err != nil {
			errs = append(errs, fmt.Errorf("%s.resource: %w", path, err))
		} else if j, dup := seen[d.Resource]; dup {
			errs = append(errs, fmt.Errorf("%s.resource: %q is already daemons[%d]", path, d.Resource, j))
		} else {
			seen[d.Resource] = i
		}
		if d.ActiveThreadPercentage < 0 || d.ActiveThreadPercentage > 100 {
			errs = append(errs, fmt.Errorf("%s.activeThreadPercentage: %d is outside 0..100", path, d.ActiveThreadPercentage))
		}
		if len(d.Devices) == 0 {
			errs = append(errs, fmt.Errorf("%s.devices: no devices for resource %q", path, d.Resource))
		}
		uuids := make(map[string]int, len(d.Devices))
		for j, dev := range d.Devices {
			switch k, dup := uuids[dev.UUID]; {
			case strings.TrimSpace(dev.UUID) == "" || strings.ContainsAny(dev.UUID, ", \t\n"):
				errs = append(errs, fmt.Errorf("%s.devices[%d].uuid: %q is not a device UUID", path, j, dev.UUID))
			case dup:
				errs = append(errs, fmt.Errorf("%s.devices[%d].uuid: %q is already devices[%d]", path, j, dev.UUID, k))
			default:
				uuids[dev.UUID] = j
			}
			if dev.Index < 0 {
				errs = append(errs, fmt.Errorf("%s.devices[%d].index: %d is negative", path, j, dev.Index))
			}
		}
	}
	return errors.Join(errs...)
}

// validateResource checks that a resource name is an extended resource
// name (plan.ValidateResourceName), which maps to one directory below the
// MPS root.
func validateResource(name string) error {
	return plan.ValidateResourceName(name)
}

// checkSocketPath reports a pipe directory too long for the daemon's unix
// socket, which the daemon would fail to create.
func checkSocketPath(pipeDir string) error {
	if p := filepath.Join(pipeDir, controlSocket); len(p) > maxSocketPath {
		return fmt.Errorf("pipe directory %s is too long for the daemon's socket %s (%d bytes, limit %d)", pipeDir, p, len(p), maxSocketPath)
	}
	return nil
}
