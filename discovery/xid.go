package discovery

import (
	"slices"
	"sort"
	"strconv"
	"strings"
)

// XIDResolution is the immediate action NVIDIA's XID catalog gives an XID
// (its "Resolution Bucket (Immediate Action)" column).
type XIDResolution string

// The resolutions of NVIDIA's XID catalog (xidcatalog.go).
const (
	// ResolutionIgnore: no action is needed.
	ResolutionIgnore XIDResolution = "IGNORE"
	// ResolutionRestartApp: the application that hit the error must be
	// restarted; the GPU is fine.
	ResolutionRestartApp XIDResolution = "RESTART_APP"
	// ResolutionResetGPU: the GPU must be reset (nvidia-smi -r) before
	// applications can use it again.
	ResolutionResetGPU XIDResolution = "RESET_GPU"
	// ResolutionRestartBM: restart the bare-metal node.
	ResolutionRestartBM XIDResolution = "RESTART_BM"
	// ResolutionRestartVM: restart the virtual machine.
	ResolutionRestartVM XIDResolution = "RESTART_VM"
	// ResolutionContactSupport: NVIDIA names no automatic remedy.
	ResolutionContactSupport XIDResolution = "CONTACT_SUPPORT"
	// ResolutionCheckMechanicals: check cabling and power (XID 54).
	ResolutionCheckMechanicals XIDResolution = "CHECK_MECHANICALS"
	// ResolutionUpdateSWFW: update software or firmware (XID 78).
	ResolutionUpdateSWFW XIDResolution = "UPDATE_SWFW"
	// ResolutionCheckUVM: depends on whether UVM is in use (XID 159).
	ResolutionCheckUVM XIDResolution = "CHECK_UVM"
	// ResolutionWorkflowXID45: preemptive cleanup after another error;
	// follow the other XID (solo: restart the fabric manager).
	ResolutionWorkflowXID45 XIDResolution = "WORKFLOW_XID_45"
	// ResolutionWorkflowXID48: a double-bit ECC error; the catalog says a
	// GPU reset or node reboot clears it.
	ResolutionWorkflowXID48 XIDResolution = "WORKFLOW_XID_48"
	// ResolutionWorkflowNVLink: an NVLink error (XID 74); the catalog says
	// a GPU reset or node reboot clears it.
	ResolutionWorkflowNVLink XIDResolution = "WORKFLOW_NVLINK_ERR"
	// ResolutionWorkflowNVLink5: an NVLink 5 error (XIDs 144-150) whose
	// action depends on sub-codes NVML's event does not carry; the driver
	// sets the GPU's recovery action (XID 154) when a reset is needed.
	ResolutionWorkflowNVLink5 XIDResolution = "WORKFLOW_NVLINK5_ERR"
	// ResolutionXID154: the GPU's recovery action changed (XID 154); what
	// to do is the recovery action NVML reports.
	ResolutionXID154 XIDResolution = "XID_154"
	// ResolutionNone: the catalog gives the XID no resolution.
	ResolutionNone XIDResolution = ""
)

// XIDEntry is one row of NVIDIA's XID catalog.
type XIDEntry struct {
	// XID is the code.
	XID uint64
	// Mnemonic is the driver's name for it, e.g.
	// "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS".
	Mnemonic string
	// Description is the catalog's description ("Unused" for XIDs no
	// supported GPU reports).
	Description string
	// Resolution is the catalog's immediate action.
	Resolution XIDResolution
}

// XIDCatalogSource names the catalog xidCatalog was read from, for comments,
// documents and logs.
const XIDCatalogSource = "NVIDIA, \"Analyzing Xid Errors with the Xid Catalog\" " +
	"(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), " +
	"Table 1 \"Xids\" for Ampere and newer GPUs, XIDs 1-172, read 2026-12-01"

// LookupXID returns the catalog's row for an XID; ok is false for an XID the
// catalog does not list.
func LookupXID(xid uint64) (XIDEntry, bool) {
	i := sort.Search(len(xidCatalog), func(i int) bool { return xidCatalog[i].XID >= xid })
	if i < len(xidCatalog) && xidCatalog[i].XID == xid {
		return xidCatalog[i], true
	}
	return XIDEntry{}, false
}

// XIDCatalog returns every row of the catalog, by XID.
func XIDCatalog() []XIDEntry { return slices.Clone(xidCatalog[:]) }

// XIDResolutions returns every resolution the catalog uses, in the order
// of xidResolutionEffects (most benign first), ResolutionNone last.
func XIDResolutions() []XIDResolution {
	out := make([]XIDResolution, len(xidResolutionEffects))
	for i, r := range xidResolutionEffects {
		out[i] = r.resolution
	}
	return out
}

// KnownResolution reports whether r is a resolution of the catalog.
func KnownResolution(r XIDResolution) bool {
	return slices.ContainsFunc(xidResolutionEffects[:], func(e resolutionEffect) bool { return e.resolution == r })
}

// FormatXIDs writes sorted XIDs as ranges, "8, 11, 25-32", for tables and
// explanations.
func FormatXIDs(xids []uint64) string {
	var parts []string
	for i := 0; i < len(xids); {
		j := i
		for j+1 < len(xids) && xids[j+1] == xids[j]+1 {
			j++
		}
		part := strconv.FormatUint(xids[i], 10)
		if j > i {
			part += "-" + strconv.FormatUint(xids[j], 10)
		}
		parts = append(parts, part)
		i = j + 1
	}
	return strings.Join(parts, ", ")
}
