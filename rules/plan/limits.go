package plan

import (
	"errors"
	"fmt"
	"slices"
)

// Caps on what one plan may advertise. rules.Parse enforces MaxReplicas on
// every rule; RuleSet.Plan and ValidatePlan (which the plugin manager calls
// on every plan it is given) enforce all three on the resulting plan, so a
// rules file `featureplug rules check` accepts can never make the agent
// allocate without bound.
//
// The values come from real hardware and from what the kubelet accepts:
//
//   - MaxReplicas: MPS serves at most 48 clients per GPU (60 on Hopper),
//     and time-slicing more containers than a node runs pods (110 by
//     default, a few hundred at most in practice) only adds IDs nobody can
//     use; 1024 leaves an order of magnitude of headroom.
//   - MaxDevicesPerResource: the largest GPU boards hold 8 GPUs (HGX
//     A100/H100/H200/B200), and 8 x MaxReplicas = 8192 device IDs. One
//     ListAndWatch response carries them all; at ~100 bytes a device that is
//     under 1 MiB, well inside the kubelet's 4 MiB gRPC message limit, and a
//     GetPreferredAllocation listing them all (~60 bytes an ID) stays under
//     the device plugins' 1 MiB request cap.
//   - MaxDevicesPerNode: 16 GPUs (the most a fake node and the largest
//     real nodes hold) x MaxReplicas, or 8 GPUs x 7 MIG devices x 256
//     replicas (14336), fits in 16384 device IDs in all resources together.
const (
	// MaxReplicas is the most replicas sharing.replicas may give one device.
	MaxReplicas = 1024
	// MaxDevicesPerResource is the most device IDs (replicas included) one
	// resource may advertise.
	MaxDevicesPerResource = 8192
	// MaxDevicesPerNode is the most device IDs (replicas included) all the
	// resources of a plan may advertise together.
	MaxDevicesPerNode = 16384
)

// DeviceReplicas returns how many device IDs the kubelet sees for one device of
// a resource with this sharing: Replicas when its strategy shares devices
// (StrategySpec.Shares), 1 otherwise.
func (s Sharing) DeviceReplicas() int {
	if spec, ok := s.Spec(); !ok || !spec.Shares || s.Replicas < 2 {
		return 1
	}
	return s.Replicas
}

// AdvertisedDevices returns how many device IDs the resource advertises:
// its devices times their replicas. It saturates rather than overflow.
func (r *Resource) AdvertisedDevices() int {
	n, reps := len(r.Devices), r.Sharing.DeviceReplicas()
	if n > 0 && reps > MaxDevicesPerNode*4/n {
		return MaxDevicesPerNode * 4 // over every cap; exact value irrelevant
	}
	return n * reps
}

// CheckReplicas is the one check of a replicas value against MaxReplicas.
func CheckReplicas(replicas int) error {
	if replicas > MaxReplicas {
		return fmt.Errorf("must be at most %d (plan.MaxReplicas)", MaxReplicas)
	}
	return nil
}

// CheckResourceCaps checks one resource of a plan against MaxReplicas and
// MaxDevicesPerResource.
func CheckResourceCaps(r *Resource) error {
	if r.Sharing.Replicas < 0 {
		return fmt.Errorf("resource %s: sharing.replicas: must not be negative (have %d)", r.Name, r.Sharing.Replicas)
	}
	if err := CheckReplicas(r.Sharing.Replicas); err != nil {
		return fmt.Errorf("resource %s: sharing.replicas: %w (have %d)", r.Name, err, r.Sharing.Replicas)
	}
	if n := r.AdvertisedDevices(); n > MaxDevicesPerResource {
		return fmt.Errorf("resource %s: %d devices x %d replicas = %d device IDs, over the cap of %d per resource (plan.MaxDevicesPerResource)",
			r.Name, len(r.Devices), r.Sharing.DeviceReplicas(), n, MaxDevicesPerResource)
	}
	return nil
}

// CheckNodeCap checks the total of a plan's device IDs against
// MaxDevicesPerNode.
func CheckNodeCap(resources []Resource) error {
	total := 0
	for i := range resources {
		total += resources[i].AdvertisedDevices()
	}
	if total > MaxDevicesPerNode {
		return fmt.Errorf("the plan advertises %d device IDs in %d resources, over the cap of %d per node (plan.MaxDevicesPerNode)",
			total, len(resources), MaxDevicesPerNode)
	}
	return nil
}

// ValidatePlan checks a plan against the caps (MaxReplicas,
// MaxDevicesPerResource, MaxDevicesPerNode) and checks that every resource
// name is valid (ValidateResourceName). RuleSet.Plan makes only plans that
// pass; the plugin manager calls it on every plan it is given, so that a plan made
// some other way is refused by the same code.
func ValidatePlan(p *Plan) error {
	if p == nil {
		return errors.New("nil plan")
	}
	var errs []error
	for i := range p.Resources {
		r := &p.Resources[i]
		if err := ValidateResourceName(r.Name); err != nil {
			errs = append(errs, fmt.Errorf("resource %d: %w", i, err))
		}
		if err := CheckResourceCaps(r); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, validateVFIO(p)...) // vfio.go
	if err := CheckNodeCap(append(slices.Clip(p.Resources), p.VFIO...)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
