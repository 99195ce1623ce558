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
	// Count is the error count of EventECCVolatileDoubleBit.
	Count uint64 `json:"count,omitempty"`
	// Time is when the event was received.
	Time time.Time `json:"time"`
}

// DefaultIgnoredXIDs returns the XIDs that indicate application errors
// rather than device failures (as NVIDIA's device plugin treats them).
func DefaultIgnoredXIDs() []uint64 { return []uint64{13, 31, 43, 45, 68, 109} }

// HealthEventKinds lists every HealthEventKind discovery sends, for
// consumers that bound label values (metrics) or document them.
func HealthEventKinds() []HealthEventKind {
	return []HealthEventKind{
		EventXID, EventECCDoubleBit, EventGPULost,
		EventRetiredPagesPending, EventRowRemapPending, EventRowRemapFailure, EventECCVolatileDoubleBit,
	}
}
