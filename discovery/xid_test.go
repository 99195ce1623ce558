package discovery_test

import (
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery"
)

// TestXIDCatalogTable: the catalog has every XID of NVIDIA's table (1-172),
// in order, each with a mnemonic and a resolution featureplug knows.
func TestXIDCatalogTable(t *testing.T) {
	cat := discovery.XIDCatalog()
	if len(cat) != 172 {
		t.Fatalf("%d catalog rows, want 172 (XIDs 1-172 of %s)", len(cat), discovery.XIDCatalogSource)
	}
	for i, e := range cat {
		if e.XID != uint64(i+1) {
			t.Fatalf("row %d is XID %d, want %d (sorted, none missing)", i, e.XID, i+1)
		}
		if e.Mnemonic == "" || e.Description == "" {
			t.Errorf("XID %d: mnemonic %q, description %q", e.XID, e.Mnemonic, e.Description)
		}
		if !discovery.KnownResolution(e.Resolution) {
			t.Errorf("XID %d: resolution %q is not one featureplug maps to an effect", e.XID, e.Resolution)
		}
		if got, ok := discovery.LookupXID(e.XID); !ok || got != e {
			t.Errorf("LookupXID(%d) = %+v, %v", e.XID, got, ok)
		}
	}
	for _, xid := range []uint64{0, 173, 999} {
		if _, ok := discovery.LookupXID(xid); ok {
			t.Errorf("LookupXID(%d) found a row", xid)
		}
	}
	for _, r := range discovery.XIDResolutions() {
		if r == discovery.ResolutionNone {
			continue
		}
		used := false
		for _, e := range cat {
			used = used || e.Resolution == r
		}
		if !used {
			t.Errorf("resolution %s maps to an effect but no XID has it", r)
		}
	}
}

// TestXIDCatalogAskedAbout holds the catalog and the default policy against
// hand-written expectations for the XIDs users asked about (read off NVIDIA's
// catalog page), with what NVIDIA's device plugin does with each.
func TestXIDCatalogAskedAbout(t *testing.T) {
	tests := []struct {
		xid        uint64
		mnemonic   string
		resolution discovery.XIDResolution
		effect     discovery.HealthEffect
		nvidia     string // what NVIDIA's device plugin does
	}{
		{13, "ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY", "RESTART_APP", "count", "ignores"},
		{31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP", "count", "ignores"},
		{43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE", "none", "ignores"},
		{45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45", "count", "ignores"},
		{48, "ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48", "until-reset", "unhealthy until restarted"},
		{63, "INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE", "none", "unhealthy until restarted"},
		{64, "INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU", "until-reset", "unhealthy until restarted"},
		{68, "ROBUST_CHANNEL_NVDEC0_ERROR", "RESTART_APP", "count", "ignores"},
		{74, "NVLINK_ERROR", "WORKFLOW_NVLINK_ERR", "until-reset", "unhealthy until restarted"},
		{79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", "until-reboot", "unhealthy until restarted"},
		{92, "EXCESSIVE_SBE_INTERRUPTS", "IGNORE", "none", "unhealthy until restarted"},
		{94, "ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP", "count", "unhealthy until restarted"},
		{95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU", "until-reset", "unhealthy until restarted"},
		{109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU", "until-reset", "ignores"},
		{119, "GSP_RPC_TIMEOUT", "RESET_GPU", "until-reset", "unhealthy until restarted"},
		{120, "GSP_ERROR", "RESET_GPU", "until-reset", "unhealthy until restarted"},
		{154, "GPU_RECOVERY_ACTION_CHANGED", "XID_154", "count", "unhealthy until restarted"},
	}
	nvidiaIgnored := map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}
	for _, tt := range tests {
		e, ok := discovery.LookupXID(tt.xid)
		if !ok {
			t.Errorf("XID %d is not in the catalog", tt.xid)
			continue
		}
		if e.Mnemonic != tt.mnemonic || e.Resolution != tt.resolution {
			t.Errorf("XID %d = %s %s, want %s %s", tt.xid, e.Mnemonic, e.Resolution, tt.mnemonic, tt.resolution)
		}
		// With NVML's evidence of a pending reset, as the watcher reads it.
		d := discovery.Decide(discovery.HealthEvent{Kind: discovery.EventXID, XID: tt.xid, ResetPending: true}, discovery.HealthPolicy{})
		if d.Effect != tt.effect {
			t.Errorf("XID %d: default effect %s, want %s (%s)", tt.xid, d.Effect, tt.effect, d.Because)
		}
		if !strings.Contains(d.Because, e.Mnemonic) || !strings.Contains(d.Because, string(e.Resolution)) {
			t.Errorf("XID %d: because %q names neither the mnemonic nor the resolution", tt.xid, d.Because)
		}
		if got := nvidiaIgnored[tt.xid]; got != (tt.nvidia == "ignores") {
			t.Errorf("XID %d: the expectation says NVIDIA %s; its ignore list says %v", tt.xid, tt.nvidia, got)
		}
	}
}

func TestFormatXIDs(t *testing.T) {
	for _, tt := range []struct {
		xids []uint64
		want string
	}{
		{nil, ""}, {[]uint64{8}, "8"}, {[]uint64{8, 11, 25, 26, 27, 31}, "8, 11, 25-27, 31"}, {[]uint64{1, 2}, "1-2"},
	} {
		if got := discovery.FormatXIDs(tt.xids); got != tt.want {
			t.Errorf("FormatXIDs(%v) = %q, want %q", tt.xids, got, tt.want)
		}
	}
}
