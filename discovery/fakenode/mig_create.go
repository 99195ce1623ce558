package fakenode

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/migplace"
)

// migControl is a GPU's MIG state besides its instances: the pending MIG
// mode and what stands in the way of a mode change. Guarded by node.mu.
type migControl struct {
	// pending is the MIG mode the GPU takes at its next activation (a
	// successful SetMigMode or a reset); it equals the current mode when
	// nothing is pending.
	pending bool
	// inUse: a process other than the caller holds the GPU (a CUDA
	// application, a monitoring daemon), so it cannot be reset or have
	// its MIG mode changed (Node.SetInUse).
	inUse bool
	// resetUnavailable: the GPU cannot be reset from the host, as in a
	// pass-through VM (Node.SetResetUnavailable).
	resetUnavailable bool
	// generation counts the MIG devices created at run time (migUUID).
	generation uint64
}

// modeChangeNeedsReset reports whether the GPU's MIG mode changes only
// through a GPU reset (Ampere).
func (g *gpu) modeChangeNeedsReset() bool {
	return migplace.ModeChangeNeedsReset(g.product.ccMajor)
}

// nextGenerationLocked returns the generation of a MIG device being
// created: 0 while the node's file is being built, a new one after. The
// caller holds node.mu for writing.
func (g *gpu) nextGenerationLocked() uint64 {
	if !g.node.running {
		return 0
	}
	g.migCtl.generation++
	return g.migCtl.generation
}

// GetMigMode returns the current and the pending MIG mode. They differ
// while a mode change waits for the GPU to become idle (or, on Ampere, to
// be reset).
func (h *gpuHandle) GetMigMode() (int, int, nvml.Return) {
	if !h.gpu.product.migCapable() {
		return 0, 0, nvml.ERROR_NOT_SUPPORTED
	}
	n := h.gpu.node
	n.mu.RLock()
	defer n.mu.RUnlock()
	return migModeValue(h.gpu.migEnabled), migModeValue(h.gpu.migCtl.pending), nvml.SUCCESS
}

func migModeValue(enabled bool) int {
	if enabled {
		return nvml.DEVICE_MIG_ENABLE
	}
	return nvml.DEVICE_MIG_DISABLE
}

// SetMigMode sets the MIG mode as nvmlDeviceSetMigMode does, returning
// (activationStatus, return) in go-nvml's order. The mode is recorded as
// pending and then activated:
//
//   - on Ampere the activation is a GPU reset the driver attempts itself:
//     activationStatus is ERROR_IN_USE while a process holds the GPU and
//     ERROR_RESET_REQUIRED where the host cannot reset it (a pass-through
//     VM); the mode then stays pending until a reset (Node.ResetGPU), and
//     a successful activation has a reset's effects (pending row
//     remappings and retired pages take effect, the recovery action is
//     none);
//   - from Hopper on no reset is needed: the mode changes at once unless
//     a process holds the GPU (activationStatus ERROR_IN_USE, the mode
//     pending until it is set again on an idle GPU, or a reset).
//
// Disabling MIG while GPU instances exist is ERROR_IN_USE and changes
// nothing; a lost GPU answers ERROR_GPU_IS_LOST.
func (h *gpuHandle) SetMigMode(mode int) (nvml.Return, nvml.Return) {
	if !h.gpu.product.migCapable() {
		return nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED
	}
	if mode != nvml.DEVICE_MIG_ENABLE && mode != nvml.DEVICE_MIG_DISABLE {
		return nvml.ERROR_INVALID_ARGUMENT, nvml.ERROR_INVALID_ARGUMENT
	}
	g := h.gpu
	n := g.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if g.faults.lost {
		return nvml.ERROR_GPU_IS_LOST, nvml.ERROR_GPU_IS_LOST
	}
	if mode == nvml.DEVICE_MIG_DISABLE && len(g.gis) > 0 {
		return nvml.ERROR_IN_USE, nvml.ERROR_IN_USE
	}
	snap := g.snapshotLocked()
	activation := g.setMigModeLocked(mode == nvml.DEVICE_MIG_ENABLE)
	if !snap.commitLocked() {
		return nvml.ERROR_UNKNOWN, nvml.ERROR_UNKNOWN
	}
	return activation, nvml.SUCCESS
}

// setMigModeLocked records the MIG mode asked for as pending and
// activates it where it can, returning the activation status. The caller
// holds node.mu for writing.
func (g *gpu) setMigModeLocked(enable bool) nvml.Return {
	g.migCtl.pending = enable
	if g.migCtl.pending == g.migEnabled {
		return nvml.SUCCESS
	}
	if g.migCtl.inUse {
		return nvml.ERROR_IN_USE
	}
	if g.modeChangeNeedsReset() {
		if g.migCtl.resetUnavailable {
			return nvml.ERROR_RESET_REQUIRED
		}
		g.resetLocked()
		return nvml.SUCCESS
	}
	g.migEnabled = g.migCtl.pending
	return nvml.SUCCESS
}

// resetLocked resets the GPU as nvidia-smi --gpu-reset does: the pending
// MIG mode takes effect, the recovery action is none again, pending
// retired pages and row remappings take effect (a failed remapping stays
// failed), the volatile ECC count and the NVLink recovery failures are
// zero, the links are up and a lost GPU answers again. The caller holds
// node.mu for writing.
func (g *gpu) resetLocked() {
	g.migEnabled = g.migCtl.pending
	g.faults = gpuFaults{}
	g.health.RecoveryAction = ""
	g.health.RetiredPagesPending = false
	g.health.RowRemapPending = false
	if g.health.VolatileDoubleBitErrors != nil {
		zero := 0
		g.health.VolatileDoubleBitErrors = &zero
	}
}

// SetInUse says that a process other than featureplug holds the device
// with the given UUID (inUse true) or no longer does: on a GPU, a CUDA
// application or a monitoring daemon, which keeps NVML from changing its
// MIG mode (SetMigMode's activation answers ERROR_IN_USE) and ResetGPU
// from resetting it; on a MIG device, a CUDA application, which keeps its
// compute instance from being destroyed (ERROR_IN_USE).
func (n *Node) SetInUse(uuid string, inUse bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, g := range n.gpus {
		if g.uuid == uuid {
			g.migCtl.inUse = inUse
			return nil
		}
		for _, ci := range g.computeInstancesLocked() {
			if ci.uuid == uuid {
				ci.inUse = inUse
				return nil
			}
		}
	}
	return fmt.Errorf("fake node %s has no GPU or MIG device %s", n.Name(), uuid)
}

// SetResetUnavailable makes GPU gpuIndex one the host cannot reset
// (unavailable true), as a GPU passed through to a VM: an Ampere GPU's MIG
// mode change then answers activationStatus ERROR_RESET_REQUIRED and stays
// pending (a VM reboot activates it on real hardware; ResetGPU here).
func (n *Node) SetResetUnavailable(gpuIndex int, unavailable bool) error {
	return n.withGPU(gpuIndex, func(g *gpu) error {
		g.migCtl.resetUnavailable = unavailable
		return nil
	})
}

// MIGInstance is one GPU instance of a fake GPU and its compute
// instances, as MIGInstances lists them.
type MIGInstance struct {
	// Profile is the GPU instance profile name, e.g. "3g.40gb".
	Profile string
	// GPUInstanceID is the NVML GPU instance ID.
	GPUInstanceID int
	// Placement is where the instance sits.
	Placement migplace.Placement
	// MIGDevices are the UUIDs of its compute instances' MIG devices, by
	// compute instance ID.
	MIGDevices []string
}

// MIGInstances lists the GPU instances of GPU gpuIndex, by placement start:
// what a test compares with what it expects a node to hold after creating
// or destroying MIG devices through NVML.
func (n *Node) MIGInstances(gpuIndex int) ([]MIGInstance, error) {
	g, err := n.gpuAt(gpuIndex)
	if err != nil {
		return nil, err
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := make([]MIGInstance, 0, len(g.gis))
	for _, gi := range g.gis {
		m := MIGInstance{Profile: gi.profile.name, GPUInstanceID: int(gi.id), Placement: migplace.Placement{Start: gi.start, Size: gi.profile.size}}
		for _, ci := range gi.cis {
			m.MIGDevices = append(m.MIGDevices, ci.uuid)
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b MIGInstance) int { return cmp.Compare(a.Placement.Start, b.Placement.Start) })
	return out, nil
}

// String formats an instance as "3g.40gb {4}:4 (GI 1, 1 MIG device)".
func (m MIGInstance) String() string {
	noun := "MIG devices"
	if len(m.MIGDevices) == 1 {
		noun = "MIG device"
	}
	return fmt.Sprintf("%s %s (GI %d, %d %s)", m.Profile, m.Placement, m.GPUInstanceID, len(m.MIGDevices), noun)
}

// LayoutString formats instances as "1g.10gb {6}:1, 3g.40gb {0}:4", by
// start, for test messages.
func LayoutString(instances []MIGInstance) string {
	parts := make([]string, len(instances))
	for i, m := range instances {
		parts[i] = m.Profile + " " + m.Placement.String()
	}
	return strings.Join(parts, ", ")
}
