package fakenode

import (
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/migplace"
)

// computeSlices is the number of compute slices of every MIG-capable product
// in the catalog, and so the most MIG devices one GPU can have.
const computeSlices = migplace.ComputeSlices

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
	// mig holds the GPU instance profiles, from migplace's table (the
	// product's NVML name); nil means not MIG capable.
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

// migProfile is one GPU instance profile of a product, as the fake reads
// it from migplace's table.
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
	engines   migplace.Engines
}

// info is the profile as GetGpuInstanceProfileInfo reports it.
func (p *migProfile) info() nvml.GpuInstanceProfileInfo {
	return nvml.GpuInstanceProfileInfo{
		Id:                  p.id,
		IsP2pSupported:      0,
		SliceCount:          uint32(p.compute),
		InstanceCount:       uint32(p.max),
		MultiprocessorCount: uint32(p.sms),
		CopyEngineCount:     uint32(p.engines.Copy),
		DecoderCount:        uint32(p.engines.Decoder),
		EncoderCount:        uint32(p.engines.Encoder),
		JpegCount:           uint32(p.engines.JPEG),
		OfaCount:            uint32(p.engines.OFA),
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

// migProfiles converts a product's profiles from migplace's table.
func migProfiles(name string) []*migProfile {
	geo, ok := migplace.ProductByName(name)
	if !ok {
		return nil
	}
	out := make([]*migProfile, len(geo.Profiles))
	for i, p := range geo.Profiles {
		starts := make([]int, len(p.Placements))
		for k, pl := range p.Placements {
			starts[k] = pl.Start
		}
		out[i] = &migProfile{
			name: p.Name, enum: p.Enum, id: p.ID, compute: p.ComputeSlices, size: p.MemorySliceCount(),
			starts: starts, max: p.MaxInstances, memoryMiB: p.MemoryMiB, sms: p.Multiprocessors, engines: p.Engines,
		}
	}
	return out
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
	products := []*product{
		{
			// [go-nvml mock], [MIG guide]; 108 SMs [brief].
			key: "A100-SXM4-40GB", name: "NVIDIA A100-SXM4-40GB", pciDeviceID: 0x20B010DE,
			arch: nvml.DEVICE_ARCH_AMPERE, brand: nvml.BRAND_NVIDIA, ccMajor: 8, ccMinor: 0,
			memoryMiB: 40960, sms: 108, nvlinkLanes: 12, nvswitches: 6, switchPCIDeviceID: nvswitchGen2,
		},
		{
			// [go-nvml mock], [MIG guide]; 2g.20gb also in a real listing (XuehaiPan/nvitop#8).
			key: "A100-SXM4-80GB", name: "NVIDIA A100-SXM4-80GB", pciDeviceID: 0x20B210DE,
			arch: nvml.DEVICE_ARCH_AMPERE, brand: nvml.BRAND_NVIDIA, ccMajor: 8, ccMinor: 0,
			memoryMiB: 81920, sms: 108, nvlinkLanes: 12, nvswitches: 6, switchPCIDeviceID: nvswitchGen2,
		},
		{
			// Names and counts [mig-parted]; total 81559 MiB as nvidia-smi
			// lists an H100 SXM5 80GB; per-profile memory *unverified*
			// (prototype catalog), SMs *unverified* (the H200 pattern).
			key: "H100-80GB-HBM3", name: "NVIDIA H100 80GB HBM3", pciDeviceID: 0x233010DE,
			arch: nvml.DEVICE_ARCH_HOPPER, brand: nvml.BRAND_NVIDIA, ccMajor: 9, ccMinor: 0,
			memoryMiB: 81559, sms: 132, nvlinkLanes: 18, nvswitches: 4, switchPCIDeviceID: nvswitchGen3,
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
		},
		{
			// [lgip] NVIDIA/mig-parted#120 (every figure), total 143771 MiB.
			key: "H200-141GB", name: "NVIDIA H200", pciDeviceID: 0x233510DE,
			arch: nvml.DEVICE_ARCH_HOPPER, brand: nvml.BRAND_NVIDIA, ccMajor: 9, ccMinor: 0,
			memoryMiB: 143771, sms: 132, nvlinkLanes: 18, nvswitches: 4, switchPCIDeviceID: nvswitchGen3,
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
	for _, p := range products {
		p.mig = migProfiles(p.name)
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

// ciSMs is the number of SMs of a c-slice compute instance in GPU instance
// profile gi: the whole instance's when c fills it, else c times a 1-slice
// instance's.
func (p *product) ciSMs(gi *migProfile, c int) int {
	if c == gi.compute {
		return gi.sms
	}
	return p.mig[0].sms * c
}
