package discovery

import (
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// RecoveryAction is what the driver says a GPU needs after an error: NVML's
// GPU recovery action (field FI_DEV_GET_GPU_RECOVERY_ACTION, and the
// EventTypeGpuRecoveryAction event), which the driver logs as XID 154 and
// keeps until the action was taken.
type RecoveryAction string

// The recovery actions of nvmlDeviceGpuRecoveryAction_t.
const (
	RecoveryNone              RecoveryAction = "none"
	RecoveryGPUReset          RecoveryAction = "gpu-reset"
	RecoveryNodeReboot        RecoveryAction = "node-reboot"
	RecoveryDrainP2P          RecoveryAction = "drain-p2p"
	RecoveryDrainAndReset     RecoveryAction = "drain-and-reset"
	RecoveryRecoverIMEXDomain RecoveryAction = "recover-imex-domain"
	RecoveryBusReset          RecoveryAction = "bus-reset"
	RecoverySystemReboot      RecoveryAction = "system-reboot"
)

// recoveryActions maps NVML's values to RecoveryAction, by value.
var recoveryActions = [...]RecoveryAction{
	nvml.GPU_RECOVERY_ACTION_NONE:                RecoveryNone,
	nvml.GPU_RECOVERY_ACTION_GPU_RESET:           RecoveryGPUReset,
	nvml.GPU_RECOVERY_ACTION_NODE_REBOOT:         RecoveryNodeReboot,
	nvml.GPU_RECOVERY_ACTION_DRAIN_P2P:           RecoveryDrainP2P,
	nvml.GPU_RECOVERY_ACTION_DRAIN_AND_RESET:     RecoveryDrainAndReset,
	nvml.GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN: RecoveryRecoverIMEXDomain,
	nvml.GPU_RECOVERY_ACTION_BUS_RESET:           RecoveryBusReset,
	nvml.GPU_RECOVERY_ACTION_SYSTEM_REBOOT:       RecoverySystemReboot,
}

// recoveryActionOf names an NVML recovery action value; a value newer than
// this table is "action-<n>", which is not none.
func recoveryActionOf(v uint64) RecoveryAction {
	if v < uint64(len(recoveryActions)) {
		return recoveryActions[v]
	}
	return RecoveryAction("action-" + strconv.FormatUint(v, 10))
}

// Effect is the effect a recovery action has by default: a node or system
// reboot holds the device until the node booted again; any other action
// (a reset, a drain) until NVML reports no action any more.
func (a RecoveryAction) Effect() HealthEffect {
	switch a {
	case RecoveryNone, "":
		return EffectNone
	case RecoveryNodeReboot, RecoverySystemReboot:
		return EffectUntilReboot
	}
	return EffectUntilReset
}

// Pending reports whether the action asks for something: the GPU is not
// usable as it is until it was taken.
func (a RecoveryAction) Pending() bool { return a != "" && a != RecoveryNone }
