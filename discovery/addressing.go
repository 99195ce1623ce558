package discovery

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// symAddressingMode is the NVML function of a GPU's addressing mode
// (drivers 570 and later).
const symAddressingMode = "nvmlDeviceGetAddressingMode"

// addressingSupport is what discovery learned of the platform's
// addressing modes.
type addressingSupport uint8

const (
	addressingUnasked addressingSupport = iota
	addressingNone                      // the library or the platform has none
	addressingPresent
)

// addressingMode reads a GPU's addressing mode as go-nvlib (and NVIDIA's
// DRA driver) names it: "ATS", "HMM" or "None", "" where the platform has
// no addressing modes. Addressing modes belong to coherent platforms
// (Grace Hopper, Grace Blackwell), so when the first GPU asked answers
// NOT_SUPPORTED the others are not asked: on the common, non-coherent
// node this costs one NVML call, not one per GPU.
func (r *reader) addressingMode(h nvml.Device) string {
	switch r.addressing {
	case addressingNone:
		return ""
	case addressingUnasked:
		if r.lib.Extensions().LookupSymbol(symAddressingMode) != nil {
			r.addressing = addressingNone
			return ""
		}
	}
	mode, ret := h.GetAddressingMode()
	if ret != nvml.SUCCESS {
		if r.addressing == addressingUnasked && ret == nvml.ERROR_NOT_SUPPORTED {
			r.addressing = addressingNone
		}
		return ""
	}
	r.addressing = addressingPresent
	switch nvml.DeviceAddressingModeType(mode.Value) {
	case nvml.DEVICE_ADDRESSING_MODE_ATS:
		return "ATS"
	case nvml.DEVICE_ADDRESSING_MODE_HMM:
		return "HMM"
	case nvml.DEVICE_ADDRESSING_MODE_NONE:
		return "None"
	}
	return ""
}
