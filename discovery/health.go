package discovery

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// HealthEventKind says what NVML reported.
type HealthEventKind string

// Kinds of health events.
const (
	// EventXID is a critical XID error.
	EventXID HealthEventKind = "xid"
	// EventECCDoubleBit is an uncorrectable (double-bit) ECC error.
	EventECCDoubleBit HealthEventKind = "ecc-double-bit"
	// EventGPULost means NVML lost contact with the GPU
	// (ERROR_GPU_IS_LOST), at discovery or while watching.
	EventGPULost HealthEventKind = "gpu-lost"

	// The kinds below are evidence of an earlier failure that NVML keeps
	// across processes until the GPU is reset or the driver reloaded: the
	// health watcher reads it when it starts (and again every
	// HealthOptions.EvidenceInterval while it lasts), so a GPU that failed
	// before featureplug (re)started is unhealthy from its first
	// ListAndWatch.

	// EventRetiredPagesPending: memory pages were retired and wait for a
	// GPU reset (nvmlDeviceGetRetiredPagesPendingStatus; GPUs with page
	// retirement, before Ampere and GDDR parts).
	EventRetiredPagesPending HealthEventKind = "retired-pages-pending"
	// EventRowRemapPending: memory rows were remapped and wait for a GPU
	// reset (nvmlDeviceGetRemappedRows isPending; A100 and later HBM GPUs).
	EventRowRemapPending HealthEventKind = "row-remap-pending"
	// EventRowRemapFailure: a row remapping failed
	// (nvmlDeviceGetRemappedRows failureOccurred); the GPU needs service.
	EventRowRemapFailure HealthEventKind = "row-remap-failure"
	// EventECCVolatileDoubleBit: uncorrectable ECC errors were counted
	// since the driver was loaded (nvmlDeviceGetTotalEccErrors,
	// MEMORY_ERROR_TYPE_UNCORRECTED, VOLATILE_ECC); Count holds how many.
	EventECCVolatileDoubleBit HealthEventKind = "ecc-volatile-double-bit"
	// EventRecoveryAction: the driver asks for a recovery action on the
	// GPU (FI_DEV_GET_GPU_RECOVERY_ACTION, the EventTypeGpuRecoveryAction
	// event; the driver logs XID 154), held until the action was taken;
	// RecoveryAction says which.
	EventRecoveryAction HealthEventKind = "recovery-action"
	// EventNVLinkDown: NVLinks that were active read inactive
	// (FI_DEV_NVLINK_GET_STATE); Links names them, Count says how many.
	EventNVLinkDown HealthEventKind = "nvlink-down"
	// EventNVLinkErrors: NVLinks failed to recover and were declared down
	// since the driver loaded (FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS):
	// sent at start when the count is not zero, then when it grows; Count
	// is the new failures, Links the links that had them.
	EventNVLinkErrors HealthEventKind = "nvlink-errors"
	// EventPageRetirementFailure: the driver could not retire a memory
	// page (the EventTypeDramRetirementFailure event, XID 64).
	EventPageRetirementFailure HealthEventKind = "page-retirement-failure"

	// EventResetCleared is recovery evidence, not a failure: NVML shows no
	// pending reset on the GPU (its recovery action is none, no retired
	// page or row remapping is pending). The watcher sends it for every
	// GPU without such evidence when it starts, and when evidence that it
	// reported clears (the GPU was reset, or the driver reloaded). It ends
	// the GPU's until-reset holds. Sent only with HealthOptions.AllEvents.
	EventResetCleared HealthEventKind = "reset-cleared"
)

// HealthEvent is one health event on a GPU or on one MIG device: what NVML
// reported, with its evidence. What it does to the device is decided by the
// consumer: Decide under a HealthPolicy. Without HealthOptions.AllEvents the
// watcher sends only events that mean "unhealthy now".
type HealthEvent struct {
	// GPUUUID is the physical GPU the event happened on.
	GPUUUID string `json:"gpuUUID"`
	// MIGUUID is the MIG device the event names, or empty when it concerns
	// the whole GPU.
	MIGUUID string `json:"migUUID,omitempty"`
	// Kind is what happened.
	Kind HealthEventKind `json:"kind"`
	// XID is the XID code for EventXID.
	XID uint64 `json:"xid,omitempty"`
	// Count is the error count of EventECCVolatileDoubleBit, the number of
	// links of EventNVLinkDown and of new failures of EventNVLinkErrors.
	Count uint64 `json:"count,omitempty"`
	// Links are the NVLinks of EventNVLinkDown and EventNVLinkErrors.
	Links LinkSet `json:"links,omitempty"`
	// RecoveryAction is the action of EventRecoveryAction.
	RecoveryAction RecoveryAction `json:"recoveryAction,omitempty"`
	// ResetPending is NVML's evidence, read with the event, that the GPU
	// needs a reset: its recovery action asks for one, or a retired page
	// or row remapping is pending. Decide holds a device until-reset only
	// with it (otherwise featureplug could not see the reset).
	ResetPending bool `json:"resetPending,omitempty"`
	// Time is when the event was received.
	Time time.Time `json:"time"`
}

// HealthEventKinds lists every HealthEventKind discovery sends, for
// consumers that bound label values (metrics) or document them: the kinds
// of the table of default effects (healthpolicy.go), in its order.
func HealthEventKinds() []HealthEventKind {
	out := make([]HealthEventKind, len(eventKindEffects))
	for i, ke := range eventKindEffects {
		out[i] = ke.kind
	}
	return out
}

// LinkSet is a set of NVLink numbers (0 to nvml.NVLINK_MAX_LINKS-1), one
// bit each, so that a HealthEvent stays a comparable value.
type LinkSet uint64

// Add returns s with link added.
func (s LinkSet) Add(link int) LinkSet { return s | 1<<uint(link) }

// Has reports whether link is in s.
func (s LinkSet) Has(link int) bool { return s&(1<<uint(link)) != 0 }

// Len is the number of links in s.
func (s LinkSet) Len() int { return bits.OnesCount64(uint64(s)) }

// MarshalText writes the links as String does, so that state files and
// explanations read "3,7".
func (s LinkSet) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads what MarshalText wrote.
func (s *LinkSet) UnmarshalText(b []byte) error {
	var out LinkSet
	for part := range strings.SplitSeq(string(b), ",") {
		if part == "" {
			continue
		}
		l, err := strconv.Atoi(part)
		if err != nil || l < 0 || l >= 64 {
			return fmt.Errorf("NVLink %q is not a link number from 0 to 63", part)
		}
		out = out.Add(l)
	}
	*s = out
	return nil
}

// String lists the links, "3,7"; "" for none.
func (s LinkSet) String() string {
	var parts []string
	for l := range 64 {
		if s.Has(l) {
			parts = append(parts, strconv.Itoa(l))
		}
	}
	return strings.Join(parts, ",")
}
