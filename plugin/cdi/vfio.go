package cdi

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"

	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// VFIOKind is the "vendor/class" of the spec of GPUs passed through to
// virtual machines and served through DRA. It is a spec of its own
// because a VM's container gets a GPU's VFIO device nodes and nothing
// else: none of the driver's libraries, tools or control devices the
// spec of containers' GPUs carries for all of its devices.
const VFIOKind = "featureplug.io/vfio"

// VFIODeviceName returns the CDI device name of a VFIO device in the
// VFIOKind spec: its PCI address ("0000:c1:00.0").
func VFIODeviceName(d plan.Device) string { return d.ID }

// BuildVFIO makes the VFIOKind spec of the VFIO resources of p: one
// device per GPU, named by VFIODeviceName, annotated with its resource and
// rule, whose only edits are its device nodes (/dev/vfio/vfio and
// /dev/vfio/<group>, and the iommufd nodes /dev/iommu and
// /dev/vfio/devices/vfioN where the kernel has them). It returns nil, nil
// when p has no VFIO device: a CDI spec must hold at least one.
func BuildVFIO(p *plan.Plan) (*specs.Spec, error) {
	if p == nil {
		return nil, nil
	}
	spec := &specs.Spec{Kind: VFIOKind}
	for _, r := range p.VFIO {
		for _, d := range r.Devices {
			if d.VFIO == nil || len(d.VFIO.DevicePaths) == 0 {
				return nil, fmt.Errorf("CDI device %s=%s (resource %s, rule %s): a VFIO device without device nodes", VFIOKind, VFIODeviceName(d), r.Name, d.Rule)
			}
			nodes := make([]*specs.DeviceNode, len(d.VFIO.DevicePaths))
			for i, path := range d.VFIO.DevicePaths {
				nodes[i] = &specs.DeviceNode{Path: path}
			}
			spec.Devices = append(spec.Devices, specs.Device{
				Name:           VFIODeviceName(d),
				Annotations:    map[string]string{AnnotationResource: r.Name, AnnotationRule: d.Rule},
				ContainerEdits: specs.ContainerEdits{DeviceNodes: nodes},
			})
		}
	}
	if len(spec.Devices) == 0 {
		return nil, nil
	}
	slices.SortFunc(spec.Devices, func(a, b specs.Device) int { return cmp.Compare(a.Name, b.Name) })
	var err error
	if spec.Version, err = specs.MinimumRequiredVersion(spec); err != nil {
		return nil, fmt.Errorf("CDI spec %s: %w", VFIOKind, err)
	}
	return spec, nil
}

// VFIOQualifiedName is the CDI device ID the DRA driver prepares a VFIO
// device as: VFIOKind=<PCI address>.
func VFIOQualifiedName(d plan.Device) string {
	vendor, class := parser.ParseQualifier(VFIOKind)
	return parser.QualifiedName(vendor, class, VFIODeviceName(d))
}

// VFIOSink keeps the VFIOKind spec for exactly the VFIO devices the plan
// serves through DRA (the device plugins give a VM's container the same
// device nodes through Allocate, without CDI). It comes before DRA, so
// that a device is published only once its CDI ID resolves. Without such
// a device there is no file. A spec removed or edited behind the agent's
// back is written again (RestoreOutput).
type VFIOSink struct {
	writer Writer
	log    *slog.Logger

	// The agent loop's goroutine only.
	specState
}

// NewVFIOSink returns the VFIO spec sink writing through w, logging to
// log (nil: discarded).
func NewVFIOSink(w Writer, log *slog.Logger) *VFIOSink {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &VFIOSink{writer: w, log: log}
}

// Name implements the agent's Sink.
func (s *VFIOSink) Name() string { return "VFIO CDI spec" }

// Check implements the agent's Sink: the spec of p's VFIO devices served
// through DRA can be made.
func (s *VFIOSink) Check(inv *discovery.Inventory, p *plan.Plan) error {
	if s.current(inv, p) {
		return nil
	}
	spec, err := BuildVFIO(p.ServedThrough(plan.ServeDRA, ""))
	if err != nil {
		return err
	}
	s.checked = built{inv: inv, plan: p, spec: spec}
	return nil
}

// Apply implements the agent's Sink: it writes the spec Check made, or
// removes the file when no VFIO device is served through DRA.
func (s *VFIOSink) Apply(_ context.Context, inv *discovery.Inventory, p *plan.Plan) error {
	if s.current(inv, p) {
		return nil
	}
	spec, err := s.checkedSpec(inv, p, s.Check)
	if err != nil {
		return err
	}
	changed, err := s.writer.Write(VFIOKind, spec)
	if err != nil {
		return err
	}
	if changed {
		if spec == nil {
			s.log.Info("VFIO CDI spec removed: no VFIO device is served through DRA", "path", s.writer.Path(VFIOKind))
		} else {
			s.log.Info("VFIO CDI spec written", "path", s.writer.Path(VFIOKind), "devices", len(spec.Devices))
		}
	}
	s.applied(inv, p, spec)
	return nil
}

// OutputFiles implements the agent's WatchedOutput: the spec file
// ("cdi-vfio").
func (s *VFIOSink) OutputFiles() map[string]string {
	return map[string]string{"cdi-vfio": s.writer.Path(VFIOKind)}
}

// RestoreOutput implements the agent's Restorer: the spec removed or
// edited by someone else is written again as the agent last wrote it.
func (s *VFIOSink) RestoreOutput() {
	if s.lastPlan == nil {
		return
	}
	path := s.writer.Path(VFIOKind)
	changed, err := s.writer.Write(VFIOKind, s.lastSpec)
	if err != nil {
		s.log.Warn("cannot restore the VFIO CDI spec; retrying at the next re-discovery", "path", path, "err", err)
		return
	}
	if changed {
		s.log.Warn("the VFIO CDI spec was removed or changed behind the agent's back; written again", "path", path)
	}
}
