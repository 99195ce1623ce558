package fakenode

import (
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/migplace"
)

// noInstance is the GPU or compute instance ID of an event that names none.
const noInstance = 0xFFFFFFFF

// gpuInstanceID is the GPU instance ID NVML gives an instance of the given
// size (memory slices) at the given start. IDs follow from the placement,
// not from the order of creation, so that one layout always has the same
// IDs: the whole GPU is 0, halves 1-2, quarters 3-6, eighths 7-14 (modelled
// on A100 listings, where the seven 1g instances are IDs 7-13).
func gpuInstanceID(size, start int) uint32 {
	switch size {
	case 8:
		return 0
	case 4:
		return uint32(1 + (4-start)/4)
	case 2:
		if start == 6 {
			return 6
		}
		return uint32(5 - start/2) // 0 -> 5, 2 -> 4, 4 -> 3
	default:
		return uint32(7 + start)
	}
}

// GetMaxMigDeviceCount returns 7 with MIG enabled, 0 with it disabled.
func (h *gpuHandle) GetMaxMigDeviceCount() (int, nvml.Return) {
	if !h.gpu.product.migCapable() {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	n := h.gpu.node
	n.mu.RLock()
	defer n.mu.RUnlock()
	if !h.gpu.migEnabled {
		return 0, nvml.SUCCESS
	}
	return computeSlices, nvml.SUCCESS
}

// GetMigDeviceHandleByIndex returns the index-th MIG device, ordered by GPU
// instance ID, then compute instance ID. An index past the last MIG device
// is ERROR_NOT_FOUND; past the maximum, ERROR_INVALID_ARGUMENT.
func (h *gpuHandle) GetMigDeviceHandleByIndex(index int) (nvml.Device, nvml.Return) {
	if !h.gpu.product.migCapable() {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	n := h.gpu.node
	n.mu.RLock()
	defer n.mu.RUnlock()
	if !h.gpu.migEnabled {
		return nil, nvml.ERROR_NOT_FOUND
	}
	if index < 0 || index >= computeSlices {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	cis := h.gpu.computeInstancesLocked()
	if index >= len(cis) {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return cis[index].handle, nvml.SUCCESS
}

// GetGpuInstanceProfileInfo returns GPU instance profile profile (a
// GPU_INSTANCE_PROFILE_* value); NOT_SUPPORTED for profiles the product
// lacks, and for every profile of a GPU whose MIG mode change needs a
// reset (Ampere) while its MIG mode is disabled: NVIDIA's DRA driver finds
// no profile data on such a GPU, while Hopper and later GPUs list their
// profiles in either mode (the driver creates MIG devices on them after
// enabling MIG).
func (h *gpuHandle) GetGpuInstanceProfileInfo(profile int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	p, ret := h.profileByEnum(profile)
	if ret != nvml.SUCCESS {
		return nvml.GpuInstanceProfileInfo{}, ret
	}
	if h.gpu.modeChangeNeedsReset() {
		n := h.gpu.node
		n.mu.RLock()
		enabled := h.gpu.migEnabled
		n.mu.RUnlock()
		if !enabled {
			return nvml.GpuInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
	}
	return p.info(), nvml.SUCCESS
}

func (h *gpuHandle) profileByEnum(enum int) (*migProfile, nvml.Return) {
	prod := h.gpu.product
	switch {
	case !prod.migCapable():
		return nil, nvml.ERROR_NOT_SUPPORTED
	case enum < 0 || enum >= nvml.GPU_INSTANCE_PROFILE_COUNT:
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	p, ok := prod.profileByEnum(enum)
	if !ok {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	return p, nvml.SUCCESS
}

// profileOf resolves a GpuInstanceProfileInfo passed by the caller.
func (h *gpuHandle) profileOf(info *nvml.GpuInstanceProfileInfo) (*migProfile, nvml.Return) {
	if !h.gpu.product.migCapable() {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	if info == nil {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	p, ok := h.gpu.product.profileByID(info.Id)
	if !ok {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return p, nvml.SUCCESS
}

// GetGpuInstancePossiblePlacements lists where an instance of the profile
// may go, whether or not MIG is enabled or the slices are free.
func (h *gpuHandle) GetGpuInstancePossiblePlacements(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstancePlacement, nvml.Return) {
	p, ret := h.profileOf(info)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return p.placements(), nvml.SUCCESS
}

// GetGpuInstanceRemainingCapacity returns how many more instances of the
// profile could be created now.
func (h *gpuHandle) GetGpuInstanceRemainingCapacity(info *nvml.GpuInstanceProfileInfo) (int, nvml.Return) {
	p, ret := h.profileOf(info)
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	n := h.gpu.node
	n.mu.RLock()
	defer n.mu.RUnlock()
	if !h.gpu.migEnabled {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	used, count := h.gpu.usedSlicesLocked(p)
	remaining := 0
	for count+remaining < p.max {
		s, ok := firstFit(p, used)
		if !ok {
			break
		}
		used |= slotMask(s, p.size)
		remaining++
	}
	return remaining, nvml.SUCCESS
}

// CreateGpuInstance creates an instance of the profile at the lowest free
// placement; ERROR_INSUFFICIENT_RESOURCES when none is left.
func (h *gpuHandle) CreateGpuInstance(info *nvml.GpuInstanceProfileInfo) (nvml.GpuInstance, nvml.Return) {
	p, ret := h.profileOf(info)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return h.gpu.createGPUInstance(p, -1)
}

// CreateGpuInstanceWithPlacement creates an instance of the profile at the
// given placement.
func (h *gpuHandle) CreateGpuInstanceWithPlacement(info *nvml.GpuInstanceProfileInfo, placement *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
	p, ret := h.profileOf(info)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	if placement == nil || int(placement.Size) != p.size || !slices.Contains(p.starts, int(placement.Start)) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return h.gpu.createGPUInstance(p, int(placement.Start))
}

// GetGpuInstances returns the instances of the profile, by ID.
func (h *gpuHandle) GetGpuInstances(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
	p, ret := h.profileOf(info)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	n := h.gpu.node
	n.mu.RLock()
	defer n.mu.RUnlock()
	if !h.gpu.migEnabled {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	var out []nvml.GpuInstance
	for _, gi := range h.gpu.gis {
		if gi.profile == p {
			out = append(out, gi)
		}
	}
	return out, nvml.SUCCESS
}

// GetGpuInstanceById returns the GPU instance with the given ID.
func (h *gpuHandle) GetGpuInstanceById(id int) (nvml.GpuInstance, nvml.Return) {
	if !h.gpu.product.migCapable() {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	n := h.gpu.node
	n.mu.RLock()
	defer n.mu.RUnlock()
	if !h.gpu.migEnabled {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	for _, gi := range h.gpu.gis {
		if int(gi.id) == id {
			return gi, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// usedSlicesLocked returns the memory slices in use and the number of
// instances of profile p. The caller holds node.mu.
func (g *gpu) usedSlicesLocked(p *migProfile) (used uint, count int) {
	for _, gi := range g.gis {
		used |= slotMask(gi.start, gi.profile.size)
		if gi.profile == p {
			count++
		}
	}
	return used, count
}

// createGPUInstance creates a GPU instance of profile p at start, or at the
// lowest free placement when start is -1.
func (g *gpu) createGPUInstance(p *migProfile, start int) (*gpuInstance, nvml.Return) {
	n := g.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if g.faults.lost {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	if !g.migEnabled {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	used, count := g.usedSlicesLocked(p)
	if count >= p.max {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	if start < 0 {
		s, ok := firstFit(p, used)
		if !ok {
			return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		start = s
	} else if used&slotMask(start, p.size) != 0 {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	snap := g.snapshotLocked()
	gi := &gpuInstance{gpu: g, id: gpuInstanceID(p.size, start), profile: p, start: start}
	g.gis = append(g.gis, gi)
	slices.SortFunc(g.gis, func(a, b *gpuInstance) int { return int(a.id) - int(b.id) })
	if !snap.commitLocked() {
		return nil, nvml.ERROR_UNKNOWN
	}
	return gi, nvml.SUCCESS
}

// computeInstancesLocked lists the GPU's compute instances in MIG device
// index order. The caller holds node.mu.
func (g *gpu) computeInstancesLocked() []*computeInstance {
	var out []*computeInstance
	for _, gi := range g.gis {
		out = append(out, gi.cis...)
	}
	return out
}

// gpuInstance is an nvml.GpuInstance.
type gpuInstance struct {
	unsupportedGpuInstance
	gpu     *gpu
	id      uint32
	profile *migProfile
	start   int

	// Guarded by gpu.node.mu:
	cis       []*computeInstance // sorted by ID
	destroyed bool
}

var _ nvml.GpuInstance = (*gpuInstance)(nil)

// GetInfo returns the instance's ID, profile ID, placement and GPU.
func (gi *gpuInstance) GetInfo() (nvml.GpuInstanceInfo, nvml.Return) {
	n := gi.gpu.node
	n.mu.RLock()
	defer n.mu.RUnlock()
	if gi.destroyed {
		return nvml.GpuInstanceInfo{}, nvml.ERROR_INVALID_ARGUMENT
	}
	return gi.infoLocked(), nvml.SUCCESS
}

func (gi *gpuInstance) infoLocked() nvml.GpuInstanceInfo {
	return nvml.GpuInstanceInfo{
		Device:    gi.gpu.handle,
		Id:        gi.id,
		ProfileId: gi.profile.id,
		Placement: nvml.GpuInstancePlacement{Start: uint32(gi.start), Size: uint32(gi.profile.size)},
	}
}

// Destroy removes the GPU instance; ERROR_IN_USE while it has compute
// instances.
func (gi *gpuInstance) Destroy() nvml.Return {
	n := gi.gpu.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if gi.destroyed {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if gi.gpu.faults.lost {
		return nvml.ERROR_GPU_IS_LOST
	}
	if len(gi.cis) > 0 {
		return nvml.ERROR_IN_USE
	}
	snap := gi.gpu.snapshotLocked()
	gi.destroyed = true
	gi.gpu.gis = slices.DeleteFunc(gi.gpu.gis, func(x *gpuInstance) bool { return x == gi })
	if !snap.commitLocked() {
		return nvml.ERROR_UNKNOWN
	}
	return nvml.SUCCESS
}

// GetComputeInstanceProfileInfo returns compute instance profile profile (a
// COMPUTE_INSTANCE_PROFILE_* value) inside this GPU instance; only the
// shared engine profile exists.
func (gi *gpuInstance) GetComputeInstanceProfileInfo(profile, engProfile int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
	if profile < 0 || profile >= nvml.COMPUTE_INSTANCE_PROFILE_COUNT ||
		engProfile < 0 || engProfile >= nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT {
		return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_INVALID_ARGUMENT
	}
	c, ok := migplace.ComputeInstanceSlices(profile)
	if !ok || !migplace.ComputeInstanceFits(c, gi.profile.compute) {
		return nvml.ComputeInstanceProfileInfo{}, nvml.ERROR_NOT_SUPPORTED
	}
	return gi.ciProfileInfo(c), nvml.SUCCESS
}

func (gi *gpuInstance) ciProfileInfo(c int) nvml.ComputeInstanceProfileInfo {
	enum, _ := migplace.ComputeInstanceProfile(c)
	e := gi.profile.engines
	return nvml.ComputeInstanceProfileInfo{
		Id:                    uint32(enum),
		SliceCount:            uint32(c),
		InstanceCount:         uint32(gi.profile.compute / c),
		MultiprocessorCount:   uint32(gi.gpu.product.ciSMs(gi.profile, c)),
		SharedCopyEngineCount: uint32(e.Copy),
		SharedDecoderCount:    uint32(e.Decoder),
		SharedEncoderCount:    uint32(e.Encoder),
		SharedJpegCount:       uint32(e.JPEG),
		SharedOfaCount:        uint32(e.OFA),
	}
}

// ciSlicesOf resolves a ComputeInstanceProfileInfo passed by the caller.
func (gi *gpuInstance) ciSlicesOf(info *nvml.ComputeInstanceProfileInfo) (int, nvml.Return) {
	if info == nil {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	c, ok := migplace.ComputeInstanceSlices(int(info.Id))
	if !ok {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	if !migplace.ComputeInstanceFits(c, gi.profile.compute) {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return c, nvml.SUCCESS
}

// CreateComputeInstance creates a compute instance of the profile;
// ERROR_INSUFFICIENT_RESOURCES when the GPU instance has no room left.
func (gi *gpuInstance) CreateComputeInstance(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
	c, ret := gi.ciSlicesOf(info)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	return gi.createComputeInstance(c)
}

// GetComputeInstanceRemainingCapacity returns how many more compute
// instances of the profile fit.
func (gi *gpuInstance) GetComputeInstanceRemainingCapacity(info *nvml.ComputeInstanceProfileInfo) (int, nvml.Return) {
	c, ret := gi.ciSlicesOf(info)
	if ret != nvml.SUCCESS {
		return 0, ret
	}
	n := gi.gpu.node
	n.mu.RLock()
	defer n.mu.RUnlock()
	return (gi.profile.compute - gi.usedComputeLocked()) / c, nvml.SUCCESS
}

// GetComputeInstances returns the compute instances of the profile, by ID.
func (gi *gpuInstance) GetComputeInstances(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
	c, ret := gi.ciSlicesOf(info)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	n := gi.gpu.node
	n.mu.RLock()
	defer n.mu.RUnlock()
	var out []nvml.ComputeInstance
	for _, ci := range gi.cis {
		if ci.slices == c {
			out = append(out, ci)
		}
	}
	return out, nvml.SUCCESS
}

// GetComputeInstanceById returns the compute instance with the given ID.
func (gi *gpuInstance) GetComputeInstanceById(id int) (nvml.ComputeInstance, nvml.Return) {
	n := gi.gpu.node
	n.mu.RLock()
	defer n.mu.RUnlock()
	for _, ci := range gi.cis {
		if int(ci.id) == id {
			return ci, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

func (gi *gpuInstance) usedComputeLocked() int {
	used := 0
	for _, ci := range gi.cis {
		used += ci.slices
	}
	return used
}

// createComputeInstance creates a compute instance of c slices with the
// lowest free ID, and its MIG device.
func (gi *gpuInstance) createComputeInstance(c int) (*computeInstance, nvml.Return) {
	n := gi.gpu.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if gi.destroyed {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if gi.gpu.faults.lost {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	if gi.usedComputeLocked()+c > gi.profile.compute {
		return nil, nvml.ERROR_INSUFFICIENT_RESOURCES
	}
	snap := gi.gpu.snapshotLocked()
	var id uint32
	for slices.ContainsFunc(gi.cis, func(ci *computeInstance) bool { return ci.id == id }) {
		id++
	}
	ci := &computeInstance{
		gi: gi, id: id, slices: c,
		uuid: migUUID(n.Name(), gi.gpu.index, gi.id, id, gi.gpu.nextGenerationLocked()),
	}
	ci.handle = newMIGHandle(ci)
	gi.cis = append(gi.cis, ci)
	slices.SortFunc(gi.cis, func(a, b *computeInstance) int { return int(a.id) - int(b.id) })
	if !snap.commitLocked() {
		return nil, nvml.ERROR_UNKNOWN
	}
	return ci, nvml.SUCCESS
}

// computeInstance is an nvml.ComputeInstance; each one is a MIG device.
type computeInstance struct {
	// The fake implements every method nvml.ComputeInstance has today; the
	// stub answers those a go-nvml upgrade adds.
	unsupportedComputeInstance //nolint:unused // see above

	gi     *gpuInstance
	id     uint32
	slices int
	uuid   string
	handle *migHandle

	// Guarded by node.mu:
	destroyed bool
	// inUse: a process runs on the MIG device (Node.SetInUse).
	inUse bool
}

var _ nvml.ComputeInstance = (*computeInstance)(nil)

// GetInfo returns the compute instance's ID, profile ID, GPU instance and GPU.
func (ci *computeInstance) GetInfo() (nvml.ComputeInstanceInfo, nvml.Return) {
	n := ci.gi.gpu.node
	n.mu.RLock()
	defer n.mu.RUnlock()
	if ci.destroyed {
		return nvml.ComputeInstanceInfo{}, nvml.ERROR_INVALID_ARGUMENT
	}
	enum, _ := migplace.ComputeInstanceProfile(ci.slices)
	return nvml.ComputeInstanceInfo{
		Device:      ci.gi.gpu.handle,
		GpuInstance: ci.gi,
		Id:          ci.id,
		ProfileId:   uint32(enum),
		Placement:   nvml.ComputeInstancePlacement{Start: ci.startLocked(), Size: uint32(ci.slices)},
	}, nvml.SUCCESS
}

// startLocked is the compute instance's first compute slice: instances are
// packed in ID order.
func (ci *computeInstance) startLocked() uint32 {
	start := 0
	for _, o := range ci.gi.cis {
		if o == ci {
			break
		}
		start += o.slices
	}
	return uint32(start)
}

// Destroy removes the compute instance and its MIG device; ERROR_IN_USE
// while a process runs on it.
func (ci *computeInstance) Destroy() nvml.Return {
	n := ci.gi.gpu.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if ci.destroyed {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if ci.gi.gpu.faults.lost {
		return nvml.ERROR_GPU_IS_LOST
	}
	if ci.inUse {
		return nvml.ERROR_IN_USE
	}
	snap := ci.gi.gpu.snapshotLocked()
	ci.destroyed = true
	ci.gi.cis = slices.DeleteFunc(ci.gi.cis, func(x *computeInstance) bool { return x == ci })
	if !snap.commitLocked() {
		return nvml.ERROR_UNKNOWN
	}
	return nvml.SUCCESS
}

// migHandle is the nvml.Device of a MIG device. Once its compute instance
// is destroyed, it answers ERROR_INVALID_ARGUMENT.
type migHandle struct {
	unsupportedDevice
	ci *computeInstance
}

var _ nvml.Device = (*migHandle)(nil)

func newMIGHandle(ci *computeInstance) *migHandle {
	return &migHandle{ci: ci}
}

// live reports whether the MIG device still exists.
func (h *migHandle) live() bool {
	n := h.ci.gi.gpu.node
	n.mu.RLock()
	defer n.mu.RUnlock()
	return !h.ci.destroyed
}

// IsMigDeviceHandle reports true.
func (h *migHandle) IsMigDeviceHandle() (bool, nvml.Return) { return true, nvml.SUCCESS }

// GetUUID returns the MIG device UUID, "MIG-...".
func (h *migHandle) GetUUID() (string, nvml.Return) {
	if !h.live() {
		return "", nvml.ERROR_INVALID_ARGUMENT
	}
	return h.ci.uuid, nvml.SUCCESS
}

// GetIndex returns the MIG device's index under its GPU, the one
// GetMigDeviceHandleByIndex takes.
func (h *migHandle) GetIndex() (int, nvml.Return) {
	n := h.ci.gi.gpu.node
	n.mu.RLock()
	defer n.mu.RUnlock()
	i := slices.Index(h.ci.gi.gpu.computeInstancesLocked(), h.ci)
	if i < 0 {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	return i, nvml.SUCCESS
}

// GetName returns "<product> MIG <profile>", e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb".
func (h *migHandle) GetName() (string, nvml.Return) {
	if !h.live() {
		return "", nvml.ERROR_INVALID_ARGUMENT
	}
	return h.ci.gi.gpu.product.name + " MIG " + h.ci.profileName(), nvml.SUCCESS
}

// profileName is the MIG device's profile name, with the compute instance
// size when it does not fill its GPU instance ("1c.3g.20gb").
func (ci *computeInstance) profileName() string {
	if ci.slices == ci.gi.profile.compute {
		return ci.gi.profile.name
	}
	return string(rune('0'+ci.slices)) + "c." + ci.gi.profile.name
}

// GetGpuInstanceId returns the GPU instance ID.
func (h *migHandle) GetGpuInstanceId() (int, nvml.Return) {
	if !h.live() {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	return int(h.ci.gi.id), nvml.SUCCESS
}

// GetComputeInstanceId returns the compute instance ID.
func (h *migHandle) GetComputeInstanceId() (int, nvml.Return) {
	if !h.live() {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	return int(h.ci.id), nvml.SUCCESS
}

// GetDeviceHandleFromMigDeviceHandle returns the parent GPU.
func (h *migHandle) GetDeviceHandleFromMigDeviceHandle() (nvml.Device, nvml.Return) {
	if !h.live() {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return h.ci.gi.gpu.handle, nvml.SUCCESS
}

// GetCudaComputeCapability returns the parent GPU's compute capability.
func (h *migHandle) GetCudaComputeCapability() (int, int, nvml.Return) {
	if !h.live() {
		return 0, 0, nvml.ERROR_INVALID_ARGUMENT
	}
	p := h.ci.gi.gpu.product
	return p.ccMajor, p.ccMinor, nvml.SUCCESS
}

// GetMemoryInfo returns the GPU instance's memory, all of it free.
func (h *migHandle) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	if !h.live() {
		return nvml.Memory{}, nvml.ERROR_INVALID_ARGUMENT
	}
	total := h.ci.gi.profile.memoryMiB * mib
	return nvml.Memory{Total: total, Free: total}, nvml.SUCCESS
}

// GetMemoryInfo_v2 returns the GPU instance's memory, all of it free.
func (h *migHandle) GetMemoryInfo_v2() (nvml.Memory_v2, nvml.Return) {
	if !h.live() {
		return nvml.Memory_v2{}, nvml.ERROR_INVALID_ARGUMENT
	}
	total := h.ci.gi.profile.memoryMiB * mib
	return nvml.Memory_v2{Version: nvml.STRUCT_VERSION(nvml.Memory_v2{}, 2), Total: total, Free: total}, nvml.SUCCESS
}

// GetAttributes returns the MIG device's SMs, shared engines, slices and
// memory.
func (h *migHandle) GetAttributes() (nvml.DeviceAttributes, nvml.Return) {
	if !h.live() {
		return nvml.DeviceAttributes{}, nvml.ERROR_INVALID_ARGUMENT
	}
	gi := h.ci.gi
	e := gi.profile.engines
	return nvml.DeviceAttributes{
		MultiprocessorCount:       uint32(gi.gpu.product.ciSMs(gi.profile, h.ci.slices)),
		SharedCopyEngineCount:     uint32(e.Copy),
		SharedDecoderCount:        uint32(e.Decoder),
		SharedEncoderCount:        uint32(e.Encoder),
		SharedJpegCount:           uint32(e.JPEG),
		SharedOfaCount:            uint32(e.OFA),
		GpuInstanceSliceCount:     uint32(gi.profile.compute),
		ComputeInstanceSliceCount: uint32(h.ci.slices),
		MemorySizeMB:              gi.profile.memoryMiB,
	}, nvml.SUCCESS
}
