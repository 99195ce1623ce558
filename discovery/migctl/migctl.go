// Package migctl creates and destroys MIG devices through NVML: the one
// place featureplug changes a GPU's MIG layout, for dynamic MIG's Prepare
// and Unprepare. Its operations are idempotent and safe to run at the same
// time on one GPU, so that a Prepare retried after a crash (the kubelet
// retries until it succeeds) or two Prepare calls at once converge on one
// MIG device per placement:
//
//   - Ensure makes sure the MIG device of a target exists: it finds one
//     already at the placement (finishing a GPU instance left without its
//     compute instance), or creates it; it never creates a second one.
//   - Destroy removes the MIG device at a placement, and only if it is the
//     one the caller created (its UUID), so a MIG device featureplug did
//     not create is never destroyed; a placement already empty is done.
//   - SetMode enables or disables MIG mode, saying whether the change is
//     pending (a process holds the GPU, or on Ampere it needs a reset).
//
// NVML arbitrates between concurrent callers (an occupied placement is
// ERROR_INSUFFICIENT_RESOURCES); migctl keeps no state of its own.
package migctl

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/migplace"
)

// Errors Ensure, Destroy and SetMode wrap, for callers to tell apart.
var (
	// ErrMIGDisabled: the GPU's MIG mode is disabled (call SetMode first).
	ErrMIGDisabled = errors.New("MIG mode is disabled")
	// ErrPlacementTaken: another GPU instance occupies memory slices of
	// the placement.
	ErrPlacementTaken = errors.New("the placement is taken")
	// ErrNotCreated: the MIG device at the placement is not the one the
	// caller created; it is left alone.
	ErrNotCreated = errors.New("the MIG device at the placement is not the one featureplug created")
	// ErrInUse: a process holds the device, so NVML refuses the change.
	ErrInUse = errors.New("in use by another process")
	// ErrModePending: the MIG mode change is recorded but waits (for the
	// GPU to be idle, or on Ampere for a reset).
	ErrModePending = errors.New("the MIG mode change is pending")
)

// Device is a GPU instance at a placement and the compute instance that
// fills it: one MIG device.
type Device struct {
	// GPU is the physical GPU's UUID.
	GPU string `json:"gpu"`
	// UUID is the MIG device's UUID; "" for a GPU instance without a
	// compute instance.
	UUID string `json:"uuid,omitempty"`
	// ProfileID is the GPU instance profile ID.
	ProfileID uint32 `json:"profileID"`
	// Placement is the GPU instance's placement.
	Placement migplace.Placement `json:"placement"`
	// GPUInstanceID and ComputeInstanceID are NVML's IDs (-1 for no
	// compute instance).
	GPUInstanceID     int `json:"gpuInstanceID"`
	ComputeInstanceID int `json:"computeInstanceID"`
	// ComputeInstances counts the GPU instance's compute instances: 1 for
	// a MIG device featureplug made.
	ComputeInstances int `json:"computeInstances"`
}

// String names the device for messages.
func (d Device) String() string {
	uuid := d.UUID
	if uuid == "" {
		uuid = "no compute instance"
	}
	return fmt.Sprintf("GPU instance %d (profile %d) at %s (%s)", d.GPUInstanceID, d.ProfileID, d.Placement, uuid)
}

// nvmlError wraps an NVML return with what was being done.
func nvmlError(what string, ret nvml.Return) error {
	switch ret {
	case nvml.ERROR_IN_USE:
		return fmt.Errorf("%s: %w (%s)", what, ErrInUse, ret.Error())
	case nvml.ERROR_NOT_SUPPORTED:
		return fmt.Errorf("%s: %w or not supported (%s)", what, ErrMIGDisabled, ret.Error())
	}
	return fmt.Errorf("%s: %s", what, ret.Error())
}

// gpu returns the GPU with the given UUID.
func gpu(lib nvml.Interface, uuid string) (nvml.Device, error) {
	h, ret := lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return nil, nvmlError("GPU "+uuid, ret)
	}
	return h, nil
}

// migEnabled reports whether h's current MIG mode is enabled.
func migEnabled(h nvml.Device, uuid string) (bool, error) {
	current, _, ret := h.GetMigMode()
	if ret != nvml.SUCCESS {
		return false, nvmlError("MIG mode of GPU "+uuid, ret)
	}
	return current == nvml.DEVICE_MIG_ENABLE, nil
}

// SetMode enables (enabled true) or disables MIG mode on a GPU. It is nil
// when the mode is as asked, at once or already; it wraps ErrModePending
// when NVML recorded the change but could not make it (a process holds
// the GPU: ErrInUse too; or, on Ampere, the host cannot reset the GPU),
// and ErrInUse when disabling is refused because GPU instances exist.
func SetMode(lib nvml.Interface, gpuUUID string, enabled bool) error {
	h, err := gpu(lib, gpuUUID)
	if err != nil {
		return err
	}
	if cur, err := migEnabled(h, gpuUUID); err != nil || cur == enabled {
		return err
	}
	mode, verb := nvml.DEVICE_MIG_DISABLE, "disabling"
	if enabled {
		mode, verb = nvml.DEVICE_MIG_ENABLE, "enabling"
	}
	activation, ret := h.SetMigMode(mode)
	what := verb + " MIG mode on GPU " + gpuUUID
	switch {
	case ret != nvml.SUCCESS:
		return nvmlError(what, ret)
	case activation == nvml.SUCCESS:
		return nil
	case activation == nvml.ERROR_IN_USE:
		return fmt.Errorf("%s: %w until no process holds the GPU (%w)", what, ErrModePending, ErrInUse)
	case activation == nvml.ERROR_RESET_REQUIRED:
		return fmt.Errorf("%s: %w until the GPU is reset (the host cannot reset it, as in a pass-through VM)", what, ErrModePending)
	}
	return fmt.Errorf("%s: %w (activation %s)", what, ErrModePending, activation.Error())
}

// List returns the GPU's GPU instances, by placement start, each with its
// compute instance (the first, when it has several).
func List(lib nvml.Interface, gpuUUID string) ([]Device, error) {
	h, err := gpu(lib, gpuUUID)
	if err != nil {
		return nil, err
	}
	var out []Device
	for enum := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := h.GetGpuInstanceProfileInfo(enum)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("GPU instance profile %d of GPU %s", enum, gpuUUID), ret)
		}
		gis, ret := h.GetGpuInstances(&info)
		if ret != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("GPU instances of profile %d on GPU %s", info.Id, gpuUUID), ret)
		}
		for _, gi := range gis {
			d, gone, err := describe(h, gpuUUID, gi)
			if err != nil {
				return nil, err
			}
			if !gone {
				out = append(out, d)
			}
		}
	}
	slices.SortFunc(out, func(a, b Device) int { return a.Placement.Start - b.Placement.Start })
	return out, nil
}

// describe reads a GPU instance and its compute instances. gone reports
// a GPU instance destroyed while it was read (NVML invalidates the handles
// of destroyed instances: ERROR_INVALID_ARGUMENT); a compute instance
// destroyed meanwhile is left out.
func describe(h nvml.Device, gpuUUID string, gi nvml.GpuInstance) (d Device, gone bool, err error) {
	info, ret := gi.GetInfo()
	if ret == nvml.ERROR_INVALID_ARGUMENT {
		return Device{}, true, nil
	}
	if ret != nvml.SUCCESS {
		return Device{}, false, nvmlError("GPU instance info on GPU "+gpuUUID, ret)
	}
	d = Device{GPU: gpuUUID, ProfileID: info.ProfileId, Placement: migplace.PlacementOf(info.Placement), GPUInstanceID: int(info.Id), ComputeInstanceID: -1}
	var first nvml.ComputeInstance
	for enum := range nvml.COMPUTE_INSTANCE_PROFILE_COUNT {
		ciInfo, ret := gi.GetComputeInstanceProfileInfo(enum, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			continue // a profile this GPU instance does not have
		}
		cis, ret := gi.GetComputeInstances(&ciInfo)
		if ret == nvml.ERROR_INVALID_ARGUMENT {
			return Device{}, true, nil
		}
		if ret != nvml.SUCCESS {
			return Device{}, false, nvmlError(fmt.Sprintf("compute instances of %s", d), ret)
		}
		for _, ci := range cis {
			ciI, ret := ci.GetInfo()
			if ret == nvml.ERROR_INVALID_ARGUMENT {
				continue // destroyed meanwhile
			}
			if ret != nvml.SUCCESS {
				return Device{}, false, nvmlError(fmt.Sprintf("compute instance of %s", d), ret)
			}
			d.ComputeInstances++
			if d.ComputeInstanceID < 0 || int(ciI.Id) < d.ComputeInstanceID {
				d.ComputeInstanceID, first = int(ciI.Id), ci
			}
		}
	}
	if d.ComputeInstanceID < 0 {
		return d, false, nil
	}
	// MIG device indexes shift while others are created or destroyed, so
	// a lookup can miss a device that exists: look again.
	for range 3 {
		uuid, err := migUUID(h, d.GPUInstanceID, d.ComputeInstanceID)
		if err == nil {
			d.UUID = uuid
			return d, false, nil
		}
		if _, ret := first.GetInfo(); ret == nvml.ERROR_INVALID_ARGUMENT {
			// Destroyed while its MIG device was looked up.
			d.ComputeInstances--
			d.ComputeInstanceID = -1
			return d, false, nil
		}
		if errors.Is(err, errNoHandle) {
			continue
		}
		return Device{}, false, fmt.Errorf("%s: %w", d, err)
	}
	return Device{}, false, fmt.Errorf("%s: %w", d, errNoHandle)
}

// errNoHandle: no MIG device handle has the GPU and compute instance IDs.
var errNoHandle = errors.New("no MIG device handle for the compute instance")

// migUUID finds the UUID of the MIG device of GPU instance gi, compute
// instance ci among h's MIG device handles.
func migUUID(h nvml.Device, gi, ci int) (string, error) {
	count, ret := h.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return "", nvmlError("MIG device count", ret)
	}
	for i := range count {
		m, ret := h.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return "", nvmlError(fmt.Sprintf("MIG device %d", i), ret)
		}
		g, ret1 := m.GetGpuInstanceId()
		c, ret2 := m.GetComputeInstanceId()
		if ret1 != nvml.SUCCESS || ret2 != nvml.SUCCESS || g != gi || c != ci {
			continue
		}
		uuid, ret := m.GetUUID()
		if ret != nvml.SUCCESS {
			return "", nvmlError(fmt.Sprintf("UUID of MIG device %d", i), ret)
		}
		return uuid, nil
	}
	return "", fmt.Errorf("GPU instance %d, compute instance %d: %w", gi, ci, errNoHandle)
}

// at returns the GPU's instance at exactly the placement, and those that
// overlap it otherwise.
func at(lib nvml.Interface, gpuUUID string, pl migplace.Placement) (*Device, []Device, error) {
	all, err := List(lib, gpuUUID)
	if err != nil {
		return nil, nil, err
	}
	var overlap []Device
	for i := range all {
		if all[i].Placement == pl {
			return &all[i], nil, nil
		}
		if all[i].Placement.Overlaps(pl) {
			overlap = append(overlap, all[i])
		}
	}
	return nil, overlap, nil
}

// Ensure makes sure the MIG device of t exists and returns it: the one
// already at t's placement, with its compute instance created if it had
// none (a Prepare cut short), or a new one. created reports whether this
// call created anything. It fails when MIG mode is disabled
// (ErrMIGDisabled), when another instance takes the placement or part of
// it (ErrPlacementTaken, naming it), and when the instance at the
// placement is of another profile or holds other compute instances
// (ErrNotCreated). Concurrent calls for one target return the same device.
func Ensure(lib nvml.Interface, t migplace.Target) (d Device, created bool, err error) {
	h, err := gpu(lib, t.GPUUUID)
	if err != nil {
		return Device{}, false, err
	}
	if on, err := migEnabled(h, t.GPUUUID); err != nil {
		return Device{}, false, err
	} else if !on {
		return Device{}, false, fmt.Errorf("creating %s: %w", t, ErrMIGDisabled)
	}
	info, ret := h.GetGpuInstanceProfileInfo(t.ProfileEnum)
	if ret != nvml.SUCCESS {
		return Device{}, false, nvmlError(fmt.Sprintf("GPU instance profile %d (%s) on GPU %s", t.ProfileEnum, t.Profile, t.GPUUUID), ret)
	}
	if info.Id != t.ProfileID {
		return Device{}, false, fmt.Errorf("creating %s: GPU instance profile %d of GPU %s has ID %d, not %d", t, t.ProfileEnum, t.GPUUUID, info.Id, t.ProfileID)
	}
	// Twice at most: a concurrent caller may win a step in between.
	for range 2 {
		cur, overlap, err := at(lib, t.GPUUUID, t.Placement)
		if err != nil {
			return Device{}, false, err
		}
		if cur != nil {
			return complete(lib, h, t, *cur, created)
		}
		if len(overlap) > 0 {
			return Device{}, created, fmt.Errorf("creating %s: %w by %s", t, ErrPlacementTaken, devicesString(overlap))
		}
		pl := t.Placement.NVML()
		_, ret := h.CreateGpuInstanceWithPlacement(&info, &pl)
		switch ret {
		case nvml.SUCCESS:
			created = true
		case nvml.ERROR_INSUFFICIENT_RESOURCES:
			// Taken meanwhile (by this target or another): look again.
		default:
			return Device{}, created, nvmlError("creating "+t.String(), ret)
		}
	}
	return Device{}, created, fmt.Errorf("creating %s: %w (by an instance that came and went)", t, ErrPlacementTaken)
}

// complete gives the instance at t's placement the compute instance that
// fills it, unless it has it, and returns the MIG device.
func complete(lib nvml.Interface, h nvml.Device, t migplace.Target, cur Device, created bool) (Device, bool, error) {
	if cur.ProfileID != t.ProfileID {
		return Device{}, created, fmt.Errorf("creating %s: %w: %s is of profile %d", t, ErrNotCreated, cur, cur.ProfileID)
	}
	if cur.ComputeInstances > 1 {
		return Device{}, created, fmt.Errorf("creating %s: %w: %s holds %d compute instances", t, ErrNotCreated, cur, cur.ComputeInstances)
	}
	if cur.ComputeInstances == 1 {
		return cur, created, nil
	}
	gi, ret := h.GetGpuInstanceById(cur.GPUInstanceID)
	if ret != nvml.SUCCESS {
		return Device{}, created, nvmlError(fmt.Sprintf("GPU instance %d on GPU %s", cur.GPUInstanceID, t.GPUUUID), ret)
	}
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(t.ComputeInstanceProfile, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		return Device{}, created, nvmlError(fmt.Sprintf("compute instance profile %d of %s", t.ComputeInstanceProfile, t), ret)
	}
	_, ret = gi.CreateComputeInstance(&ciInfo)
	switch ret {
	case nvml.SUCCESS:
		created = true
	case nvml.ERROR_INSUFFICIENT_RESOURCES:
		// A concurrent caller created it: read it below.
	default:
		return Device{}, created, nvmlError("creating the compute instance of "+t.String(), ret)
	}
	d, gone, err := describe(h, t.GPUUUID, gi)
	if err != nil {
		return Device{}, created, err
	}
	if gone {
		return Device{}, created, fmt.Errorf("creating %s: the GPU instance was destroyed meanwhile", t)
	}
	if d.ComputeInstances != 1 || d.UUID == "" {
		return Device{}, created, fmt.Errorf("creating %s: %w: %s holds %d compute instances", t, ErrNotCreated, d, d.ComputeInstances)
	}
	return d, created, nil
}

// Destroy removes the MIG device at placement pl of a GPU, which must be
// the one with UUID uuid (the caller recorded it when Ensure returned):
// its compute instance, then its GPU instance. A GPU instance without
// compute instances at the placement is taken for what a Prepare or a
// Destroy cut short left of it, and removed too; with uuid "" only such
// a bare GPU instance is removed. A placement already empty is done (nil).
// It wraps ErrNotCreated, touching nothing, for a MIG device of another
// UUID, and ErrInUse when a process still runs on it.
func Destroy(lib nvml.Interface, gpuUUID string, pl migplace.Placement, uuid string) error {
	h, err := gpu(lib, gpuUUID)
	if err != nil {
		return err
	}
	if on, err := migEnabled(h, gpuUUID); err != nil || !on {
		return err // MIG disabled: no MIG device is left
	}
	cur, _, err := at(lib, gpuUUID, pl)
	if err != nil || cur == nil {
		return err
	}
	if (cur.UUID != uuid && cur.ComputeInstances > 0) || cur.ComputeInstances > 1 {
		return fmt.Errorf("destroying the MIG device %q at %s on GPU %s: %w: %s", uuid, pl, gpuUUID, ErrNotCreated, cur)
	}
	gi, ret := h.GetGpuInstanceById(cur.GPUInstanceID)
	if ret == nvml.ERROR_NOT_FOUND {
		return nil // destroyed meanwhile
	}
	if ret != nvml.SUCCESS {
		return nvmlError(fmt.Sprintf("GPU instance %d on GPU %s", cur.GPUInstanceID, gpuUUID), ret)
	}
	if cur.ComputeInstanceID >= 0 {
		ci, ret := gi.GetComputeInstanceById(cur.ComputeInstanceID)
		switch ret {
		case nvml.SUCCESS:
			if ret := ci.Destroy(); ret != nvml.SUCCESS && ret != nvml.ERROR_INVALID_ARGUMENT {
				return nvmlError("destroying the compute instance of "+cur.String(), ret)
			}
		case nvml.ERROR_NOT_FOUND:
		default:
			return nvmlError("compute instance of "+cur.String(), ret)
		}
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS && ret != nvml.ERROR_INVALID_ARGUMENT {
		return nvmlError("destroying "+cur.String(), ret)
	}
	return nil
}

// TargetFor resolves a placement device's profile ID and start on a GPU
// into the target to create, reading the profile from NVML: what Prepare
// needs for a device allocated before a restart, when the plan may no
// longer offer it.
func TargetFor(lib nvml.Interface, gpuUUID string, profileID uint32, start int) (migplace.Target, error) {
	h, err := gpu(lib, gpuUUID)
	if err != nil {
		return migplace.Target{}, err
	}
	for enum := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := h.GetGpuInstanceProfileInfo(enum)
		if ret != nvml.SUCCESS || info.Id != profileID {
			continue
		}
		pls, ret := h.GetGpuInstancePossiblePlacements(&info)
		if ret != nvml.SUCCESS {
			return migplace.Target{}, nvmlError(fmt.Sprintf("placements of profile %d on GPU %s", profileID, gpuUUID), ret)
		}
		ci, ok := migplace.ComputeInstanceProfile(int(info.SliceCount))
		if !ok {
			return migplace.Target{}, fmt.Errorf("GPU %s: no compute instance profile fills profile %d (%d slices)", gpuUUID, profileID, info.SliceCount)
		}
		name := fmt.Sprintf("profile %d", profileID)
		if mem, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
			if p, err := device.New(lib).NewMigProfile(enum, ci, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, info.MemorySizeMB, mem.Total); err == nil {
				name = p.String()
			}
		}
		for _, p := range pls {
			if int(p.Start) == start {
				return migplace.Target{GPUUUID: gpuUUID, Profile: name, ProfileEnum: enum, ProfileID: profileID,
					Placement: migplace.PlacementOf(p), ComputeInstanceProfile: ci}, nil
			}
		}
		return migplace.Target{}, fmt.Errorf("GPU %s: profile %d has no placement at memory slice %d", gpuUUID, profileID, start)
	}
	return migplace.Target{}, fmt.Errorf("GPU %s lists no GPU instance profile with ID %d (is MIG mode enabled?)", gpuUUID, profileID)
}

// devicesString lists devices for messages.
func devicesString(ds []Device) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.String()
	}
	return strings.Join(parts, ", ")
}
