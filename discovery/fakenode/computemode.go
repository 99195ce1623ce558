package fakenode

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The fake simulates compute modes: every GPU starts in DEFAULT, and
// SetComputeMode records the mode it is given, as nvidia-smi -c does on a
// real GPU, until the node is rebuilt. DenyComputeMode simulates an agent
// without the privilege NVML needs for the change.

// GetComputeMode returns the GPU's compute mode: DEFAULT until
// SetComputeMode changed it.
func (h *gpuHandle) GetComputeMode() (nvml.ComputeMode, nvml.Return) {
	n := h.gpu.node
	n.mu.RLock()
	defer n.mu.RUnlock()
	return h.gpu.computeMode, nvml.SUCCESS
}

// SetComputeMode records the GPU's compute mode; NO_PERMISSION while the
// node denies the change, INVALID_ARGUMENT for an unknown mode.
func (h *gpuHandle) SetComputeMode(mode nvml.ComputeMode) nvml.Return {
	switch mode {
	case nvml.COMPUTEMODE_DEFAULT, nvml.COMPUTEMODE_EXCLUSIVE_THREAD, nvml.COMPUTEMODE_PROHIBITED, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS:
	default:
		return nvml.ERROR_INVALID_ARGUMENT
	}
	n := h.gpu.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.computeModeDenied {
		return nvml.ERROR_NO_PERMISSION
	}
	h.gpu.computeMode = mode
	return nvml.SUCCESS
}

// DenyComputeMode makes every later SetComputeMode fail with
// NO_PERMISSION (deny true), as NVML answers a process without root or
// CAP_SYS_ADMIN, or succeed again (deny false).
func (n *Node) DenyComputeMode(deny bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.computeModeDenied = deny
}

// ComputeMode returns the compute mode of the GPU with the given NVML
// index, as tests check it.
func (n *Node) ComputeMode(index int) (nvml.ComputeMode, error) {
	g, err := n.gpuAt(index)
	if err != nil {
		return 0, fmt.Errorf("compute mode: %w", err)
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	return g.computeMode, nil
}
