// Package plan is the contract between deciding and serving: the Plan that
// the rules engine makes for one Inventory, and everything the sinks that
// serve a plan (device plugins, DRA, the CDI spec, MPS daemons, NFD
// publishing) need to read it: the kubelet API of each resource (resolved
// once, WithServeDefault), what is held back (WithHeld), the
// resource-name validator, the caps on sizes, the table of sharing
// strategies, and when a new plan would drain the node (DrainsNode). It
// imports nothing of featureplug but discovery, so that the sinks never
// link the rules engine (NFD's evaluator, templates, YAML).
package plan

import (
	"errors"
	"fmt"

	"github.com/featureplug/featureplug/discovery"
)

// DeviceKind is what a rule can claim.
type DeviceKind string

// Device kinds.
const (
	// DeviceGPU is a whole GPU whose MIG mode is disabled.
	DeviceGPU DeviceKind = "gpu"
	// DeviceMIG is a MIG device.
	DeviceMIG DeviceKind = "mig"
	// DeviceVFIO is a GPU bound to vfio-pci, passed through whole to a
	// virtual machine (vfio.go).
	DeviceVFIO DeviceKind = "vfio"
)

// Plan is what the rules decided for one Inventory: the resources to serve
// and, for every device, why it went where it went. Plans are plain values
// the plugin manager diffs; they never change after they are made.
type Plan struct {
	// Resources are ordered by name.
	Resources []Resource `json:"resources"`
	// VFIO are the resources of GPUs passed through to virtual machines
	// (devices: vfio), ordered by name. They are kept apart from Resources
	// so that what serves containers (Allocate's environment, CDI, MPS,
	// DRA's container edits) never sees them; what serves VFIO reads them
	// here (vfio.go). A resource name is in one of the two lists only.
	VFIO []Resource `json:"vfio,omitempty"`
	// Decisions explain every device of the Inventory, in inventory order
	// (GPU, then its MIG devices; the VFIO devices last).
	Decisions []Decision `json:"decisions"`
	// Links is the GPU link matrix of the Inventory, indexed by GPU index,
	// for topology-aware allocation.
	Links discovery.LinkMatrix `json:"links,omitempty"`
	// Problems are the devices a rule claimed but that could not be
	// advertised (its template failed or gave an invalid resource name, or
	// what the node is keeps them out: a VFIO device's IOMMU group cannot
	// be passed through, a GPU needs a reset), in inventory order. They are
	// left out of Resources. A plan with a template problem is refused
	// whole (CheckTemplates); with the others, the rest of the plan serves.
	Problems []Problem `json:"problems,omitempty"`
	// MIGStrategy is NVIDIA's MIG strategy the rules amount to (MIGStrategy
	// constants; "" when unknown): publishers label it as
	// nvidia.com/mig.strategy, as gpu-feature-discovery labels its
	// configured strategy.
	MIGStrategy string `json:"migStrategy,omitempty"`
	// SingleInvalid, when set, says why the "single" strategy refused this
	// node (its MIG devices are not uniform): nvidia.com/gpu then serves no
	// device and its labels say <product>-MIG-INVALID, as NVIDIA's plugin
	// and gpu-feature-discovery do.
	SingleInvalid string `json:"singleInvalid,omitempty"`
	// RulesDigest identifies the rules the plan came from (RulesDigest of
	// a rules file's content, or a builtin's source, "builtin:<name>"); the
	// agent sets it, and publishes it with what the plan serves.
	RulesDigest string `json:"rulesDigest,omitempty"`
	// ServeNothing is set when the rules file says, with its top-level
	// serveNothing field, that the node is meant to serve no resource.
	// Only then is a plan without resources intended: without it, such a
	// plan is an accident (an emptied or truncated rules file), and an
	// agent serving resources keeps its last good plan instead.
	ServeNothing bool `json:"serveNothing,omitempty"`
	// Health is the health policy the rules file's health section gives
	// this node (the first entry whose nodeSelector selects it), nil when
	// no entry does. It overrides the agent's defaults: a tracker of device
	// health applies discovery.Decide(event, defaults.With(p.Health)).
	Health *discovery.HealthPolicy `json:"health,omitempty"`
	// HealthSource names the entry Health comes from, e.g.
	// `health[1] "inference"`.
	HealthSource string `json:"healthSource,omitempty"`
	// DRACompatibility is the naming the DRA sink publishes devices
	// under: "" for featureplug's own, "nvidia" for NVIDIA's DRA driver's
	// as well (the rules file's dra.compatibility; a
	// discovery/draattr.Compatibility).
	DRACompatibility string `json:"draCompatibility,omitempty"`
	// DynamicMIG are the GPUs the rules partition on demand, in GPU index
	// order (migdynamic.go). Their resources are in Resources with Dynamic
	// set.
	DynamicMIG []DynamicGPU `json:"dynamicMIG,omitempty"`
}

// NVIDIA's MIG strategies, the values of Plan.MIGStrategy.
const (
	MIGStrategyNone   = "none"
	MIGStrategySingle = "single"
	MIGStrategyMixed  = "mixed"
)

// Problem is a device left out of a plan because of its rule.
type Problem struct {
	// Device is the device ID (GPU or MIG UUID).
	Device string `json:"device"`
	// Description is a short human name, as in Decision.
	Description string `json:"description"`
	// Rule is the rule that claimed the device.
	Rule string `json:"rule"`
	// Resource is the name the rule's template gave, empty when it failed.
	Resource string `json:"resource,omitempty"`
	// Message says what is wrong, naming the rule's field and value.
	Message string `json:"message"`
	// Template says the rule's resource template failed on the device or
	// gave an invalid name: a mistake of the rules, which CheckTemplates
	// refuses, rather than a fact of the node.
	Template bool `json:"template,omitempty"`
}

// String formats the problem as one line for logs and Events.
func (p Problem) String() string {
	return p.Description + " (" + p.Device + "): " + p.Message
}

// Resource is one extended resource and the devices that back it.
type Resource struct {
	// Name is the extended resource name, e.g. "nvidia.com/gpu".
	Name string `json:"name"`
	// Sharing is how its devices are shared.
	Sharing Sharing `json:"sharing"`
	// Serve is the kubelet API the rules chose for the resource; empty when
	// they left it to the agent's default, which the agent fills in
	// (WithServeDefault) before any sink sees the plan.
	Serve Serve `json:"serve,omitempty"`
	// Held says why the agent holds the resource back now ("" while it
	// serves it): a readiness gate, such as an MPS resource's control
	// daemon not up yet. Rules never set it (see WithHeld).
	Held string `json:"held,omitempty"`
	// Devices are ordered by GPU index, then MIG index.
	Devices []Device `json:"devices"`
	// Dynamic is set on a resource of dynamically partitioned GPUs
	// (Plan.DynamicMIG): its devices are placements created on demand,
	// published as partitionable devices, so Devices holds none of them.
	// It is served through DRA (Serve is ServeDRA).
	Dynamic bool `json:"dynamic,omitempty"`
}

// Device is one physical or MIG device claimed by a resource.
type Device struct {
	// ID is the device ID advertised to the kubelet: the GPU or MIG UUID;
	// a VFIO device's PCI address.
	ID string `json:"id"`
	// Kind is gpu, mig or vfio.
	Kind DeviceKind `json:"kind"`
	// GPUUUID is the physical GPU whose health affects the device: its
	// UUID, or a VFIO device's PCI address (NVML, which gives UUIDs, does
	// not see it), the key of its health events.
	GPUUUID string `json:"gpuUUID"`
	// GPUIndex is the index of that physical GPU (for the link matrix).
	GPUIndex int `json:"gpuIndex"`
	// Index is the device's index as NVIDIA_VISIBLE_DEVICES takes it:
	// "3" for a GPU, "3:1" for MIG device 1 of GPU 3.
	Index string `json:"index"`
	// NUMANode is the NUMA node of the physical GPU, or discovery.NoNUMANode.
	NUMANode int `json:"numaNode"`
	// Profile is the MIG profile for a MIG device.
	Profile string `json:"profile,omitempty"`
	// MemoryMiB is the device memory.
	MemoryMiB uint64 `json:"memoryMiB"`
	// Rule is the name of the rule that claimed the device.
	Rule string `json:"rule"`
	// VFIO is what serving a VFIO device needs (Kind vfio only).
	VFIO *VFIODevice `json:"vfio,omitempty"`
}

// Decision explains what happened to one device.
type Decision struct {
	// Device is the device ID (GPU or MIG UUID; a VFIO device's PCI
	// address).
	Device string `json:"device"`
	// Kind is gpu, mig or vfio.
	Kind DeviceKind `json:"kind"`
	// Description is a short human name, e.g. "GPU 0 NVIDIA A100-SXM4-40GB",
	// "GPU 0 MIG 1 (3g.20gb)" or "VFIO NVIDIA L40S".
	Description string `json:"description"`
	// Resource is the resource the device went to, empty when none.
	Resource string `json:"resource,omitempty"`
	// Rule is the claiming rule, empty when none.
	Rule string `json:"rule,omitempty"`
	// Sharing is the claiming rule's sharing, when claimed.
	Sharing *Sharing `json:"sharing,omitempty"`
	// Serve is the kubelet API the rules chose for the device's resource
	// (Resource.Serve), when claimed; empty when they left it to the
	// agent's default.
	Serve Serve `json:"serve,omitempty"`
	// Skipped explains, for each earlier rule, why it did not claim the device.
	Skipped []RuleMiss `json:"skipped,omitempty"`
	// Problem says why the claiming rule could not advertise the device
	// (see Plan.Problems); Resource is then empty.
	Problem string `json:"problem,omitempty"`
	// Dynamic is set when the device's GPU is partitioned on demand
	// (Plan.DynamicMIG): for the GPU, Resource is empty; for one of its
	// MIG devices, Resource is its profile's resource.
	Dynamic bool `json:"dynamic,omitempty"`
}

// RuleMiss is why one rule did not claim a device.
type RuleMiss struct {
	// Rule is the rule name.
	Rule string `json:"rule"`
	// Reason is a one-line explanation, e.g. "devices: mig (device is a gpu)"
	// or "nvidia.gpu.product: InRegexp [^NVIDIA H100] did not match \"NVIDIA A100-SXM4-40GB\"".
	Reason string `json:"reason"`
}

// Resource returns the resource with the given name.
func (p *Plan) Resource(name string) (*Resource, bool) {
	for i := range p.Resources {
		if p.Resources[i].Name == name {
			return &p.Resources[i], true
		}
	}
	return nil, false
}

// CheckTemplates returns an error when a rule's resource template failed
// on a device of p or gave it an invalid name (Problem.Template): one line
// per such device, naming the file, rule, device and value, the message
// `rules check` gives for the node. The agent refuses such a plan whole,
// as check does, and keeps its last good one: a template that is wrong on
// some devices is a mistake of the file, and serving the rest would make
// what check refuses run. It is nil when there is none.
func (p *Plan) CheckTemplates() error {
	if p == nil {
		return nil
	}
	var errs []error
	for _, pr := range p.Problems {
		if pr.Template {
			errs = append(errs, errors.New(pr.Message))
		}
	}
	return errors.Join(errs...)
}

// CheckServes returns an error when p advertises no device of a node that
// has some and its rules do not say ServeNothing: a plan that, taken by an
// agent serving resources, would withdraw every one of them, which is
// what an emptied or truncated rules file looks like. It is nil for a
// plan that advertises a device, a ServeNothing plan, and a node without
// devices.
func (p *Plan) CheckServes() error {
	if p == nil || p.ServeNothing || len(p.Decisions) == 0 || len(p.DynamicMIG) > 0 {
		return nil
	}
	if p.advertises() {
		return nil
	}
	why := "no rule claims any of them"
	if n := len(p.Problems); n > 0 {
		why = fmt.Sprintf("%d are left out by their rules", n)
	}
	return fmt.Errorf("the plan serves no device: none of the node's %d GPUs and MIG devices goes to a resource (%s); "+
		"an agent serving resources keeps its last good plan rather than withdraw them all, and a rules file meant to serve nothing says serveNothing: true",
		len(p.Decisions), why)
}
