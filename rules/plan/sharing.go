package plan

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// SharingStrategy says how one device is shared between containers.
type SharingStrategy string

// Sharing strategies; each is a row of the strategy table (Lookup).
const (
	SharingNone        SharingStrategy = "none"
	SharingTimeSlicing SharingStrategy = "time-slicing"
	SharingMPS         SharingStrategy = "mps"
)

// Sharing is how a resource's devices are shared.
type Sharing struct {
	// Strategy names a row of the strategy table (Lookup). The zero value
	// means none.
	Strategy SharingStrategy `json:"strategy,omitempty"`
	// Replicas is how many containers may share one device (>= 1).
	Replicas int `json:"replicas,omitempty"`
	// FailRequestsGreaterThanOne rejects requests for more than one replica.
	// A strategy with OnePerContainer (mps) implies it: see
	// OneReplicaPerContainer.
	FailRequestsGreaterThanOne bool `json:"failRequestsGreaterThanOne,omitempty"`
	// MPS holds the per-replica limits when Strategy is mps.
	MPS *MPSLimits `json:"mps,omitempty"`
}

// MPSLimits are the per-replica MPS limits of a resource.
type MPSLimits struct {
	// PinnedMemoryLimitMiB is each client's device memory limit in MiB
	// (default: the GPU's memory divided by the replicas).
	PinnedMemoryLimitMiB uint64 `json:"pinnedMemoryLimitMiB,omitempty"`
	// ActiveThreadPercentage is each client's share of the SMs
	// (default: 100 divided by the replicas).
	ActiveThreadPercentage int `json:"activeThreadPercentage,omitempty"`
}

// StrategySpec is everything featureplug knows about one sharing strategy.
// It is the one home of a strategy: the rules validate and default a rule's
// sharing with it, the device plugin counts replicas and edits containers
// with it, the labeler takes its label from it, and the agent starts a
// daemon when it says so. Adding a strategy is adding a row to the table in
// this file (and its container edits, if any).
type StrategySpec struct {
	// Name is what rules write in sharing.strategy.
	Name SharingStrategy
	// Label is the value of gpu-feature-discovery's
	// <resource>.sharing-strategy label for a shared resource.
	Label string
	// Shares is true when one device is advertised once per replica:
	// sharing.replicas is then required; otherwise it must be 1.
	Shares bool
	// WholeGPUOnly refuses the strategy for MIG devices and for GPUs with
	// MIG enabled.
	WholeGPUOnly bool
	// Daemon is true when a resource needs an MPS control daemon
	// (plugin/mps) up before it is advertised; gpu-feature-discovery's
	// mps.capable label follows it.
	Daemon bool
	// MPSLimits is true when sharing.mps is accepted: its per-client limits
	// are validated and defaulted per plan.
	MPSLimits bool
	// OnePerContainer forces failRequestsGreaterThanOne: a container gets
	// at most one replica of the resource, and a rule that sets
	// failRequestsGreaterThanOne false is an error. NVIDIA's device plugin
	// forces it for MPS, whose per-client limits are one replica's share.
	OnePerContainer bool
	// Container returns what the strategy adds to a container that got an
	// allocation; nil adds nothing.
	Container func(Allocation) ContainerEdits
}

// strategies is the table of sharing strategies, in the order messages list
// them. It is read-only.
var strategies = []StrategySpec{
	{Name: SharingNone, Label: string(SharingNone)},
	{Name: SharingTimeSlicing, Label: string(SharingTimeSlicing), Shares: true},
	{Name: SharingMPS, Label: string(SharingMPS), Shares: true, WholeGPUOnly: true, Daemon: true, MPSLimits: true, OnePerContainer: true, Container: mpsContainer},
}

// Strategies returns the sharing strategies, in table order.
func Strategies() []StrategySpec {
	return append([]StrategySpec(nil), strategies...)
}

// Lookup returns the strategy named name; "" is none.
func Lookup(name SharingStrategy) (StrategySpec, bool) {
	if name == "" {
		name = SharingNone
	}
	for _, s := range strategies {
		if s.Name == name {
			return s, true
		}
	}
	return StrategySpec{}, false
}

// Spec returns the strategy of s; false for an unknown strategy.
func (s Sharing) Spec() (StrategySpec, bool) { return Lookup(s.Strategy) }

// OneReplicaPerContainer reports whether a container may get at most one
// replica of a device set shared this way: FailRequestsGreaterThanOne, or
// a strategy that forces it (StrategySpec.OnePerContainer).
func (s Sharing) OneReplicaPerContainer() bool {
	spec, _ := s.Spec()
	return s.FailRequestsGreaterThanOne || spec.OnePerContainer
}

// Label returns the value gpu-feature-discovery labels as
// <resource>.sharing-strategy, and the replicas it labels: replicas is at
// least 1 and the strategy is none unless the devices are actually shared.
func (s Sharing) Label() (replicas int, label string) {
	replicas = max(s.Replicas, 1)
	spec, ok := s.Spec()
	if replicas == 1 || !ok || !spec.Shares {
		none, _ := Lookup(SharingNone)
		return replicas, none.Label
	}
	return replicas, spec.Label
}

// strategyNames lists the names of the strategies that pass keep, quoted
// or not, joined as `a, b or c`.
func strategyNames(quote bool, keep func(StrategySpec) bool) string {
	var names []string
	for _, s := range strategies {
		if keep(s) {
			n := string(s.Name)
			if quote {
				n = strconv.Quote(n)
			}
			names = append(names, n)
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// SharingSpec is a rule's sharing as written in a rules file. Pointers tell
// "absent" from zero so that "replicas: 0" can be reported and so that an
// absent failRequestsGreaterThanOne takes its strategy's default.
type SharingSpec struct {
	Strategy SharingStrategy `json:"strategy,omitempty"`
	Replicas *int            `json:"replicas,omitempty"`
	// FailRequestsGreaterThanOne defaults to the strategy's
	// OnePerContainer (true for mps, false otherwise); false is an error
	// for a strategy that forces it.
	FailRequestsGreaterThanOne *bool    `json:"failRequestsGreaterThanOne,omitempty"`
	MPS                        *MPSSpec `json:"mps,omitempty"`
}

// MaxPinnedMemoryLimitMiB is the largest sharing.mps.pinnedMemoryLimitMiB
// a rule may write (16 TiB, far above any GPU's memory; the plan checks
// the limit against each GPU's memory).
const MaxPinnedMemoryLimitMiB = 1 << 24

// MPSSpec holds the MPS limits as written. An absent value or 0 means the
// default, filled in per plan because it depends on the devices (see
// Sharing.WithDefaults): the GPU's memory divided by the replicas, and 100
// divided by the replicas. The fields are signed so that a negative value
// gets a range error rather than a type error.
type MPSSpec struct {
	PinnedMemoryLimitMiB   *int64 `json:"pinnedMemoryLimitMiB,omitempty"`
	ActiveThreadPercentage *int   `json:"activeThreadPercentage,omitempty"`
}

// Compile validates a sharing as written, for a rule that claims devices
// of kind, and returns it normalized (strategy and replicas set, MPS limits
// holding only the values written). Each error names its field below fld
// and the value it had. A nil spec is no sharing.
func (spec *SharingSpec) Compile(fld *field.Path, kind DeviceKind) (Sharing, field.ErrorList) {
	out := Sharing{Strategy: SharingNone, Replicas: 1}
	if spec == nil {
		return out, nil
	}
	var errs field.ErrorList
	strategy := spec.Strategy
	if strategy == "" {
		strategy = SharingNone
	}
	st, known := Lookup(strategy)
	switch {
	case !known:
		errs = append(errs, field.Invalid(fld.Child("strategy"), strategy,
			"must be "+strategyNames(true, func(StrategySpec) bool { return true })))
	case st.WholeGPUOnly && kind == DeviceMIG:
		errs = append(errs, field.Invalid(fld.Child("strategy"), strategy,
			fmt.Sprintf("%s is only for devices: gpu (a MIG device is already a partition)", strategy)))
	case st.Shares && kind == DeviceVFIO:
		errs = append(errs, field.Invalid(fld.Child("strategy"), strategy,
			"devices: vfio cannot be shared: a GPU passed through to a virtual machine belongs to that VM alone; remove sharing"))
	}
	out.Strategy = strategy
	switch f := spec.FailRequestsGreaterThanOne; {
	case f == nil:
		out.FailRequestsGreaterThanOne = st.OnePerContainer
	case !*f && st.OnePerContainer:
		errs = append(errs, field.Invalid(fld.Child("failRequestsGreaterThanOne"), false,
			fmt.Sprintf("must be true for strategy %s (its default): each client's limits are one replica's share of a GPU, so a container may hold one replica, as NVIDIA's device plugin forces; remove the field or set it true", strategy)))
	default:
		out.FailRequestsGreaterThanOne = *f
	}

	replicas := fld.Child("replicas")
	switch {
	case spec.Replicas == nil && st.Shares:
		errs = append(errs, field.Required(replicas, fmt.Sprintf("required for strategy %s: how many containers share one device", strategy)))
	case spec.Replicas == nil:
	case *spec.Replicas < 1:
		errs = append(errs, field.Invalid(replicas, *spec.Replicas, "must be at least 1"))
	case CheckReplicas(*spec.Replicas) != nil:
		errs = append(errs, field.Invalid(replicas, *spec.Replicas, CheckReplicas(*spec.Replicas).Error()))
	case known && !st.Shares && *spec.Replicas > 1:
		errs = append(errs, field.Invalid(replicas, *spec.Replicas, fmt.Sprintf("strategy %s shares nothing: set strategy %s, or replicas 1",
			strategy, strategyNames(false, func(s StrategySpec) bool { return s.Shares }))))
	default:
		out.Replicas = *spec.Replicas
	}

	mpsFld := fld.Child("mps")
	if spec.MPS != nil && !st.MPSLimits {
		errs = append(errs, field.Forbidden(mpsFld, fmt.Sprintf("only for strategy %s (have strategy %s)",
			strategyNames(false, func(s StrategySpec) bool { return s.MPSLimits }), strategy)))
	}
	if !st.MPSLimits {
		return out, errs
	}
	out.MPS = &MPSLimits{}
	if spec.MPS == nil {
		return out, errs
	}
	if p := spec.MPS.PinnedMemoryLimitMiB; p != nil {
		if *p < 0 || *p > MaxPinnedMemoryLimitMiB {
			errs = append(errs, field.Invalid(mpsFld.Child("pinnedMemoryLimitMiB"), *p,
				fmt.Sprintf("must be between 0 and %d (MiB per replica; 0: the GPU's memory divided by the replicas)", MaxPinnedMemoryLimitMiB)))
		} else {
			out.MPS.PinnedMemoryLimitMiB = uint64(*p)
		}
	}
	if a := spec.MPS.ActiveThreadPercentage; a != nil {
		if *a < 0 || *a > 100 {
			errs = append(errs, field.Invalid(mpsFld.Child("activeThreadPercentage"), *a,
				"must be between 0 and 100 (percent of the SMs per replica; 0: 100 divided by the replicas)"))
		} else {
			out.MPS.ActiveThreadPercentage = *a
		}
	}
	return out, errs
}

// Validate checks the parts of a plan's sharing that its servers rely on
// (a plan made some other way than by the rules): a known strategy, replicas
// not negative, an active thread percentage within 0..100. Errors name the
// field below fld and its value.
func (s Sharing) Validate(fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if _, ok := s.Spec(); !ok {
		names := make([]SharingStrategy, len(strategies))
		for i, st := range strategies {
			names[i] = st.Name
		}
		errs = append(errs, field.NotSupported(fld.Child("strategy"), s.Strategy, names))
	}
	if s.Replicas < 0 {
		errs = append(errs, field.Invalid(fld.Child("replicas"), s.Replicas, "is negative"))
	}
	if s.MPS != nil && (s.MPS.ActiveThreadPercentage < 0 || s.MPS.ActiveThreadPercentage > 100) {
		errs = append(errs, field.Invalid(fld.Child("mps", "activeThreadPercentage"), s.MPS.ActiveThreadPercentage, "is outside 0..100"))
	}
	return errs
}

// CheckDeviceMemory reports an MPS per-replica memory limit larger than a
// device's memory (memMiB; 0, unknown, is not checked), naming both values.
// The planner calls it for every device a rule with MPS limits claims.
func (s Sharing) CheckDeviceMemory(memMiB uint64) error {
	if s.MPS == nil || memMiB == 0 || s.MPS.PinnedMemoryLimitMiB <= memMiB {
		return nil
	}
	return fmt.Errorf("per-replica limit %d MiB is more than the GPU's %d MiB of memory (set at most %d, or 0 for the GPU's memory divided by the replicas)",
		s.MPS.PinnedMemoryLimitMiB, memMiB, memMiB)
}

// WithDefaults returns s with the per-plan defaults of its strategy filled
// in: for MPS limits, the smallest device memory (minMemMiB) and 100% of
// the SMs divided by the replicas.
func (s Sharing) WithDefaults(minMemMiB uint64) Sharing {
	if s.MPS == nil || s.Replicas < 1 {
		return s
	}
	mps := *s.MPS
	if mps.PinnedMemoryLimitMiB == 0 {
		mps.PinnedMemoryLimitMiB = minMemMiB / uint64(s.Replicas)
	}
	if mps.ActiveThreadPercentage == 0 {
		mps.ActiveThreadPercentage = 100 / s.Replicas
	}
	s.MPS = &mps
	return s
}

// Equal reports whether two sharings are the same value, MPS limits by
// value.
func (s Sharing) Equal(o Sharing) bool {
	if s.Strategy != o.Strategy || s.Replicas != o.Replicas || s.FailRequestsGreaterThanOne != o.FailRequestsGreaterThanOne {
		return false
	}
	if (s.MPS == nil) != (o.MPS == nil) {
		return false
	}
	return s.MPS == nil || *s.MPS == *o.MPS
}

// Same reports whether two sharings share devices the same way, treating
// an empty strategy as none and zero replicas as one.
func (s Sharing) Same(o Sharing) bool { return s.key() == o.key() }

// sharingKey is a comparable form of Sharing.
type sharingKey struct {
	strategy SharingStrategy
	replicas int
	failGT1  bool
	pinned   uint64
	threads  int
}

func (s Sharing) key() sharingKey {
	k := sharingKey{strategy: s.Strategy, replicas: s.Replicas, failGT1: s.OneReplicaPerContainer()}
	if k.strategy == "" {
		k.strategy = SharingNone
	}
	if k.replicas == 0 {
		k.replicas = 1
	}
	if s.MPS != nil {
		k.pinned, k.threads = s.MPS.PinnedMemoryLimitMiB, s.MPS.ActiveThreadPercentage
	}
	return k
}

// String formats the sharing for tables and messages, e.g. "none",
// "time-slicing x4" or "mps x2 (20480 MiB, 50% threads)".
func (s Sharing) String() string {
	k := s.key()
	if k.strategy == SharingNone && k.replicas == 1 && !k.failGT1 {
		return string(SharingNone)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s x%d", k.strategy, k.replicas)
	var extra []string
	if k.pinned > 0 {
		extra = append(extra, fmt.Sprintf("%d MiB", k.pinned))
	}
	if k.threads > 0 {
		extra = append(extra, fmt.Sprintf("%d%% threads", k.threads))
	}
	if spec, _ := s.Spec(); k.failGT1 && !spec.OnePerContainer {
		extra = append(extra, "failRequestsGreaterThanOne")
	}
	if len(extra) > 0 {
		b.WriteString(" (" + strings.Join(extra, ", ") + ")")
	}
	return b.String()
}

// Allocation is what a strategy's container edits depend on: one
// container's share of one resource.
type Allocation struct {
	// Resource is the resource's name.
	Resource string
	// Sharing is the resource's sharing.
	Sharing Sharing
	// Devices are the physical devices the container got, in the order the
	// container numbers them (its CUDA ordinals).
	Devices []AllocatedDevice
	// MPS is the MPS daemons' layout on this host.
	MPS MPSLayout
}

// AllocatedDevice is one physical device of an Allocation.
type AllocatedDevice struct {
	// MemoryMiB is the device memory.
	MemoryMiB uint64
	// Replicas is how many of its replicas the container got (>= 1).
	Replicas int
}

// ContainerEdits is what a strategy adds to a container, as data the
// device plugin copies into its Allocate response.
type ContainerEdits struct {
	// Env holds environment variables.
	Env map[string]string
	// Mounts are host paths mounted into the container.
	Mounts []Mount
}

// Mount is one host path mounted into a container.
type Mount struct {
	// ContainerPath is the path in the container.
	ContainerPath string
	// HostPath is the path on the host.
	HostPath string
	// ReadOnly mounts it read-only.
	ReadOnly bool
}

// mpsContainer adds the MPS client environment, the pipe directory mount
// and the daemons' shared memory directory as the container's /dev/shm.
// Limits are per replica; a container holding several replicas of one
// device (only in a plan that did not come from the rules, which force
// failRequestsGreaterThanOne) gets their sum.
func mpsContainer(a Allocation) ContainerEdits {
	pipe := a.MPS.PipeDir(a.Resource)
	edits := ContainerEdits{
		Env: map[string]string{EnvMPSPipeDirectory: pipe},
		Mounts: []Mount{
			{ContainerPath: pipe, HostPath: pipe},
			{ContainerPath: MPSShmContainerPath, HostPath: a.MPS.ShmDir()},
		},
	}
	r := max(a.Sharing.Replicas, 1) // DeviceReplicas, for a sharing strategy
	limits := a.Sharing.MPS
	pct := 100 / r
	if limits != nil && limits.ActiveThreadPercentage > 0 {
		pct = limits.ActiveThreadPercentage
	}
	most := 0
	for _, d := range a.Devices {
		most = max(most, d.Replicas)
	}
	edits.Env[EnvMPSActiveThreadPercentage] = strconv.Itoa(min(100, pct*most))

	var mem []string
	for i, d := range a.Devices {
		perReplica := d.MemoryMiB / uint64(r)
		if limits != nil && limits.PinnedMemoryLimitMiB > 0 {
			perReplica = limits.PinnedMemoryLimitMiB
		}
		if perReplica == 0 {
			continue
		}
		mem = append(mem, fmt.Sprintf("%d=%dM", i, perReplica*uint64(d.Replicas)))
	}
	if len(mem) > 0 {
		edits.Env[EnvMPSPinnedDeviceMemLimit] = strings.Join(mem, ",")
	}
	return edits
}
