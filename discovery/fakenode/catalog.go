package fakenode

import (
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// computeSlices is the number of compute slices of every MIG-capable product
// in the catalog, and so the most MIG devices one GPU can have.
const computeSlices = 7

// product is one GPU model of the catalog: what NVML reports for it.
type product struct {
	// key is the name used in fake node files, e.g. "A100-SXM4-40GB".
	key string
	// name is the product name as NVML reports it.
	name        string
	pciDeviceID uint32
	arch        nvml.DeviceArchitecture
	brand       nvml.BrandType
	ccMajor     int
	ccMinor     int
	memoryMiB   uint64
	sms         int
	// nvlinkLanes is the number of NVLink lanes; 0 for PCIe-only products.
	nvlinkLanes int
	// nvswitches is how many NVSwitch chips the product's baseboard spreads
	// its lanes over when its NVLinks go through switches.
	nvswitches        int
	switchPCIDeviceID uint32
	// mig holds the GPU instance profiles; nil means not MIG capable.
	mig []*migProfile
	// memoryErrors is how the product's memory recovers from uncorrectable
	// errors: row remapping (HBM parts from Ampere on) or page retirement
	// (earlier and GDDR parts). It decides which NVML evidence queries the
	// fake answers and which health fields a fake node file may set.
	memoryErrors memoryRecovery
}

// memoryRecovery names a GPU's mechanism against bad memory rows or pages.
type memoryRecovery int

const (
	// rowRemapping: nvmlDeviceGetRemappedRows answers, page retirement is
	// NOT_SUPPORTED (NVIDIA's "GPU Memory Error Management" guide: A100 and
	// later HBM GPUs remap rows instead of retiring pages).
	rowRemapping memoryRecovery = iota
	// pageRetirement: nvmlDeviceGetRetiredPagesPendingStatus answers, row
	// remapping is NOT_SUPPORTED (*unverified* for the Ada GDDR6 parts L4
	// and L40S: their nvidia-smi -q listings show "Retired Pages").
	pageRetirement
)

// engines counts the engines of a GPU instance profile.
type engines struct {
	copy, decoder, encoder, jpeg, ofa uint32
}

// migProfile is one GPU instance profile of a product.
type migProfile struct {
	// name is the canonical profile name, e.g. "1g.5gb" or "1g.5gb+me".
	name string
	// enum is the NVML GPU_INSTANCE_PROFILE_* value passed to
	// GetGpuInstanceProfileInfo.
	enum int
	// id is GpuInstanceProfileInfo.Id, as `nvidia-smi mig -lgip` lists it.
	id uint32
	// compute is the number of compute slices (GpuInstanceProfileInfo.SliceCount).
	compute int
	// size is the number of memory slices a placement occupies.
	size int
	// starts are the memory slices a placement may start at.
	starts []int
	// max is the most instances of this profile one GPU can hold.
	max       int
	memoryMiB uint64
	sms       int
	engines   engines
}

// info is the profile as GetGpuInstanceProfileInfo reports it.
func (p *migProfile) info() nvml.GpuInstanceProfileInfo {
	return nvml.GpuInstanceProfileInfo{
		Id:                  p.id,
		IsP2pSupported:      0,
		SliceCount:          uint32(p.compute),
		InstanceCount:       uint32(p.max),
		MultiprocessorCount: uint32(p.sms),
		CopyEngineCount:     p.engines.copy,
		DecoderCount:        p.engines.decoder,
		EncoderCount:        p.engines.encoder,
		JpegCount:           p.engines.jpeg,
		OfaCount:            p.engines.ofa,
		MemorySizeMB:        p.memoryMiB,
	}
}

// placements lists the profile's possible placements.
func (p *migProfile) placements() []nvml.GpuInstancePlacement {
	out := make([]nvml.GpuInstancePlacement, len(p.starts))
	for i, s := range p.starts {
		out[i] = nvml.GpuInstancePlacement{Start: uint32(s), Size: uint32(p.size)}
	}
	return out
}

// migShape is the part of a GPU instance profile that is the same on every
// MIG-capable product of the catalog (8 memory slices, 7 compute slices).
type migShape struct {
	enum    int
	id      uint32
	compute int
	size    int
	starts  []int
	max     int
}

// migShapes are the seven GPU instance profiles of A100/H100/H200, in the
// order the per-product tables below list their names, memory and SMs:
// 1g, 1g+me, 1g wide, 2g, 3g, 4g, 7g.
func migShapes() []migShape {
	return []migShape{
		{enum: nvml.GPU_INSTANCE_PROFILE_1_SLICE, id: 19, compute: 1, size: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}, max: 7},
		{enum: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1, id: 20, compute: 1, size: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}, max: 1},
		{enum: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, id: 15, compute: 1, size: 2, starts: []int{0, 2, 4, 6}, max: 4},
		{enum: nvml.GPU_INSTANCE_PROFILE_2_SLICE, id: 14, compute: 2, size: 2, starts: []int{0, 2, 4}, max: 3},
		{enum: nvml.GPU_INSTANCE_PROFILE_3_SLICE, id: 9, compute: 3, size: 4, starts: []int{0, 4}, max: 2},
		{enum: nvml.GPU_INSTANCE_PROFILE_4_SLICE, id: 5, compute: 4, size: 4, starts: []int{0}, max: 1},
		{enum: nvml.GPU_INSTANCE_PROFILE_7_SLICE, id: 0, compute: 7, size: 8, starts: []int{0}, max: 1},
	}
}

// migTable is a product's MIG facts, one entry per migShapes() entry.
type migTable struct {
	names   [7]string
	memory  [7]uint64
	sms     [7]int
	engines [7]engines
}

func (t migTable) profiles() []*migProfile {
	shapes := migShapes()
	out := make([]*migProfile, len(shapes))
	for i, s := range shapes {
		out[i] = &migProfile{
			name: t.names[i], enum: s.enum, id: s.id, compute: s.compute, size: s.size,
			starts: s.starts, max: s.max, memoryMiB: t.memory[i], sms: t.sms[i], engines: t.engines[i],
		}
	}
	return out
}

// ampereEngines are the A100's engines per profile (NVIDIA MIG user guide).
func ampereEngines() [7]engines {
	return [7]engines{
		{copy: 1},
		{copy: 1, decoder: 1, jpeg: 1, ofa: 1},
		{copy: 1, decoder: 1},
		{copy: 2, decoder: 1},
		{copy: 3, decoder: 2},
		{copy: 4, decoder: 2},
		{copy: 7, decoder: 5, jpeg: 1, ofa: 1},
	}
}

// hopperEngines are the H100/H200 engines per profile (real H200
// `nvidia-smi mig -lgip` listing).
func hopperEngines() [7]engines {
	return [7]engines{
		{copy: 1, decoder: 1, jpeg: 1},
		{copy: 1, decoder: 1, jpeg: 1, ofa: 1},
		{copy: 1, decoder: 1, jpeg: 1},
		{copy: 2, decoder: 2, jpeg: 2},
		{copy: 3, decoder: 3, jpeg: 3},
		{copy: 4, decoder: 4, jpeg: 4},
		{copy: 8, decoder: 7, jpeg: 7, ofa: 1},
	}
}

// blackwellEngines are the B200 engines per profile: the 1g, 1g+me, 1g
// wide and 2g rows from the real B200 `nvidia-smi mig -lgip` listings in
// NVIDIA/mig-parted#166 and #187; the 3g, 4g and 7g rows are *unverified*
// (extrapolated: one decoder and JPEG per slice, two copy engines per
// slice, one OFA on 7g).
func blackwellEngines() [7]engines {
	return [7]engines{
		{copy: 2, decoder: 1, jpeg: 1},
		{copy: 2, decoder: 1, jpeg: 1, ofa: 1},
		{copy: 2, decoder: 1, jpeg: 1},
		{copy: 4, decoder: 2, jpeg: 2},
		{copy: 6, decoder: 3, jpeg: 3},
		{copy: 8, decoder: 4, jpeg: 4},
		{copy: 14, decoder: 7, jpeg: 7, ofa: 1},
	}
}

// PCI device IDs of the NVSwitch generations (device << 16 | vendor).
const (
	nvswitchGen2 = 0x1AF110DE // DGX A100 / HGX A100 baseboards
	nvswitchGen3 = 0x22A310DE // DGX H100 / HGX H100 and H200 baseboards
	// nvswitchGen4 is the NVLink 5 switch of HGX B200 baseboards.
	// *unverified*: no public lspci listing found; a placeholder ID.
	nvswitchGen4 = 0x2B0010DE
)

// catalog is the product catalog, sorted by key. Every figure names its
// public source; figures marked *unverified* are extrapolations to check on
// a real GPU (test/realgpu). Sources:
//
//   - [MIG guide]: NVIDIA's MIG user guide, "Supported MIG Profiles" tables
//     (profile names, instance limits, placements, engines).
//   - [mig-parted]: NVIDIA/mig-parted's default config (device IDs and the
//     profile names and counts per device).
//   - [lgip]: real `nvidia-smi mig -lgip` listings quoted in public issues
//     (H200: NVIDIA/mig-parted#120; B200: NVIDIA/mig-parted#166 and #187,
//     NVIDIA/gpu-operator#1351), which give memory in GiB and SM counts.
//   - [go-nvml mock]: go-nvml's dgxa100 mock, whose A100 figures match real
//     listings.
//   - [brief]: NVIDIA's product briefs and datasheets (memory, SMs, NVLink
//     links per GPU: A100 12 x NVLink 3, H100/H200 18 x NVLink 4, B200 18 x
//     NVLink 5, H100 NVL pairs bridged by three NVLink bridges = 12 links).
//
// Memory sizes are those go-nvlib needs to derive the canonical MIG profile
// names from (its rule: the MIG fraction of the GPU rounded up to eighths,
// times the GPU's memory in whole GiB, rounded).
type catalog struct {
	products []*product
}

// newCatalog builds the catalog.
func newCatalog() *catalog {
	a100SMs := [7]int{14, 14, 14, 28, 42, 56, 98}    // [go-nvml mock]
	hopperSMs := [7]int{16, 16, 26, 32, 60, 64, 132} // [lgip] H200; *unverified* for H100 SXM and H100 NVL
	products := []*product{
		{
			// [go-nvml mock], [MIG guide]; 108 SMs [brief].
			key: "A100-SXM4-40GB", name: "NVIDIA A100-SXM4-40GB", pciDeviceID: 0x20B010DE,
			arch: nvml.DEVICE_ARCH_AMPERE, brand: nvml.BRAND_NVIDIA, ccMajor: 8, ccMinor: 0,
			memoryMiB: 40960, sms: 108, nvlinkLanes: 12, nvswitches: 6, switchPCIDeviceID: nvswitchGen2,
			mig: migTable{
				names:   [7]string{"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
				memory:  [7]uint64{4864, 4864, 9856, 9856, 19968, 19968, 40192},
				sms:     a100SMs,
				engines: ampereEngines(),
			}.profiles(),
		},
		{
			// [go-nvml mock], [MIG guide]; 2g.20gb also in a real listing (XuehaiPan/nvitop#8).
			key: "A100-SXM4-80GB", name: "NVIDIA A100-SXM4-80GB", pciDeviceID: 0x20B210DE,
			arch: nvml.DEVICE_ARCH_AMPERE, brand: nvml.BRAND_NVIDIA, ccMajor: 8, ccMinor: 0,
			memoryMiB: 81920, sms: 108, nvlinkLanes: 12, nvswitches: 6, switchPCIDeviceID: nvswitchGen2,
			mig: migTable{
				names:   [7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
				memory:  [7]uint64{9856, 9856, 19968, 19968, 40192, 40192, 80384},
				sms:     a100SMs,
				engines: ampereEngines(),
			}.profiles(),
		},
		{
			// Names and counts [mig-parted]; total 81559 MiB as nvidia-smi
			// lists an H100 SXM5 80GB; per-profile memory *unverified*
			// (prototype catalog), SMs *unverified* (the H200 pattern).
			key: "H100-80GB-HBM3", name: "NVIDIA H100 80GB HBM3", pciDeviceID: 0x233010DE,
			arch: nvml.DEVICE_ARCH_HOPPER, brand: nvml.BRAND_NVIDIA, ccMajor: 9, ccMinor: 0,
			memoryMiB: 81559, sms: 132, nvlinkLanes: 18, nvswitches: 4, switchPCIDeviceID: nvswitchGen3,
			mig: migTable{
				names:   [7]string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
				memory:  [7]uint64{9984, 9984, 20096, 20096, 40320, 40320, 81152},
				sms:     hopperSMs,
				engines: hopperEngines(),
			}.profiles(),
		},
		{
			// H100 NVL (PCIe card, 94 GB HBM3, pairs bridged by three
			// NVLink bridges: NV12) [brief]; PCI ID 0x2321 and profile
			// names 1g.12gb ... 7g.94gb [mig-parted]. Total memory 95830
			// MiB and every per-profile figure *unverified* (the H100 SXM
			// figures scaled by 94/80, rounded to 128 MiB).
			key: "H100-NVL", name: "NVIDIA H100 NVL", pciDeviceID: 0x232110DE,
			arch: nvml.DEVICE_ARCH_HOPPER, brand: nvml.BRAND_NVIDIA, ccMajor: 9, ccMinor: 0,
			memoryMiB: 95830, sms: 132, nvlinkLanes: 18,
			mig: migTable{
				names:   [7]string{"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"},
				memory:  [7]uint64{11776, 11776, 23552, 23552, 47360, 47360, 95232},
				sms:     hopperSMs,
				engines: hopperEngines(),
			}.profiles(),
		},
		{
			// [lgip] NVIDIA/mig-parted#120 (every figure), total 143771 MiB.
			key: "H200-141GB", name: "NVIDIA H200", pciDeviceID: 0x233510DE,
			arch: nvml.DEVICE_ARCH_HOPPER, brand: nvml.BRAND_NVIDIA, ccMajor: 9, ccMinor: 0,
			memoryMiB: 143771, sms: 132, nvlinkLanes: 18, nvswitches: 4, switchPCIDeviceID: nvswitchGen3,
			mig: migTable{
				names:   [7]string{"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
				memory:  [7]uint64{16384, 16384, 33024, 33024, 71168, 71168, 143104},
				sms:     hopperSMs,
				engines: hopperEngines(),
			}.profiles(),
		},
		{
			// B200 (HGX B200 baseboard, 18 x NVLink 5 through two NVLink
			// 5 switch chips [brief]); PCI ID 0x2901 and names [mig-parted].
			// [lgip] NVIDIA/mig-parted#187: 1g.23gb 20.50 GiB (20992 MiB)
			// 18 SMs, 1g.45gb 44.25 GiB (45312 MiB) 30 SMs, 2g.45gb 36 SMs.
			// *unverified*: total 183359 MiB (as nvidia-smi lists a B200;
			// go-nvlib needs 179-180 GiB for these names), 148 SMs, and
			// the 3g/4g/7g memory (88.00 / 88.00 / 178.50 GiB) and SMs
			// (54 / 72 / 148).
			key: "B200", name: "NVIDIA B200", pciDeviceID: 0x290110DE,
			arch: nvml.DEVICE_ARCH_BLACKWELL, brand: nvml.BRAND_NVIDIA, ccMajor: 10, ccMinor: 0,
			memoryMiB: 183359, sms: 148, nvlinkLanes: 18, nvswitches: 2, switchPCIDeviceID: nvswitchGen4,
			mig: migTable{
				names:   [7]string{"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"},
				memory:  [7]uint64{20992, 20992, 45312, 45312, 90112, 90112, 182784},
				sms:     [7]int{18, 18, 30, 36, 54, 72, 148},
				engines: blackwellEngines(),
			}.profiles(),
		},
		{
			// A PCIe card without MIG or NVLink, for workstation-like
			// nodes. PCI ID 0x27B8, 58 SMs [brief]; 23034 MiB as nvidia-smi
			// lists it (*unverified*).
			key: "L4", name: "NVIDIA L4", pciDeviceID: 0x27B810DE,
			arch: nvml.DEVICE_ARCH_ADA, brand: nvml.BRAND_NVIDIA, ccMajor: 8, ccMinor: 9,
			memoryMiB: 23034, sms: 58, memoryErrors: pageRetirement,
		},
		{
			// L40S: PCIe, 48 GB GDDR6 with ECC, 142 SMs, no MIG, no NVLink
			// [brief]; PCI ID 0x26B9; 46068 MiB as nvidia-smi lists it
			// (*unverified*).
			key: "L40S", name: "NVIDIA L40S", pciDeviceID: 0x26B910DE,
			arch: nvml.DEVICE_ARCH_ADA, brand: nvml.BRAND_NVIDIA, ccMajor: 8, ccMinor: 9,
			memoryMiB: 46068, sms: 142, memoryErrors: pageRetirement,
		},
	}
	slices.SortFunc(products, func(a, b *product) int { return strings.Compare(a.key, b.key) })
	return &catalog{products: products}
}

// product returns the product with the given key.
func (c *catalog) product(key string) (*product, bool) {
	for _, p := range c.products {
		if p.key == key {
			return p, true
		}
	}
	return nil, false
}

// keys lists the product keys, sorted.
func (c *catalog) keys() []string {
	out := make([]string, len(c.products))
	for i, p := range c.products {
		out[i] = p.key
	}
	return out
}

// migCapable reports whether the product supports MIG.
func (p *product) migCapable() bool { return len(p.mig) > 0 }

// profileByName returns the MIG profile with the given canonical name.
func (p *product) profileByName(name string) (*migProfile, bool) {
	for _, m := range p.mig {
		if m.name == name {
			return m, true
		}
	}
	return nil, false
}

// profileByEnum returns the MIG profile for a GPU_INSTANCE_PROFILE_* value.
func (p *product) profileByEnum(enum int) (*migProfile, bool) {
	for _, m := range p.mig {
		if m.enum == enum {
			return m, true
		}
	}
	return nil, false
}

// profileByID returns the MIG profile with the given GpuInstanceProfileInfo.Id.
func (p *product) profileByID(id uint32) (*migProfile, bool) {
	for _, m := range p.mig {
		if m.id == id {
			return m, true
		}
	}
	return nil, false
}

// profileNames lists the product's MIG profile names in catalog order.
func (p *product) profileNames() []string {
	out := make([]string, len(p.mig))
	for i, m := range p.mig {
		out[i] = m.name
	}
	return out
}

// ciSlices maps COMPUTE_INSTANCE_PROFILE_* values the catalog's products
// support to their compute slice counts.
func ciSlices(enum int) (int, bool) {
	switch enum {
	case nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE:
		return 1, true
	case nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE:
		return 2, true
	case nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE:
		return 3, true
	case nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE:
		return 4, true
	case nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE:
		return 7, true
	}
	return 0, false
}

// ciEnum is the COMPUTE_INSTANCE_PROFILE_* value (and profile ID) for a
// compute instance of the given number of slices.
func ciEnum(slices int) (int, bool) {
	for e := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		if s, ok := ciSlices(e); ok && s == slices {
			return e, true
		}
	}
	return 0, false
}

// ciFits reports whether a compute instance of c slices can exist in a GPU
// instance of g compute slices, as `nvidia-smi mig -lcip` lists them (1c, 2c,
// 3c on a 3g; 1c, 2c, 4c on a 4g; 1c, 2c, 3c, 4c, 7c on a 7g).
func ciFits(c, g int) bool {
	if _, ok := ciEnum(c); !ok || c > g {
		return false
	}
	return c == g || 2*c <= g+1
}

// ciSMs is the number of SMs of a c-slice compute instance in GPU instance
// profile gi: the whole instance's when c fills it, else c times a 1-slice
// instance's.
func (p *product) ciSMs(gi *migProfile, c int) int {
	if c == gi.compute {
		return gi.sms
	}
	return p.mig[0].sms * c
}
