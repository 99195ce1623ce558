package discovery

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// ErrComputeModeDenied is wrapped by SetComputeMode's error when NVML
// refuses the change for lack of privilege (NVML needs root or
// CAP_SYS_ADMIN) or because the GPU does not support it: the caller may
// carry on with the GPU's current mode.
var ErrComputeModeDenied = errors.New("compute mode change not permitted")

// ComputeModeName returns the name discovery reports for a compute mode
// ("Default", "ExclusiveProcess", ...; Unknown for others), as in
// GPU.ComputeMode.
func ComputeModeName(m nvml.ComputeMode) string { return computeModeName(m) }

// SetComputeMode sets the compute mode of the GPU with the given UUID
// through lib and returns the mode it had before, so that the caller can
// restore it. Setting the mode a GPU already has changes nothing. A
// refusal for lack of privilege or support wraps ErrComputeModeDenied;
// every error names the GPU, the mode and NVML's answer.
func SetComputeMode(lib nvml.Interface, uuid string, mode nvml.ComputeMode) (prev nvml.ComputeMode, err error) {
	dev, ret := lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("GPU %s: getting its NVML handle: %s", uuid, ret.Error())
	}
	prev, ret = dev.GetComputeMode()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("GPU %s: reading its compute mode: %w", uuid, computeModeError(ret))
	}
	if prev == mode {
		return prev, nil
	}
	if ret := dev.SetComputeMode(mode); ret != nvml.SUCCESS {
		return prev, fmt.Errorf("GPU %s: setting compute mode %s (was %s): %w", uuid, computeModeName(mode), computeModeName(prev), computeModeError(ret))
	}
	return prev, nil
}

// computeModeError turns an NVML return into an error, wrapping
// ErrComputeModeDenied for the refusals a caller carries on after.
func computeModeError(ret nvml.Return) error {
	msg := ret.Error()
	switch ret {
	case nvml.ERROR_NO_PERMISSION, nvml.ERROR_NOT_SUPPORTED:
		return fmt.Errorf("%w: %s", ErrComputeModeDenied, msg)
	default:
		return errors.New(msg)
	}
}
