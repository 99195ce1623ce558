package draclass

import (
	"strconv"

	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/plan"
)

// A devices: vfio rule whose serve is dra gets a class for each resource
// name it gives, selecting exactly that resource's GPUs passed through to
// virtual machines: type == "vfio" and the resource attribute the DRA sink
// publishes. Its NFD matchers read nvidia.vfio, which the slice does not
// repeat attribute for attribute, and a VFIO resource name is never a
// containers' one (the rules refuse that), so the resource attribute is
// exact. The class has no extended resource: KubeVirt finds a DRA GPU's
// PCI address in the claim's device metadata
// (resource.kubernetes.io/pciBusID), while a pod asking for the extended
// resource would expect the PCI_RESOURCE_<NAME> variable a device plugin
// sets. A VFIO rule without serve: dra is served through device plugins,
// whatever the agent's --serve, and gets no class.

// vfioNote is AnnotationSelector's value for a VFIO class.
const vfioNote = "GPUs passed through to virtual machines: selects on type vfio and the resource attribute"

// servedThroughDRA reports whether a rule's devices may be served through
// DRA: any rule but one that says serve: device-plugin, except that a
// VFIO rule must say serve: dra.
func servedThroughDRA(v *rules.RuleView) bool {
	if v.Devices == plan.DeviceVFIO {
		return v.Serve == plan.ServeDRA
	}
	return v.Serve != plan.ServeDevicePlugin
}

// addVFIOContributions adds VFIO rule i to the classes of the names it
// gives: its literal name, or those its template gives on the known
// nodes (names).
func (c *compiler) addVFIOContributions(i int, names map[string]map[string][]string, contribs map[string][]contribution) {
	v := &c.views[i]
	if !v.Template {
		contribs[v.Resource] = append(contribs[v.Resource], contribution{rule: i, vfio: true})
		return
	}
	if len(names) == 0 {
		if servedThroughDRA(v) {
			c.warn(&rules.Error{Source: c.source, Line: v.Line, Rule: v.Index, RuleName: v.Name, Field: "resource", Value: strconv.Quote(v.Resource),
				Msg: "the template gives no valid resource name on any device featureplug knows: no DeviceClass for it"})
		}
		return
	}
	for name := range names {
		contribs[name] = append(contribs[name], contribution{rule: i, vfio: true})
	}
}

// vfioSelector is the CEL selector of the VFIO resource name.
func vfioSelector(name string) string {
	return render(and(
		equal(driverRef{}, strLit(draattr.Domain)),
		equal(attribute(draattr.AttrType), strLit(draattr.TypeVFIO)),
		equal(attribute(draattr.AttrResource), strLit(name)),
	))
}
