package discovery

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/migplace"
)

// MIGGeometry is how a MIG-capable GPU can be partitioned: its GPU
// instance profiles with their possible placements, as NVML reports them
// (GetGpuInstanceProfileInfo, GetGpuInstancePossiblePlacements). It is
// immutable while the GPU's MIG mode stays.
type MIGGeometry struct {
	// Profiles are ordered by compute slices, then memory slices, then
	// NVML enum: 1g, 1g+me, 1g wide, 2g, 3g, 4g, 7g on the catalog's GPUs.
	Profiles []migplace.Profile `json:"profiles"`
	// ModeChangeNeedsReset is set on GPUs whose MIG mode changes only
	// through a GPU reset (Ampere): a mode change stays pending while any
	// process holds the GPU.
	ModeChangeNeedsReset bool `json:"modeChangeNeedsReset,omitempty"`
}

// Profile returns the geometry's profile with the given name.
func (g *MIGGeometry) Profile(name string) (*migplace.Profile, bool) {
	if g == nil {
		return nil, false
	}
	for i := range g.Profiles {
		if g.Profiles[i].Name == name {
			return &g.Profiles[i], true
		}
	}
	return nil, false
}

// ProfileByID returns the profile with the given GpuInstanceProfileInfo.Id.
func (g *MIGGeometry) ProfileByID(id uint32) (*migplace.Profile, bool) {
	if g == nil {
		return nil, false
	}
	for i := range g.Profiles {
		if g.Profiles[i].ID == id {
			return &g.Profiles[i], true
		}
	}
	return nil, false
}

// ProfileNames lists the profile names in order.
func (g *MIGGeometry) ProfileNames() []string {
	if g == nil {
		return nil
	}
	out := make([]string, len(g.Profiles))
	for i := range g.Profiles {
		out[i] = g.Profiles[i].Name
	}
	return out
}

// ReadMIGGeometry adds to inv, read through lib, each MIG-capable GPU's
// MIG geometry (GPU.MIGGeometry) and each MIG device's GPU instance
// profile and placement (MIGDevice.GPUInstanceProfileID and Placement):
// what dynamic MIG plans from. Discover does not read them, as they cost
// one NVML call per GPU instance profile enum (GPU_INSTANCE_PROFILE_COUNT)
// and one per supported profile on every MIG-capable GPU, and two per MIG
// device; a caller whose rules partition GPUs on demand calls it after
// Discover, with the same lib. A lost GPU is skipped.
func ReadMIGGeometry(lib nvml.Interface, inv *Inventory) error {
	r := &reader{lib: lib, devlib: device.New(lib)}
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		if !g.MIGCapable || g.Lost {
			continue
		}
		dev := "GPU " + strconv.Itoa(g.Index)
		h, ret := lib.DeviceGetHandleByUUID(g.UUID)
		if err := check(ret, "device handle", dev); err != nil {
			return err
		}
		geo, err := r.readMIGGeometry(h, g, dev)
		if err != nil {
			return err
		}
		g.MIGGeometry = geo
		kept := g.MIGDevices[:0]
		for j := range g.MIGDevices {
			m := g.MIGDevices[j]
			gone, err := readMIGPlacement(h, &m, fmt.Sprintf("%s MIG device %d", dev, m.Index))
			if err != nil {
				return err
			}
			if !gone {
				kept = append(kept, m)
			}
		}
		g.MIGDevices = kept
	}
	return nil
}

// readMIGGeometry reads a MIG-capable GPU's profiles and placements. A GPU
// that lists no profile (an Ampere GPU with MIG mode disabled, a vGPU
// guest) has no geometry: nil.
func (r *reader) readMIGGeometry(h nvml.Device, g *GPU, dev string) (*MIGGeometry, error) {
	geo := &MIGGeometry{ModeChangeNeedsReset: migplace.ModeChangeNeedsReset(g.ComputeMajor)}
	for enum := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := h.GetGpuInstanceProfileInfo(enum)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_INVALID_ARGUMENT:
			continue // a profile this GPU (or driver) does not have
		default:
			return nil, check(ret, fmt.Sprintf("GPU instance profile %d", enum), dev)
		}
		pls, ret := h.GetGpuInstancePossiblePlacements(&info)
		if ok, err := optional(ret, fmt.Sprintf("placements of GPU instance profile %d", info.Id), dev); err != nil {
			return nil, err
		} else if !ok || len(pls) == 0 {
			continue
		}
		p := migplace.Profile{
			Enum: enum, ID: info.Id, ComputeSlices: int(info.SliceCount), MaxInstances: int(info.InstanceCount),
			MemoryMiB: info.MemorySizeMB, Multiprocessors: int(info.MultiprocessorCount),
			Engines: Engines{
				Copy: int(info.CopyEngineCount), Decoder: int(info.DecoderCount), Encoder: int(info.EncoderCount),
				JPEG: int(info.JpegCount), OFA: int(info.OfaCount),
			},
		}
		for _, pl := range pls {
			p.Placements = append(p.Placements, migplace.PlacementOf(pl))
		}
		slices.SortFunc(p.Placements, func(a, b migplace.Placement) int { return cmp.Compare(a.Start, b.Start) })
		ci, ok := p.FullComputeInstance()
		if !ok {
			continue // no compute instance fills it: not a MIG device featureplug can name
		}
		name, err := r.devlib.NewMigProfile(enum, ci, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, info.MemorySizeMB, g.MemoryMiB*mib)
		if err != nil {
			continue // a profile go-nvlib cannot name (newer than it)
		}
		p.Name = name.String()
		geo.Profiles = append(geo.Profiles, p)
	}
	if len(geo.Profiles) == 0 {
		return nil, nil
	}
	slices.SortStableFunc(geo.Profiles, func(a, b migplace.Profile) int {
		return cmp.Or(cmp.Compare(a.ComputeSlices, b.ComputeSlices), cmp.Compare(a.MemorySliceCount(), b.MemorySliceCount()), cmp.Compare(a.Enum, b.Enum))
	})
	return geo, nil
}

// readMIGPlacement reads the GPU instance profile and placement of the MIG
// device m of parent; gone reports that its GPU instance was destroyed
// since Discover listed it.
func readMIGPlacement(parent nvml.Device, m *MIGDevice, mdev string) (gone bool, err error) {
	gi, ret := parent.GetGpuInstanceById(m.GPUInstanceID)
	if vanished(ret) {
		return true, nil
	}
	if err := check(ret, "GPU instance", mdev); err != nil {
		return false, err
	}
	info, ret := gi.GetInfo()
	if vanished(ret) {
		return true, nil
	}
	if err := check(ret, "GPU instance info", mdev); err != nil {
		return false, err
	}
	pl := migplace.PlacementOf(info.Placement)
	m.GPUInstanceProfileID = &info.ProfileId
	m.Placement = &pl
	return false, nil
}
