package plan

import (
	"fmt"

	"github.com/featureplug/featureplug/discovery/migplace"
)

// DynamicGPU is a GPU the rules partition on demand (a rule's
// mig.partition: dynamic): the scheduler chooses, per claim, a profile and
// a placement among those offered here, and Prepare creates that MIG
// device. Its resources are served through DRA only, as partitionable
// devices: a counter set for the GPU (Capacity), one device per offered
// placement consuming its counters (migplace.Profile.Counters) and, when
// WholeGPU is set, the whole GPU consuming all of them. A DynamicGPU
// carries all a publisher needs: nothing downstream reads NVML or the
// catalog to serve it.
type DynamicGPU struct {
	// UUID, Index, Product, NUMANode and MemoryMiB identify the GPU.
	UUID      string `json:"uuid"`
	Index     int    `json:"index"`
	Product   string `json:"product"`
	NUMANode  int    `json:"numaNode"`
	MemoryMiB uint64 `json:"memoryMiB"`
	// Rule is the rule that partitions the GPU.
	Rule string `json:"rule"`
	// MIGEnabled is the GPU's current MIG mode. Prepare enables MIG mode
	// before creating the first MIG device (and, for a whole-GPU claim,
	// disables it) when ModeChangeNeedsReset is false; a GPU whose mode
	// change needs a reset is dynamic only with MIG already enabled.
	MIGEnabled bool `json:"migEnabled"`
	// ModeChangeNeedsReset is set on GPUs whose MIG mode changes only
	// through a GPU reset (Ampere).
	ModeChangeNeedsReset bool `json:"modeChangeNeedsReset,omitempty"`
	// WholeGPU is the resource the whole GPU is offered as; "" when it is
	// not offered (WholeGPUWithheld then says why, if the rule asked).
	WholeGPU string `json:"wholeGPU,omitempty"`
	// WholeGPUWithheld says why the whole GPU the rule asked to offer is
	// not: its MIG mode is enabled and changing it needs a reset.
	WholeGPUWithheld string `json:"wholeGPUWithheld,omitempty"`
	// Profiles are the offered profiles, in the GPU's geometry order.
	Profiles []DynamicProfile `json:"profiles"`
	// Capacity is what the whole GPU holds: every memory slice, every
	// compute slice, and the engines of its largest profile.
	Capacity migplace.Counters `json:"capacity"`
	// Existing are the MIG devices the GPU holds now, by placement start:
	// those Prepare created for claims, and any created by others. The
	// sink serving the GPU tells them apart by its own record of what it
	// created; a GPU holding a MIG device featureplug did not create is
	// not offered (migpartition.Options.Created).
	Existing []ExistingMIG `json:"existing,omitempty"`
}

// DynamicProfile is one profile a DynamicGPU offers.
type DynamicProfile struct {
	migplace.Profile
	// Resource is the resource name the rule's template gives the
	// profile.
	Resource string `json:"resource"`
	// ComputeInstanceProfile is the COMPUTE_INSTANCE_PROFILE_* value of
	// the compute instance Prepare creates in the GPU instance: the one
	// that fills it.
	ComputeInstanceProfile int `json:"computeInstanceProfile"`
}

// ExistingMIG is a MIG device a DynamicGPU holds.
type ExistingMIG struct {
	// UUID is the MIG device UUID.
	UUID string `json:"uuid"`
	// Profile is its profile name; ProfileID its GPU instance profile ID.
	Profile   string `json:"profile"`
	ProfileID uint32 `json:"profileID"`
	// Placement is its GPU instance's placement.
	Placement migplace.Placement `json:"placement"`
	// Whole is false for a compute instance smaller than its GPU
	// instance: featureplug never creates those.
	Whole bool `json:"whole"`
}

// Profile returns the offered profile with the given name.
func (g *DynamicGPU) Profile(name string) (*DynamicProfile, bool) {
	for i := range g.Profiles {
		if g.Profiles[i].Name == name {
			return &g.Profiles[i], true
		}
	}
	return nil, false
}

// ProfileByID returns the offered profile with the given GPU instance
// profile ID.
func (g *DynamicGPU) ProfileByID(id uint32) (*DynamicProfile, bool) {
	for i := range g.Profiles {
		if g.Profiles[i].ID == id {
			return &g.Profiles[i], true
		}
	}
	return nil, false
}

// Target is the MIG device to create for a claim allocated the offered
// profile with GPU instance profile ID id at the placement starting at
// memory slice start. It fails when the GPU does not offer that profile
// or placement.
func (g *DynamicGPU) Target(id uint32, start int) (migplace.Target, error) {
	p, ok := g.ProfileByID(id)
	if !ok {
		return migplace.Target{}, fmt.Errorf("GPU %d (%s) offers no MIG profile with ID %d", g.Index, g.UUID, id)
	}
	pl, ok := p.PlacementAt(start)
	if !ok {
		return migplace.Target{}, fmt.Errorf("GPU %d (%s): MIG profile %s has no placement at memory slice %d (it has %s)", g.Index, g.UUID, p.Name, start, p.StartsString())
	}
	return p.Target(g.UUID, pl), nil
}

// Target is the MIG device an instance of the profile at pl on the GPU
// with the given UUID is.
func (p *DynamicProfile) Target(gpuUUID string, pl migplace.Placement) migplace.Target {
	return migplace.Target{
		GPUUUID: gpuUUID, Profile: p.Name, ProfileEnum: p.Enum, ProfileID: p.ID,
		Placement: pl, ComputeInstanceProfile: p.ComputeInstanceProfile,
	}
}

// Dynamic returns the plan's DynamicGPU with the given UUID.
func (p *Plan) Dynamic(uuid string) (*DynamicGPU, bool) {
	for i := range p.DynamicMIG {
		if p.DynamicMIG[i].UUID == uuid {
			return &p.DynamicMIG[i], true
		}
	}
	return nil, false
}

// WithoutReserved returns p without the devices reserved names (device ID
// -> why) in its resources that are not dynamic: MIG devices created for
// DRA claims of a GPU the rules partitioned on demand, which a rules edit
// may now have a devices: mig rule claim. They belong to their claims
// until those end; no other API may serve them meanwhile. It returns p
// itself when that removes nothing (nil for nil).
func (p *Plan) WithoutReserved(reserved map[string]string) *Plan {
	if p == nil || len(reserved) == 0 {
		return p
	}
	hit := false
	for i := range p.Resources {
		for _, d := range p.Resources[i].Devices {
			_, r := reserved[d.ID]
			hit = hit || r
		}
	}
	if !hit {
		return p
	}
	out := *p
	out.Resources = make([]Resource, len(p.Resources))
	for i, r := range p.Resources {
		var keep []Device
		for _, d := range r.Devices {
			if why, ok := reserved[d.ID]; ok {
				out.Problems = append(out.Problems, Problem{Device: d.ID, Description: "MIG device " + d.ID, Rule: d.Rule, Resource: r.Name,
					Message: "not served: " + why})
				continue
			}
			keep = append(keep, d)
		}
		r.Devices = keep
		out.Resources[i] = r
	}
	return &out
}
