package dra

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/migctl"
	"github.com/featureplug/featureplug/discovery/migplace"
	"github.com/featureplug/featureplug/rules/plan"
)

// Partitioner is what the Node needs to prepare the devices of GPUs
// partitioned on demand (Table entries with Partition set).
type Partitioner struct {
	// NVML is the library MIG devices are created through (nil before
	// the first discovery).
	NVML func() nvml.Interface
	// WriteCDI writes the CDI spec of a claim's devices (plugin/cdi's
	// ClaimSpecs.Write) and returns their CDI device IDs in order;
	// RemoveCDI removes it.
	WriteCDI  func(claimUID, resource string, devs []plan.Device) ([]string, error)
	RemoveCDI func(claimUID string) error
	// Changed is called, without blocking, after a MIG device was
	// created or destroyed: the agent discovers the GPUs again, so the
	// new device flows through discovery and the plan like any other.
	Changed func()
	// CrashAt, a test hook, kills the process (SIGKILL) when a prepare
	// reaches the step it names (one of PrepareSteps).
	CrashAt string
}

// The steps of a dynamic prepare, for Partitioner.CrashAt.
const (
	StepBeforeNVML      = "before-nvml"
	StepAfterGPUInst    = "after-gpu-instance"
	StepAfterMIG        = "after-compute-instance"
	StepAfterCDI        = "after-cdi"
	StepAfterCheckpoint = "after-checkpoint"
)

// PrepareSteps are the steps Partitioner.CrashAt may name.
var PrepareSteps = []string{StepBeforeNVML, StepAfterGPUInst, StepAfterMIG, StepAfterCDI, StepAfterCheckpoint}

// CreatedMIG is what a prepared device of a GPU partitioned on demand
// holds: the MIG device created for the claim (or the whole GPU), for
// Unprepare to destroy exactly it.
type CreatedMIG struct {
	// GPU is the parent GPU's UUID.
	GPU string `json:"gpu"`
	// Whole is set for a whole-GPU device: nothing was created.
	Whole bool `json:"whole,omitempty"`
	// UUID, ProfileID and Placement are the MIG device's.
	UUID      string             `json:"uuid,omitempty"`
	ProfileID uint32             `json:"profileID,omitempty"`
	Placement migplace.Placement `json:"placement"`
}

// createdSet is the UUIDs of the MIG devices the Node created for claims,
// read by the DRA sink's layout (a GPU holding a MIG device featureplug
// did not create is not offered).
type createdSet struct {
	mu   sync.Mutex
	uuid map[string]bool
	// placements are those of pending MIG devices (placementKey): a MIG
	// device there is the pending prepare's.
	placements map[string]bool
}

func (s *createdSet) addPlacement(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.placements == nil {
		s.placements = map[string]bool{}
	}
	s.placements[key] = true
}

func (s *createdSet) removePlacement(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.placements, key)
}

func (s *createdSet) hasPlacement(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.placements[key]
}

func (s *createdSet) add(uuid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.uuid == nil {
		s.uuid = map[string]bool{}
	}
	s.uuid[uuid] = true
}

func (s *createdSet) remove(uuid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.uuid, uuid)
}

// addClaims adds the MIG devices created for the given prepared claims.
func (s *createdSet) addClaims(claims map[string]PreparedClaim) {
	for _, c := range claims {
		for _, d := range c.Devices {
			if d.MIG != nil && d.MIG.UUID != "" {
				s.add(d.MIG.UUID)
			}
		}
	}
}

func (s *createdSet) has(uuid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.uuid[uuid]
}

// CreatedMIG reports whether the Node created the MIG device with the
// given UUID at placement pl of GPU gpu for a claim it holds prepared, or
// a prepare of which (cut short by a crash) recorded that placement.
func (n *Node) CreatedMIG(gpu, uuid string, pl migplace.Placement) bool {
	return n.created.has(uuid) || n.created.hasPlacement(placementKey(gpu, CreatedMIG{Placement: pl}))
}

// nvml returns the NVML MIG devices are made through, nil before the
// first discovery.
func (n *Node) nvml() nvml.Interface {
	if n.opts.Partition.NVML == nil {
		return nil
	}
	return n.opts.Partition.NVML()
}

// crashAt kills the process at a prepare step the test hook names.
func (n *Node) crashAt(step string) {
	if n.opts.Partition.CrashAt == step {
		n.log.Warn("test hook: killing the agent at a dynamic MIG prepare step", "step", step)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

// prepareDynamic prepares a device of a GPU partitioned on demand for a
// claim: for a placement, MIG mode on (where it can change without a
// reset), the GPU instance at exactly the placement and its compute
// instance (migctl.Ensure, which finds what an earlier attempt cut short
// left rather than creating a second one), then the CDI spec of the MIG
// device; for the whole GPU, MIG mode off and its CDI spec. The caller
// checkpoints the result before answering.
func (n *Node) prepareDynamic(pc PreparedClaim, d Device) (*CreatedMIG, []string, error) {
	p := n.opts.Partition
	a := d.Partition
	if p.NVML == nil || p.WriteCDI == nil {
		return nil, nil, errors.New("this node cannot create MIG devices (no NVML or CDI spec writer)")
	}
	lib := p.NVML()
	if lib == nil {
		return nil, nil, errors.New("GPUs not discovered yet")
	}
	if !a.Whole {
		t := a.Target
		if err := n.recordPending(pc, CreatedMIG{GPU: t.GPUUUID, ProfileID: t.ProfileID, Placement: t.Placement}); err != nil {
			return nil, nil, err
		}
	}
	n.crashAt(StepBeforeNVML)
	if a.Whole {
		if err := migctl.SetMode(lib, a.GPU, false); err != nil {
			return nil, nil, fmt.Errorf("the whole GPU %s needs MIG mode off: %w", a.GPU, err)
		}
		ids, err := p.WriteCDI(pc.UID, d.Resource, []plan.Device{{ID: a.GPU, Kind: plan.DeviceGPU, Rule: d.Device.Rule}})
		if err != nil {
			return nil, nil, err
		}
		n.crashAt(StepAfterCDI)
		return &CreatedMIG{GPU: a.GPU, Whole: true}, ids, nil
	}
	t := a.Target
	if err := migctl.SetMode(lib, t.GPUUUID, true); err != nil {
		return nil, nil, fmt.Errorf("enabling MIG mode for %s: %w (a GPU whose mode change needs a reset, such as an A100, is partitioned on demand only with MIG mode enabled beforehand: nvidia-smi -i <gpu> -mig 1 and a reset)", t, err)
	}
	if n.opts.Partition.CrashAt == StepAfterGPUInst {
		if err := createGPUInstanceOnly(lib, t); err != nil {
			return nil, nil, err
		}
		n.crashAt(StepAfterGPUInst)
	}
	dev, created, err := migctl.Ensure(lib, t)
	if err != nil {
		return nil, nil, err
	}
	n.created.add(dev.UUID)
	n.crashAt(StepAfterMIG)
	ids, err := p.WriteCDI(pc.UID, d.Resource, []plan.Device{{ID: dev.UUID, Kind: plan.DeviceMIG, Profile: t.Profile, Rule: d.Device.Rule}})
	if err != nil {
		if created {
			// Nothing records it yet: take it back, so that a claim
			// deleted before the kubelet retries leaks nothing.
			if derr := migctl.Destroy(lib, t.GPUUUID, t.Placement, dev.UUID); derr == nil {
				n.created.remove(dev.UUID)
			}
		}
		return nil, nil, err
	}
	n.crashAt(StepAfterCDI)
	n.log.Info("MIG device created for a claim", "claim", pc.String(), "gpu", t.GPUUUID, "profile", t.Profile,
		"placement", t.Placement.String(), "mig", dev.UUID, "created", created)
	return &CreatedMIG{GPU: t.GPUUUID, UUID: dev.UUID, ProfileID: t.ProfileID, Placement: t.Placement}, ids, nil
}

// createGPUInstanceOnly creates the GPU instance of t without its compute
// instance: what a prepare killed between the two NVML calls leaves (the
// StepAfterGPUInst test hook).
func createGPUInstanceOnly(lib nvml.Interface, t migplace.Target) error {
	h, ret := lib.DeviceGetHandleByUUID(t.GPUUUID)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %s: %s", t.GPUUUID, ret.Error())
	}
	info, ret := h.GetGpuInstanceProfileInfo(t.ProfileEnum)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("profile of %s: %s", t, ret.Error())
	}
	pl := t.Placement.NVML()
	if _, ret := h.CreateGpuInstanceWithPlacement(&info, &pl); ret != nvml.SUCCESS && ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		return fmt.Errorf("creating the GPU instance of %s: %s", t, ret.Error())
	}
	return nil
}

// unprepareDynamic destroys what a prepared claim's devices created (the
// MIG devices, never one of another UUID: migctl.Destroy) and removes the
// claim's CDI spec.
func (n *Node) unprepareDynamic(pc PreparedClaim) error {
	p := n.opts.Partition
	var lib nvml.Interface
	if p.NVML != nil {
		lib = p.NVML()
	}
	dynamic := false
	for _, d := range pc.Devices {
		m := d.MIG
		if m == nil {
			continue
		}
		dynamic = true
		if m.Whole {
			continue
		}
		if lib == nil {
			return fmt.Errorf("destroying MIG device %s: GPUs not discovered yet", m.UUID)
		}
		if err := migctl.Destroy(lib, m.GPU, m.Placement, m.UUID); err != nil {
			if errors.Is(err, migctl.ErrNotCreated) {
				// Someone replaced it: it is not featureplug's to destroy.
				n.log.Warn("the MIG device at a claim's placement is not the one created for it; left alone", "claim", pc.String(), "err", err)
			} else {
				return err
			}
		}
		n.created.remove(m.UUID)
		n.log.Info("MIG device of a claim destroyed", "claim", pc.String(), "gpu", m.GPU, "placement", m.Placement.String(), "mig", m.UUID)
		n.leaveMIGMode(lib, m.GPU)
	}
	if !dynamic {
		return nil
	}
	if p.RemoveCDI != nil {
		if err := p.RemoveCDI(pc.UID); err != nil {
			return err
		}
	}
	if p.Changed != nil {
		p.Changed()
	}
	return nil
}

// rollBackDynamic takes back what a claim that is not prepared after all
// created (a device of it failed, or the checkpoint could not be written).
func (n *Node) rollBackDynamic(pc PreparedClaim) {
	if err := n.unprepareDynamic(pc); err != nil {
		n.log.Warn("taking back the MIG devices of a claim not prepared; the kubelet's retry finds them", "claim", pc.String(), "err", err)
	}
	// Its pending records stay: the kubelet retries the claim, or
	// unprepares it, which destroys whatever the failed attempt left.
}

// preparedDynamic follows the checkpoint of newly prepared claims: the
// test hook's last step, and a new discovery when one created a device.
func (n *Node) preparedDynamic(uids []string) {
	for _, uid := range uids {
		for _, d := range n.claims[uid].Devices {
			if d.MIG != nil {
				n.crashAt(StepAfterCheckpoint)
				if p := n.opts.Partition.Changed; p != nil {
					p()
				}
				return
			}
		}
	}
}

// leaveMIGMode turns MIG mode off on a GPU the rules no longer partition
// on demand once the last MIG device created there is gone, where that
// needs no reset: a rules edit that stopped partitioning the GPU converges
// to a whole GPU when its claims end. A GPU still partitioned on demand
// keeps its mode, as does one whose mode change needs a reset.
func (n *Node) leaveMIGMode(lib nvml.Interface, gpu string) {
	if n.partitioned(gpu) {
		return
	}
	devs, err := migctl.List(lib, gpu)
	if err != nil || len(devs) > 0 {
		return
	}
	h, ret := lib.DeviceGetHandleByUUID(gpu)
	if ret != nvml.SUCCESS {
		return
	}
	major, _, ret := h.GetCudaComputeCapability()
	if ret != nvml.SUCCESS || migplace.ModeChangeNeedsReset(major) {
		return
	}
	if err := migctl.SetMode(lib, gpu, false); err != nil {
		n.log.Warn("could not turn MIG mode off on a GPU no longer partitioned on demand", "gpu", gpu, "err", err)
		return
	}
	n.log.Info("MIG mode turned off: the GPU is no longer partitioned on demand and its last MIG device is gone", "gpu", gpu)
}

// partitioned reports whether the current Table offers a device of the
// GPU partitioned on demand.
func (n *Node) partitioned(gpu string) bool {
	t := n.opts.Table()
	if t == nil {
		return false
	}
	for _, d := range t.byName {
		if d.Partition != nil && d.Partition.GPU == gpu {
			return true
		}
	}
	return false
}
