package rules

import (
	"testing"

	"github.com/featureplug/featureplug/discovery/draattr"
)

// draFile is a rules file with one rule and, from line 7, a dra section.
const draFile = header + "- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\ndra:\n"

// TestDRACompatibility: dra.compatibility: nvidia reaches the rule set and
// every plan it makes; absent, featureplug's own names.
func TestDRACompatibility(t *testing.T) {
	for _, c := range []struct {
		section string
		want    draattr.Compatibility
	}{
		{"  compatibility: nvidia\n", draattr.NVIDIA},
		{"  compatibility: \"\"\n", draattr.Own},
		{"  {}\n", draattr.Own},
	} {
		rs, err := Parse("r.yaml", []byte(draFile+c.section))
		if err != nil {
			t.Fatalf("%q: %v", c.section, err)
		}
		if got := rs.DRACompatibility(); got != c.want {
			t.Errorf("%q: DRACompatibility() = %q, want %q", c.section, got, c.want)
		}
		p, err := rs.Plan(testInventory(testGPU(0, "NVIDIA H100 80GB HBM3")), nil)
		if err != nil {
			t.Fatal(err)
		}
		if p.DRACompatibility != string(c.want) {
			t.Errorf("%q: plan's DRACompatibility = %q, want %q", c.section, p.DRACompatibility, c.want)
		}
	}
	if rs, _ := Parse("r.yaml", []byte(draFile+"  compatibility: nvidia\n")); !rs.NeedsMIGGeometry() {
		t.Error("NVIDIA compatibility does not ask for MIG placements, which its device names hold")
	}
	if rs := Default(); rs.DRACompatibility() != draattr.Own {
		t.Errorf("the default rules have DRA compatibility %q", rs.DRACompatibility())
	}
}

// TestDRACompatibilityErrors names the file, line, field and value of an
// unknown naming, and what to write instead.
func TestDRACompatibilityErrors(t *testing.T) {
	_, err := Parse("r.yaml", []byte(draFile+"  compatibility: amd\n"))
	want := `r.yaml:8: dra.compatibility: unknown: use "nvidia" for NVIDIA's DRA driver's names, or leave it out for featureplug's own (have "amd")`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant    %s", err, want)
	}
	if _, err := Parse("r.yaml", []byte(draFile+"  nvidia: true\n")); err == nil {
		t.Error("an unknown field of the dra section loaded")
	}
}
