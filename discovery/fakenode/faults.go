package fakenode

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// gpuFaults are the faults a test played on a GPU at run time (the Set and
// Inject methods below). Guarded by node.mu.
type gpuFaults struct {
	// lost makes the GPU's health queries answer ERROR_GPU_IS_LOST.
	lost bool
	// linksDown are the NVLink lanes taken down, one bit each.
	linksDown uint64
	// linkFailures count, per lane, the recoveries that failed and left
	// the link down (FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS).
	linkFailures [nvml.NVLINK_MAX_LINKS]uint64
}

// recoveryActionNames are the fake node file's names of NVML's recovery
// actions (health.recoveryAction), by value.
var recoveryActionNames = [...]string{
	nvml.GPU_RECOVERY_ACTION_NONE:                "none",
	nvml.GPU_RECOVERY_ACTION_GPU_RESET:           "gpu-reset",
	nvml.GPU_RECOVERY_ACTION_NODE_REBOOT:         "node-reboot",
	nvml.GPU_RECOVERY_ACTION_DRAIN_P2P:           "drain-p2p",
	nvml.GPU_RECOVERY_ACTION_DRAIN_AND_RESET:     "drain-and-reset",
	nvml.GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN: "recover-imex-domain",
	nvml.GPU_RECOVERY_ACTION_BUS_RESET:           "bus-reset",
	nvml.GPU_RECOVERY_ACTION_SYSTEM_REBOOT:       "system-reboot",
}

// recoveryActionByName returns the NVML value of a recovery action name;
// "" is none.
func recoveryActionByName(name string) (nvml.DeviceGpuRecoveryAction, bool) {
	if name == "" {
		return nvml.GPU_RECOVERY_ACTION_NONE, true
	}
	i := slices.Index(recoveryActionNames[:], name)
	return nvml.DeviceGpuRecoveryAction(i), i >= 0
}

// withGPU runs f on GPU index with node.mu held for writing.
func (n *Node) withGPU(index int, f func(g *gpu) error) error {
	g, err := n.gpuAt(index)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return f(g)
}

// SetGPULost makes GPU gpuIndex fall off the bus (lost true) or answer
// again (false). While it is lost, its health queries
// (GetRetiredPagesPendingStatus, GetRemappedRows, GetTotalEccErrors,
// GetFieldValues) and RegisterEvents answer ERROR_GPU_IS_LOST, as NVML does
// for a GPU it lost. Falling off delivers an EventTypeGpuUnavailableError
// event; the driver also logs XID 79, which a test injects with InjectXID.
func (n *Node) SetGPULost(gpuIndex int, lost bool) error {
	var was bool
	err := n.withGPU(gpuIndex, func(g *gpu) error {
		was, g.faults.lost = g.faults.lost, lost
		return nil
	})
	if err != nil || was || !lost {
		return err
	}
	g, _ := n.gpuAt(gpuIndex)
	return n.deliver(g, nvml.EventTypeGpuUnavailableError, 0, noInstance, noInstance)
}

// SetRecoveryAction sets what GPU gpuIndex's FI_DEV_GET_GPU_RECOVERY_ACTION
// answers, as the driver does after an error that needs a reset or reboot.
// A change to an action other than none delivers an
// EventTypeGpuRecoveryAction event; the driver also logs XID 154, which a
// test injects with InjectXID. ResetGPU sets it back to none.
func (n *Node) SetRecoveryAction(gpuIndex int, action nvml.DeviceGpuRecoveryAction) error {
	if int(action) < 0 || int(action) >= len(recoveryActionNames) {
		return fmt.Errorf("fake node %s: %d is not an NVML recovery action (0-%d)", n.Name(), action, len(recoveryActionNames)-1)
	}
	var changed bool
	err := n.withGPU(gpuIndex, func(g *gpu) error {
		name := recoveryActionNames[action]
		was, _ := recoveryActionByName(g.health.RecoveryAction)
		changed = was != action
		g.health.RecoveryAction = name
		return nil
	})
	if err != nil || !changed || action == nvml.GPU_RECOVERY_ACTION_NONE {
		return err
	}
	g, _ := n.gpuAt(gpuIndex)
	return n.deliver(g, nvml.EventTypeGpuRecoveryAction, 0, noInstance, noInstance)
}

// SetNVLinkDown takes NVLink lane link of GPU gpuIndex down (down true) or
// up again. A link going down counts one failed recovery
// (FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS: the link failed to
// recover and was declared down). A down link reads inactive through
// FI_DEV_NVLINK_GET_STATE and GetNvLinkState, so a re-discovery sees it
// gone too.
func (n *Node) SetNVLinkDown(gpuIndex, link int, down bool) error {
	return n.withGPU(gpuIndex, func(g *gpu) error {
		if link < 0 || link >= len(g.lanes) {
			return fmt.Errorf("fake node %s: GPU %d has no NVLink %d (it has %d)", n.Name(), gpuIndex, link, len(g.lanes))
		}
		bit := uint64(1) << uint(link)
		if down && g.faults.linksDown&bit == 0 {
			g.faults.linkFailures[link]++
		}
		if down {
			g.faults.linksDown |= bit
		} else {
			g.faults.linksDown &^= bit
		}
		return nil
	})
}

// SetHealth replaces the failure evidence of GPU gpuIndex (what the file's
// health gives at load), checked against the product as a file's is: the
// evidence NVML keeps, appearing or clearing at run time.
func (n *Node) SetHealth(gpuIndex int, h HealthSpec) error {
	g, err := n.gpuAt(gpuIndex)
	if err != nil {
		return err
	}
	v := &validator{source: "fake node " + n.Name()}
	checked := v.health(fmt.Sprintf("gpus[%d].health", gpuIndex), &h, g.product)
	if len(v.errs) > 0 {
		msgs := make([]string, len(v.errs))
		for i, e := range v.errs {
			msgs[i] = e.Error()
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	if c := checked.VolatileDoubleBitErrors; c != nil {
		count := *c
		checked.VolatileDoubleBitErrors = &count
	}
	return n.withGPU(gpuIndex, func(g *gpu) error {
		g.health = checked
		return nil
	})
}

// InjectPageRetirementFailure raises an EventTypeDramRetirementFailure
// event on GPU gpuIndex: the driver could not retire a page (it also logs
// XID 64, which a test injects with InjectXID).
func (n *Node) InjectPageRetirementFailure(gpuIndex int) error {
	g, err := n.gpuAt(gpuIndex)
	if err != nil {
		return err
	}
	return n.deliver(g, nvml.EventTypeDramRetirementFailure, 0, noInstance, noInstance)
}

// ResetGPU resets GPU gpuIndex as nvidia-smi --gpu-reset does: a pending
// MIG mode takes effect, the recovery action is none again, pending
// retired pages and row remappings take effect (they are no longer
// pending; a failed remapping stays failed), the volatile ECC count and
// the NVLink recovery failures are zero, the links are up and a lost GPU
// answers again. It fails, changing nothing, while a process holds the GPU
// (SetInUse), as the reset does.
func (n *Node) ResetGPU(gpuIndex int) error {
	return n.withGPU(gpuIndex, func(g *gpu) error {
		if g.migCtl.inUse {
			return fmt.Errorf("fake node %s: GPU %d is in use by another process and cannot be reset", n.Name(), gpuIndex)
		}
		snap := g.snapshotLocked()
		g.resetLocked()
		if !snap.commitLocked() {
			return fmt.Errorf("fake node %s: GPU %d: its MIG state cannot be kept", n.Name(), gpuIndex)
		}
		return nil
	})
}

// faultsOf returns a copy of g's faults and health, read under node.mu.
func (g *gpu) faultsOf() (gpuFaults, HealthSpec) {
	g.node.mu.RLock()
	defer g.node.mu.RUnlock()
	return g.faults, g.health
}
