package rules

import (
	"strconv"

	"github.com/featureplug/featureplug/discovery/draattr"
)

// draSpec is the file's dra section: how the DRA sink publishes the
// devices it serves, for every node the file serves.
type draSpec struct {
	// Compatibility is "nvidia" to publish devices under NVIDIA's DRA
	// driver's attribute names and device names as well as featureplug's
	// own, so that claims and classes written for that driver work
	// unchanged (discovery/draattr/nvidia.go); "" or absent for
	// featureplug's own names only.
	Compatibility string `json:"compatibility,omitempty"`
}

// compileDRA checks the dra section and returns the naming it chooses.
func (c *checker) compileDRA(spec *draSpec) draattr.Compatibility {
	if spec == nil {
		return draattr.Own
	}
	compat := draattr.Compatibility(spec.Compatibility)
	if _, err := draattr.For(compat); err != nil {
		c.add(false, &Error{Line: c.doc.line(path{"dra", "compatibility"}), Rule: -1, Field: "dra.compatibility",
			Value: strconv.Quote(spec.Compatibility), Msg: "unknown: use \"" + string(draattr.NVIDIA) + "\" for NVIDIA's DRA driver's names, or leave it out for featureplug's own"})
		return draattr.Own
	}
	return compat
}

// DRACompatibility returns the naming the file's dra section chooses for
// the devices the DRA sink publishes and the DeviceClasses made of the
// file: draattr.Own unless it says dra.compatibility: nvidia.
func (rs *RuleSet) DRACompatibility() draattr.Compatibility { return rs.draCompat }

// WithDRACompatibility returns a copy of the rule set that names DRA
// devices as c says, as if its file said dra.compatibility: c, so that a
// file's classes and devices can be compared under both namings.
func (rs *RuleSet) WithDRACompatibility(c draattr.Compatibility) *RuleSet {
	out := *rs
	out.draCompat = c
	return &out
}
