package rules

import (
	"fmt"
	"slices"
	"strings"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// gpuResource is the resource NVIDIA's "single" strategy pools MIG devices
// into (gpuResource+sharedSuffix when a sharing config renames by default),
// and migResourcePrefix starts the per-profile names of "mixed".
const (
	gpuResource       = "nvidia.com/gpu"
	sharedSuffix      = ".shared"
	migResourcePrefix = "nvidia.com/mig-"
)

// migStrategy says which of NVIDIA's MIG strategies the rules that apply to
// a node amount to (skipped[i] is non-empty for rule i when its node
// selector rejects the node): "single" when a rule claims MIG devices as
// nvidia.com/gpu (or nvidia.com/gpu.shared, NVIDIA's renameByDefault name),
// the name it returns too, else "mixed" when one claims them under a
// nvidia.com/mig-<profile> name (a literal name or a template), else
// "none". That is how the builtins single, mixed and none, and the rules
// `featureplug rules import` writes from an NVIDIA flags.migStrategy, read;
// gpu-feature-discovery labels its configured strategy the same way.
func (rs *RuleSet) migStrategy(skipped []string) (strategy, singleResource string) {
	strategy = plan.MIGStrategyNone
	for i, r := range rs.rules {
		if r.devices != plan.DeviceMIG || (i < len(skipped) && skipped[i] != "") {
			continue
		}
		switch {
		case r.tmpl == nil && (r.resource == gpuResource || r.resource == gpuResource+sharedSuffix):
			return plan.MIGStrategySingle, r.resource
		case strings.HasPrefix(r.resource, migResourcePrefix):
			strategy = plan.MIGStrategyMixed
		}
	}
	return strategy, ""
}

// singleNonUniform returns why NVIDIA's "single" strategy refuses a node,
// or "" when it does not: a GPU in MIG mode without MIG devices, GPUs in
// MIG mode beside whole GPUs, or MIG devices of more than one profile. The
// checks and their order are gpu-feature-discovery's (internal/lm,
// mig-strategy.go); a node without MIG is fine.
func singleNonUniform(inv *discovery.Inventory) string {
	var migGPUs, wholeGPUs []string
	profiles := map[string]bool{}
	empty := ""
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		name := fmt.Sprintf("GPU %d", g.Index)
		if !g.MIGEnabled {
			wholeGPUs = append(wholeGPUs, name)
			continue
		}
		migGPUs = append(migGPUs, name)
		if len(g.MIGDevices) == 0 && empty == "" {
			empty = name
		}
		for _, m := range g.MIGDevices {
			profiles[m.Profile] = true
		}
	}
	switch {
	case len(migGPUs) == 0:
		return ""
	case empty != "":
		return empty + " has MIG enabled but no MIG devices"
	case len(wholeGPUs) > 0:
		return fmt.Sprintf("GPUs with MIG enabled (%s) beside GPUs with MIG disabled (%s)",
			strings.Join(migGPUs, ", "), strings.Join(wholeGPUs, ", "))
	case len(profiles) > 1:
		names := make([]string, 0, len(profiles))
		for p := range profiles {
			names = append(names, p)
		}
		slices.Sort(names)
		return "MIG devices of more than one profile (" + strings.Join(names, ", ") + ")"
	}
	return ""
}

// applySingle refuses, under the "single" strategy, a node whose MIG
// devices are not uniform, as NVIDIA's device plugin and
// gpu-feature-discovery do: pooling a whole 80GB GPU and 1g.10gb slices
// into one nvidia.com/gpu would hand out whichever the kubelet picks. The
// resource (name: nvidia.com/gpu or its .shared rename) stays in the plan with no devices (the kubelet sees 0), each
// device it had is recorded as a Problem (so `rules explain`, the log and
// the DeviceRuleError Event say why) and the plan's SingleInvalid carries
// the reason for the labels (<product>-MIG-INVALID).
func applySingle(inv *discovery.Inventory, p *plan.Plan, name string) {
	if p.MIGStrategy != plan.MIGStrategySingle {
		return
	}
	why := singleNonUniform(inv)
	if why == "" {
		return
	}
	p.SingleInvalid = why
	msg := "MIG strategy single refuses this node: " + why +
		"; " + name + " advertises 0 devices (as NVIDIA's device plugin does); make the MIG layout uniform or use the mixed strategy"
	r, ok := p.Resource(name)
	if !ok {
		// Nothing claimed (GPUs in MIG mode without MIG devices): still
		// advertise the resource, with no device, so that the kubelet
		// drops what an earlier plan advertised.
		i, _ := slices.BinarySearchFunc(p.Resources, name, func(r plan.Resource, want string) int {
			return strings.Compare(r.Name, want)
		})
		p.Resources = slices.Insert(p.Resources, i, plan.Resource{Name: name, Devices: []plan.Device{}})
		r = &p.Resources[i]
	}
	refused := make(map[string]bool, len(r.Devices))
	for _, d := range r.Devices {
		refused[d.ID] = true
	}
	if len(refused) == 0 {
		// Nothing was claimed: explain on the GPUs in MIG mode.
		for i := range inv.GPUs {
			if g := &inv.GPUs[i]; g.MIGEnabled && len(g.MIGDevices) == 0 {
				refused[g.UUID] = true
			}
		}
	}
	r.Devices = []plan.Device{}
	for i := range p.Decisions {
		d := &p.Decisions[i]
		if !refused[d.Device] {
			continue
		}
		p.Problems = append(p.Problems, plan.Problem{Device: d.Device, Description: d.Description,
			Rule: d.Rule, Resource: name, Message: msg})
		d.Resource, d.Sharing, d.Problem = "", nil, msg
	}
}
