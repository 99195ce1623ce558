package discovery

import "time"

// HealthEventKind says what NVML reported.
type HealthEventKind string

// Kinds of health events.
const (
	// EventXID is a critical XID error.
	EventXID HealthEventKind = "xid"
	// EventECCDoubleBit is an uncorrectable (double-bit) ECC error.
	EventECCDoubleBit HealthEventKind = "ecc-double-bit"
	// EventGPULost means NVML lost contact with the GPU.
	EventGPULost HealthEventKind = "gpu-lost"
)

// HealthEvent is one critical event on a GPU or on one MIG device. It always
// means "unhealthy now"; recovery is decided by the consumer (a quiet period
// without new events).
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
	// Time is when the event was received.
	Time time.Time `json:"time"`
}

// DefaultIgnoredXIDs returns the XIDs that indicate application errors
// rather than device failures (as NVIDIA's device plugin treats them).
func DefaultIgnoredXIDs() []uint64 { return []uint64{13, 31, 43, 45, 68, 109} }
