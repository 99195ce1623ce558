// Package cdi makes the Container Device Interface (CDI) spec for the
// devices a plan advertises, so that every CDI name the device plugins
// return from Allocate (vendor/class=<uuid or index>) resolves to the
// device's container edits: its device nodes, and the driver's libraries,
// tools and control devices common to all of them.
//
// The edits come from a Generator: NVCDI, which asks NVIDIA's container
// toolkit library (the code behind `nvidia-ctk cdi generate`) on a real
// driver, or Root, which reads a driver root laid out in files (the fake
// node's, see fakenode.WriteDriverRoot) and gives specs of the same shape.
// Build assembles the spec; a Writer writes it atomically and removes the
// spec files featureplug wrote before and no longer needs. Sink is the
// agent's output over them: the spec of the plan served, restored when it
// is removed or edited behind the agent's back.
package cdi

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// Names in the specs featureplug writes.
const (
	// AnnotationResource is the device annotation naming the extended
	// resource that advertises the device.
	AnnotationResource = "featureplug.io/resource"
	// AnnotationRule is the device annotation naming the rule that claimed
	// the device.
	AnnotationRule = "featureplug.io/rule"
	// filePrefix starts the name of every spec file featureplug writes.
	filePrefix = "featureplug-"
)

// Edits are the container edits of a spec.
type Edits struct {
	// Common go to every container that gets one of the spec's devices:
	// the driver's libraries and tools, its control device nodes.
	Common specs.ContainerEdits
	// Devices are each device's own edits (its device nodes), keyed by
	// plan.Device.ID.
	Devices map[string]specs.ContainerEdits
}

// Generator finds the container edits of devices.
type Generator interface {
	// Edits returns the edits of devs, all of which are in inv. It fails
	// when a device's edits cannot be found (say, its device node is
	// missing), naming the device.
	Edits(inv *discovery.Inventory, devs []plan.Device) (Edits, error)
}

// Options say how devices are named in a spec.
type Options struct {
	// Kind is the spec's "vendor/class", e.g. "nvidia.com/gpu".
	Kind string
	// ByIndex names devices by their index ("0", "1:2") instead of their
	// UUID, as the device plugins' --device-id-strategy index does.
	ByIndex bool
	// DeviceEdits, when set, gives the edits a device's entry carries on
	// top of its Generator's (environment variables and bind mounts; none
	// when empty). The agent gives a DRA device of an MPS resource the MPS
	// client settings there: the kubelet gets only CDI device IDs from a
	// DRA driver, so the device's own entry is where they can be, and a
	// device belongs to exactly one resource.
	DeviceEdits func(r *plan.Resource, d plan.Device) plan.ContainerEdits
}

// FileName returns the name of the spec file featureplug writes for kind
// ("vendor/class"): featureplug-<vendor>_<class>.yaml.
func FileName(kind string) string {
	vendor, class := parser.ParseQualifier(kind)
	return filePrefix + vendor + "_" + class + ".yaml"
}

// DeviceName returns the CDI device name of d in a spec made with o: the
// part after '=' of the qualified name Allocate returns.
func (o Options) DeviceName(d plan.Device) string {
	if o.ByIndex {
		return d.Index
	}
	return d.ID
}

// Build makes the spec of every device p advertises (whole GPUs and MIG
// devices; the replicas of a shared device are that device), named as o
// says and annotated with their resource and rule, with the edits gen
// finds in inv and those o.DeviceEdits adds. Devices are sorted by name, so the same plan and inventory
// give the same spec. It returns nil, nil when p advertises no device: a
// CDI spec must hold at least one. The spec is validated as the CDI
// library validates what it loads.
func Build(o Options, gen Generator, inv *discovery.Inventory, p *plan.Plan) (*specs.Spec, error) {
	vendor, class := parser.ParseQualifier(o.Kind)
	if err := parser.ValidateVendorName(vendor); err != nil {
		return nil, fmt.Errorf("CDI kind %q: %w", o.Kind, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return nil, fmt.Errorf("CDI kind %q: %w", o.Kind, err)
	}
	if p == nil {
		return nil, nil
	}
	type entry struct {
		dev      plan.Device
		resource *plan.Resource
	}
	var entries []entry
	for i := range p.Resources {
		r := &p.Resources[i]
		for _, d := range r.Devices {
			entries = append(entries, entry{dev: d, resource: r})
		}
	}
	if len(entries) == 0 {
		return nil, nil
	}
	devs := make([]plan.Device, len(entries))
	for i, e := range entries {
		devs[i] = e.dev
	}
	edits, err := gen.Edits(inv, devs)
	if err != nil {
		return nil, err
	}
	spec := &specs.Spec{Kind: o.Kind, ContainerEdits: edits.Common}
	seen := make(map[string]string, len(entries))
	for _, e := range entries {
		name := o.DeviceName(e.dev)
		if other, dup := seen[name]; dup {
			return nil, fmt.Errorf("CDI device name %q: devices %s and %s both have it", name, other, e.dev.ID)
		}
		seen[name] = e.dev.ID
		de, ok := edits.Devices[e.dev.ID]
		if !ok {
			return nil, fmt.Errorf("CDI device %s=%s (%s): no container edits found", o.Kind, name, e.dev.ID)
		}
		if o.DeviceEdits != nil {
			de = addEdits(de, o.DeviceEdits(e.resource, e.dev))
		}
		spec.Devices = append(spec.Devices, specs.Device{
			Name:           name,
			Annotations:    map[string]string{AnnotationResource: e.resource.Name, AnnotationRule: e.dev.Rule},
			ContainerEdits: de,
		})
	}
	slices.SortFunc(spec.Devices, func(a, b specs.Device) int { return cmp.Compare(a.Name, b.Name) })
	if spec.Version, err = specs.MinimumRequiredVersion(spec); err != nil {
		return nil, fmt.Errorf("CDI spec %s: %w", o.Kind, err)
	}
	return spec, nil
}

// addEdits returns de with e's environment (sorted by name) and bind
// mounts added, leaving de's slices, which the Generator may share,
// untouched.
func addEdits(de specs.ContainerEdits, e plan.ContainerEdits) specs.ContainerEdits {
	if len(e.Env) == 0 && len(e.Mounts) == 0 {
		return de
	}
	env := slices.Clone(de.Env)
	for _, k := range slices.Sorted(maps.Keys(e.Env)) {
		env = append(env, k+"="+e.Env[k])
	}
	de.Env = env
	mounts := slices.Clone(de.Mounts)
	for _, m := range e.Mounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		mounts = append(mounts, &specs.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Options: []string{"rbind", mode}})
	}
	de.Mounts = mounts
	return de
}
