// Package migplace is the geometry of MIG: the GPU instance profiles of a
// MIG-capable GPU, where an instance of each may be placed (a start and a
// size in memory slices), what an instance holds (compute slices, memory,
// SMs, engines), and the arithmetic of placements. Its product table
// (catalog.go) is the one the fake node answers NVML from; discovery reads
// the same facts from NVML into the Inventory, so that rules, DRA
// publishing and the fake node agree on what a placement is.
//
// It imports nothing of featureplug and does not call NVML.
package migplace

import (
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// MemorySlices and ComputeSlices are the memory and compute slices of every
// MIG-capable GPU NVIDIA makes today (A100, A30 excepted, through B200):
// an instance occupies a run of memory slices and some compute slices.
const (
	MemorySlices  = 8
	ComputeSlices = 7
)

// Placement is where a GPU instance sits: Size memory slices from Start,
// as nvml.GpuInstancePlacement gives it.
type Placement struct {
	Start int `json:"start"`
	Size  int `json:"size"`
}

// PlacementOf converts NVML's placement.
func PlacementOf(p nvml.GpuInstancePlacement) Placement {
	return Placement{Start: int(p.Start), Size: int(p.Size)}
}

// NVML returns the placement as NVML takes it.
func (p Placement) NVML() nvml.GpuInstancePlacement {
	return nvml.GpuInstancePlacement{Start: uint32(p.Start), Size: uint32(p.Size)}
}

// Mask has bit i set for every memory slice i the placement occupies.
func (p Placement) Mask() uint32 {
	if p.Size <= 0 || p.Start < 0 || p.Start+p.Size > 32 {
		return 0
	}
	return (uint32(1)<<p.Size - 1) << p.Start
}

// Overlaps reports whether two placements share a memory slice.
func (p Placement) Overlaps(q Placement) bool { return p.Mask()&q.Mask() != 0 }

// String formats the placement as `nvidia-smi mig -lgipp` writes one:
// "{4}:4" (start 4, four memory slices).
func (p Placement) String() string {
	return "{" + strconv.Itoa(p.Start) + "}:" + strconv.Itoa(p.Size)
}

// Engines counts the engines of a GPU instance (copy engines, video
// decoders and encoders, JPEG decoders, optical flow accelerators), as
// the GPU instance profile reports them.
type Engines struct {
	Copy    int `json:"copy"`
	Decoder int `json:"decoder"`
	Encoder int `json:"encoder"`
	JPEG    int `json:"jpeg"`
	OFA     int `json:"ofa"`
}

// Profile is one GPU instance profile of a GPU: what
// GetGpuInstanceProfileInfo and GetGpuInstancePossiblePlacements report.
type Profile struct {
	// Name is the canonical profile name, e.g. "1g.10gb" or "1g.10gb+me",
	// as go-nvlib derives it (and nvidia-smi prints it).
	Name string `json:"name"`
	// Enum is the GPU_INSTANCE_PROFILE_* value passed to
	// GetGpuInstanceProfileInfo.
	Enum int `json:"enum"`
	// ID is GpuInstanceProfileInfo.Id, the ID `nvidia-smi mig -lgip`
	// lists and GpuInstanceInfo.ProfileId reports.
	ID uint32 `json:"id"`
	// ComputeSlices is GpuInstanceProfileInfo.SliceCount.
	ComputeSlices int `json:"computeSlices"`
	// MaxInstances is GpuInstanceProfileInfo.InstanceCount: the most
	// instances of the profile one GPU holds.
	MaxInstances int `json:"maxInstances"`
	// MemoryMiB is the instance's memory (MemorySizeMB).
	MemoryMiB uint64 `json:"memoryMiB"`
	// Multiprocessors is the instance's SM count.
	Multiprocessors int `json:"multiprocessors"`
	// Engines are the instance's engines.
	Engines Engines `json:"engines"`
	// Placements are the possible placements, lowest start first, all of
	// one size.
	Placements []Placement `json:"placements"`
}

// MemorySliceCount is the number of memory slices an instance of the
// profile occupies (its placements' size).
func (p *Profile) MemorySliceCount() int {
	if len(p.Placements) == 0 {
		return 0
	}
	return p.Placements[0].Size
}

// PlacementAt returns the profile's placement starting at memory slice
// start.
func (p *Profile) PlacementAt(start int) (Placement, bool) {
	for _, pl := range p.Placements {
		if pl.Start == start {
			return pl, true
		}
	}
	return Placement{}, false
}

// StartsString lists the starts as `nvidia-smi mig -lgipp` does:
// "{0,2,4}:2".
func (p *Profile) StartsString() string {
	starts := make([]string, len(p.Placements))
	for i, pl := range p.Placements {
		starts[i] = strconv.Itoa(pl.Start)
	}
	return "{" + strings.Join(starts, ",") + "}:" + strconv.Itoa(p.MemorySliceCount())
}

// FullComputeInstance is the COMPUTE_INSTANCE_PROFILE_* value of the
// compute instance that fills an instance of the profile (the one
// `nvidia-smi mig -cgi <profile> -C` creates): the MIG device the profile
// name stands for.
func (p *Profile) FullComputeInstance() (int, bool) {
	return ComputeInstanceProfile(p.ComputeSlices)
}

// ComputeInstanceProfile is the COMPUTE_INSTANCE_PROFILE_* value (which is
// also the compute instance profile ID) of a compute instance of the given
// number of compute slices.
func ComputeInstanceProfile(slices int) (int, bool) {
	for e := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		if s, ok := ComputeInstanceSlices(e); ok && s == slices {
			return e, true
		}
	}
	return 0, false
}

// ComputeInstanceSlices maps the COMPUTE_INSTANCE_PROFILE_* values of
// compute instances that use every engine of their GPU instance
// (COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED) to their compute slice counts.
func ComputeInstanceSlices(enum int) (int, bool) {
	switch enum {
	case nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE:
		return 1, true
	case nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE:
		return 2, true
	case nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE:
		return 3, true
	case nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE:
		return 4, true
	case nvml.COMPUTE_INSTANCE_PROFILE_6_SLICE:
		return 6, true
	case nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE:
		return 7, true
	case nvml.COMPUTE_INSTANCE_PROFILE_8_SLICE:
		return 8, true
	}
	return 0, false
}

// ComputeInstanceFits reports whether a compute instance of c slices can
// exist in a GPU instance of g compute slices, as `nvidia-smi mig -lcip`
// lists them (1c, 2c, 3c on a 3g; 1c, 2c, 4c on a 4g; 1c, 2c, 3c, 4c, 7c
// on a 7g).
func ComputeInstanceFits(c, g int) bool {
	if _, ok := ComputeInstanceProfile(c); !ok || c > g {
		return false
	}
	return c == g || 2*c <= g+1
}

// ComputeInstanceSizes lists the compute instance sizes a GPU instance of
// g compute slices supports, smallest first.
func ComputeInstanceSizes(g int) []int {
	var out []int
	for c := 1; c <= g; c++ {
		if ComputeInstanceFits(c, g) {
			out = append(out, c)
		}
	}
	return out
}

// ModeChangeNeedsReset reports whether changing the MIG mode of a GPU of
// the given CUDA compute capability major version needs a GPU reset: on
// Ampere (8.x: A100, A30) it does, so the change stays pending while any
// process holds the GPU (NVIDIA's MIG user guide, "Deployment
// Considerations"); from Hopper (9.0) on the mode changes without a reset
// once the GPU is idle.
func ModeChangeNeedsReset(computeMajor int) bool { return computeMajor < 9 }

// Counters is what a MIG placement takes from its GPU, or what a GPU
// holds: the partitionable-device counters of dynamic MIG.
type Counters struct {
	// MemorySlices has bit i set for memory slice i.
	MemorySlices uint32 `json:"memorySlices"`
	// ComputeSlices counts compute slices.
	ComputeSlices int `json:"computeSlices"`
	// Engines counts the engines.
	Engines Engines `json:"engines"`
}

// Counters returns what an instance of the profile at pl takes.
func (p *Profile) Counters(pl Placement) Counters {
	return Counters{MemorySlices: pl.Mask(), ComputeSlices: p.ComputeSlices, Engines: p.Engines}
}

// Capacity is what a GPU with the given profiles holds: all its memory
// slices, the compute slices of its largest profile, and per engine kind
// the most any profile holds (the whole-GPU profile holds them all).
func Capacity(profiles []Profile) Counters {
	var c Counters
	for i := range profiles {
		p := &profiles[i]
		for _, pl := range p.Placements {
			c.MemorySlices |= pl.Mask()
		}
		c.ComputeSlices = max(c.ComputeSlices, p.ComputeSlices)
		c.Engines = Engines{
			Copy: max(c.Engines.Copy, p.Engines.Copy), Decoder: max(c.Engines.Decoder, p.Engines.Decoder),
			Encoder: max(c.Engines.Encoder, p.Engines.Encoder), JPEG: max(c.Engines.JPEG, p.Engines.JPEG),
			OFA: max(c.Engines.OFA, p.Engines.OFA),
		}
	}
	return c
}

// Target is one MIG device to create: a GPU instance of a profile at a
// placement of a GPU, and in it the compute instance that fills it.
type Target struct {
	// GPUUUID is the physical GPU.
	GPUUUID string `json:"gpuUUID"`
	// Profile is the profile name, for messages.
	Profile string `json:"profile"`
	// ProfileEnum is the GPU_INSTANCE_PROFILE_* value and ProfileID the
	// GpuInstanceProfileInfo.Id of the GPU instance profile.
	ProfileEnum int    `json:"profileEnum"`
	ProfileID   uint32 `json:"profileID"`
	// Placement is where the GPU instance goes.
	Placement Placement `json:"placement"`
	// ComputeInstanceProfile is the COMPUTE_INSTANCE_PROFILE_* value of
	// the compute instance.
	ComputeInstanceProfile int `json:"computeInstanceProfile"`
}

// String names the target for messages: "3g.40gb {4}:4 on GPU-...".
func (t Target) String() string {
	return t.Profile + " " + t.Placement.String() + " on " + t.GPUUUID
}
