package discovery

import "testing"

func TestNormalizeBusID(t *testing.T) {
	tests := map[string]string{
		"00000000:07:00.0":  "0000:07:00.0",
		"0000:B7:00.0":      "0000:b7:00.0",
		" 00000001:0A:00.0": "0001:0a:00.0",
		"garbage":           "garbage",
	}
	for in, want := range tests {
		if got := normalizeBusID(in); got != want {
			t.Errorf("normalizeBusID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestFamilyOf(t *testing.T) {
	tests := []struct {
		major, minor int
		want         string
	}{
		{7, 0, "volta"}, {7, 5, "turing"}, {8, 0, "ampere"}, {8, 6, "ampere"},
		{8, 9, "ada-lovelace"}, {9, 0, "hopper"}, {10, 0, "blackwell"}, {12, 0, "blackwell"},
		// Compute capability 13 is Rubin.
		{13, 0, "rubin"}, {42, 0, "undefined"},
	}
	for _, tt := range tests {
		if got := familyOf(tt.major, tt.minor); got != tt.want {
			t.Errorf("familyOf(%d, %d) = %q, want %q", tt.major, tt.minor, got, tt.want)
		}
	}
}

func TestLinkScoreOrder(t *testing.T) {
	// Nearer links must score strictly higher, and any NVLink beats PCIe.
	order := []Link{
		{PCIe: PCIeSystem}, {PCIe: PCIeNode}, {PCIe: PCIeHostBridge},
		{PCIe: PCIeMultiple}, {PCIe: PCIeSingle}, {PCIe: PCIeInternal},
		{NVLinks: 1, PCIe: PCIeSystem}, {NVLinks: 12, PCIe: PCIeSystem}, {NVLinks: 18, PCIe: PCIeNode},
	}
	for i := 1; i < len(order); i++ {
		if order[i].Score() <= order[i-1].Score() {
			t.Errorf("%v scores %d, not above %v (%d)", order[i], order[i].Score(), order[i-1], order[i-1].Score())
		}
	}
	m := LinkMatrix{{{}, {NVLinks: 4}}, {{NVLinks: 4}, {}}}
	if m.Score(0, 1) != (Link{NVLinks: 4}).Score() || m.Score(0, 0) != 0 || m.Score(0, 5) != 0 {
		t.Errorf("LinkMatrix.Score out of line: %d %d %d", m.Score(0, 1), m.Score(0, 0), m.Score(0, 5))
	}
}
