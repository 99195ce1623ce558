package migplace

import (
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Product is the MIG geometry of one GPU model.
type Product struct {
	// Name is the product name as NVML reports it, e.g. "NVIDIA H200".
	Name string
	// ComputeMajor is the CUDA compute capability major version, which
	// says whether a MIG mode change needs a reset (ModeChangeNeedsReset).
	ComputeMajor int
	// Profiles are the GPU instance profiles in catalog order: 1g, 1g+me,
	// 1g wide, 2g, 3g, 4g, 7g.
	Profiles []Profile
}

// Profile returns the product's profile with the given name.
func (p *Product) Profile(name string) (*Profile, bool) {
	for i := range p.Profiles {
		if p.Profiles[i].Name == name {
			return &p.Profiles[i], true
		}
	}
	return nil, false
}

// shape is the part of a GPU instance profile that is the same on every
// product of the catalog (8 memory slices, 7 compute slices), from the
// "Supported MIG Profiles" tables of NVIDIA's MIG user guide and the
// `nvidia-smi mig -lgipp` listings of A100, H100, H100 NVL and H200 in
// public guides (the same on all four):
//
//	GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1
//	GPU  0 Profile ID 20 Placements: {0,1,2,3,4,5,6}:1
//	GPU  0 Profile ID 15 Placements: {0,2,4,6}:2
//	GPU  0 Profile ID 14 Placements: {0,2,4}:2
//	GPU  0 Profile ID  9 Placements: {0,4}:4
//	GPU  0 Profile ID  5 Placement : {0}:4
//	GPU  0 Profile ID  0 Placement : {0}:8
//
// B200 lists the same profile IDs and instance counts (NVIDIA/mig-parted#166);
// its placements are *unverified* (taken to be the same).
type shape struct {
	enum    int
	id      uint32
	compute int
	size    int
	starts  []int
	max     int
}

// shapes are the seven GPU instance profiles, in the order the product
// tables below list names, memory, SMs and engines.
func shapes() []shape {
	return []shape{
		{enum: nvml.GPU_INSTANCE_PROFILE_1_SLICE, id: 19, compute: 1, size: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}, max: 7},
		{enum: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, id: 20, compute: 1, size: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}, max: 1},
		{enum: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, id: 15, compute: 1, size: 2, starts: []int{0, 2, 4, 6}, max: 4},
		{enum: nvml.GPU_INSTANCE_PROFILE_2_SLICE, id: 14, compute: 2, size: 2, starts: []int{0, 2, 4}, max: 3},
		{enum: nvml.GPU_INSTANCE_PROFILE_3_SLICE, id: 9, compute: 3, size: 4, starts: []int{0, 4}, max: 2},
		{enum: nvml.GPU_INSTANCE_PROFILE_4_SLICE, id: 5, compute: 4, size: 4, starts: []int{0}, max: 1},
		{enum: nvml.GPU_INSTANCE_PROFILE_7_SLICE, id: 0, compute: 7, size: 8, starts: []int{0}, max: 1},
	}
}

// table is a product's MIG facts, one entry per shapes() entry.
type table struct {
	names   [7]string
	memory  [7]uint64
	sms     [7]int
	engines [7]Engines
}

func (t table) profiles() []Profile {
	sh := shapes()
	out := make([]Profile, len(sh))
	for i, s := range sh {
		pls := make([]Placement, len(s.starts))
		for k, start := range s.starts {
			pls[k] = Placement{Start: start, Size: s.size}
		}
		out[i] = Profile{
			Name: t.names[i], Enum: s.enum, ID: s.id, ComputeSlices: s.compute, MaxInstances: s.max,
			MemoryMiB: t.memory[i], Multiprocessors: t.sms[i], Engines: t.engines[i], Placements: pls,
		}
	}
	return out
}

// ampereEngines are the A100's engines per profile (NVIDIA MIG user guide).
func ampereEngines() [7]Engines {
	return [7]Engines{
		{Copy: 1},
		{Copy: 1, Decoder: 1, JPEG: 1, OFA: 1},
		{Copy: 1, Decoder: 1},
		{Copy: 2, Decoder: 1},
		{Copy: 3, Decoder: 2},
		{Copy: 4, Decoder: 2},
		{Copy: 7, Decoder: 5, JPEG: 1, OFA: 1},
	}
}

// hopperEngines are the H100/H200 engines per profile (real H200
// `nvidia-smi mig -lgip` listing).
func hopperEngines() [7]Engines {
	return [7]Engines{
		{Copy: 1, Decoder: 1, JPEG: 1},
		{Copy: 1, Decoder: 1, JPEG: 1, OFA: 1},
		{Copy: 1, Decoder: 1, JPEG: 1},
		{Copy: 2, Decoder: 2, JPEG: 2},
		{Copy: 3, Decoder: 3, JPEG: 3},
		{Copy: 4, Decoder: 4, JPEG: 4},
		{Copy: 8, Decoder: 7, JPEG: 7, OFA: 1},
	}
}

// blackwellEngines are the B200 engines per profile: the 1g, 1g+me, 1g
// wide and 2g rows from the real B200 `nvidia-smi mig -lgip` listings in
// NVIDIA/mig-parted#166 and #187; the 3g, 4g and 7g rows are *unverified*
// (extrapolated: one decoder and JPEG per slice, two copy engines per
// slice, one OFA on 7g).
func blackwellEngines() [7]Engines {
	return [7]Engines{
		{Copy: 2, Decoder: 1, JPEG: 1},
		{Copy: 2, Decoder: 1, JPEG: 1, OFA: 1},
		{Copy: 2, Decoder: 1, JPEG: 1},
		{Copy: 4, Decoder: 2, JPEG: 2},
		{Copy: 6, Decoder: 3, JPEG: 3},
		{Copy: 8, Decoder: 4, JPEG: 4},
		{Copy: 14, Decoder: 7, JPEG: 7, OFA: 1},
	}
}

// Products returns the MIG geometry of every MIG-capable product of the
// catalog, sorted by name. Every figure names its public source; figures
// marked *unverified* are extrapolations to check on a real GPU
// (test/realgpu):
//
//   - [MIG guide]: NVIDIA's MIG user guide, "Supported MIG Profiles"
//     (profile names, instance limits, placements, engines).
//   - [mig-parted]: NVIDIA/mig-parted's default config (profile names and
//     counts per device).
//   - [lgip]: real `nvidia-smi mig -lgip` listings quoted in public issues
//     (H200: NVIDIA/mig-parted#120; B200: NVIDIA/mig-parted#166 and #187).
//   - [go-nvml mock]: go-nvml's dgxa100 mock, whose A100 figures match
//     real listings.
//
// Memory sizes are those go-nvlib needs to derive the canonical profile
// names from (its rule: the MIG fraction of the GPU rounded up to eighths,
// times the GPU's memory in whole GiB, rounded).
func Products() []Product {
	a100SMs := [7]int{14, 14, 14, 28, 42, 56, 98}    // [go-nvml mock]
	hopperSMs := [7]int{16, 16, 26, 32, 60, 64, 132} // [lgip] H200; *unverified* for H100 SXM and H100 NVL
	out := []Product{
		{
			// [go-nvml mock], [MIG guide].
			Name: "NVIDIA A100-SXM4-40GB", ComputeMajor: 8,
			Profiles: table{
				names:   [7]string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
				memory:  [7]uint64{4864, 4864, 9856, 9856, 19968, 19968, 40192},
				sms:     a100SMs,
				engines: ampereEngines(),
			}.profiles(),
		},
		{
			// [go-nvml mock], [MIG guide]; 2g.20gb also in a real listing (XuehaiPan/nvitop#8).
			Name: "NVIDIA A100-SXM4-80GB", ComputeMajor: 8,
			Profiles: table{
				names:   [7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
				memory:  [7]uint64{9856, 9856, 19968, 19968, 40192, 40192, 80384},
				sms:     a100SMs,
				engines: ampereEngines(),
			}.profiles(),
		},
		{
			// Names and counts [mig-parted]; per-profile memory *unverified*
			// (prototype catalog), SMs *unverified* (the H200 pattern).
			Name: "NVIDIA H100 80GB HBM3", ComputeMajor: 9,
			Profiles: table{
				names:   [7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
				memory:  [7]uint64{9984, 9984, 20096, 20096, 40320, 40320, 81152},
				sms:     hopperSMs,
				engines: hopperEngines(),
			}.profiles(),
		},
		{
			// Profile names 1g.12gb ... 7g.94gb [mig-parted]; every figure
			// *unverified* (the H100 SXM figures scaled by 94/80, rounded to
			// 128 MiB).
			Name: "NVIDIA H100 NVL", ComputeMajor: 9,
			Profiles: table{
				names:   [7]string{"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"},
				memory:  [7]uint64{11776, 11776, 23552, 23552, 47360, 47360, 95232},
				sms:     hopperSMs,
				engines: hopperEngines(),
			}.profiles(),
		},
		{
			// [lgip] NVIDIA/mig-parted#120 (every figure).
			Name: "NVIDIA H200", ComputeMajor: 9,
			Profiles: table{
				names:   [7]string{"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
				memory:  [7]uint64{16384, 16384, 33024, 33024, 71168, 71168, 143104},
				sms:     hopperSMs,
				engines: hopperEngines(),
			}.profiles(),
		},
		{
			// Names [mig-parted]. [lgip] NVIDIA/mig-parted#187: 1g.23gb
			// 20.50 GiB (20992 MiB) 18 SMs, 1g.45gb 44.25 GiB (45312 MiB) 30
			// SMs, 2g.45gb 36 SMs. *unverified*: the 3g/4g/7g memory (88.00 /
			// 88.00 / 178.50 GiB) and SMs (54 / 72 / 148).
			Name: "NVIDIA B200", ComputeMajor: 10,
			Profiles: table{
				names:   [7]string{"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"},
				memory:  [7]uint64{20992, 20992, 45312, 45312, 90112, 90112, 182784},
				sms:     [7]int{18, 18, 30, 36, 54, 72, 148},
				engines: blackwellEngines(),
			}.profiles(),
		},
	}
	slices.SortFunc(out, func(a, b Product) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ProductByName returns the catalog's geometry of the product NVML names
// name.
func ProductByName(name string) (Product, bool) {
	for _, p := range Products() {
		if p.Name == name {
			return p, true
		}
	}
	return Product{}, false
}
