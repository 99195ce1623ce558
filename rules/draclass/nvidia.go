package draclass

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/rules"
)

// nvidiaNote is AnnotationSelector's value for NVIDIA's classes.
const nvidiaNote = "NVIDIA's DRA driver's class, over the devices of both drivers (gpu.nvidia.com, and gpu.featureplug.io with dra.compatibility: nvidia)"

// NVIDIAClasses returns NVIDIA's DRA driver's DeviceClasses as its Helm
// chart installs them (deployments/helm/dra-driver-nvidia-gpu,
// templates/deviceclass-gpu.yaml and deviceclass-mig.yaml): what a cluster
// running that driver has, for checks made without access to it.
func NVIDIAClasses() []resourceapi.DeviceClass {
	class := func(name, kind, extended string) resourceapi.DeviceClass {
		c := resourceapi.DeviceClass{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == '%s' && device.attributes['%s'].type == '%s'", draattr.NVIDIADomain, draattr.NVIDIADomain, kind)}}}},
		}
		if extended != "" {
			c.Spec.ExtendedResourceName = ptr(extended)
		}
		return c
	}
	return []resourceapi.DeviceClass{
		class(draattr.NVIDIAGPUClass, draattr.TypeGPU, draattr.NVIDIAExtendedResource),
		class(draattr.NVIDIAMIGClass, draattr.TypeMIG, ""),
	}
}

// addNVIDIAClasses adds NVIDIA's classes to a result made with NVIDIA
// compatibility: gpu.nvidia.com selects every whole GPU and mig.nvidia.com
// every MIG device of either driver, as NVIDIA's own select its driver's,
// so one class serves claims on the node pools of both. gpu.nvidia.com
// serves the extended resource nvidia.com/gpu, as NVIDIA's does: a rules
// class of that name keeps its selector but gives the extended resource
// up (the newest of two classes would take every pod asking for it).
func (c *compiler) addNVIDIAClasses(res *Result) {
	// A featureplug device published without compatibility (a node not
	// yet on the new rules) has no gpu.nvidia.com/type: reading it would
	// be a CEL runtime error, which fails the claim on that node.
	driver := membership(driverRef{}, []node{strLit(draattr.Domain), strLit(draattr.NVIDIADomain)})
	typeName := resourceapi.QualifiedName(draattr.NVIDIADomain + "/" + string(draattr.AttrType))
	isType := func(kind string) node {
		return and(driver, present{name: typeName}, equal(attribute(typeName), strLit(kind)))
	}
	nv := []Class{
		{Name: draattr.NVIDIAGPUClass, Resource: draattr.NVIDIAExtendedResource, ExtendedResourceName: draattr.NVIDIAExtendedResource, NVIDIA: true,
			Selector: render(isType(draattr.TypeGPU))},
		{Name: draattr.NVIDIAMIGClass, NVIDIA: true, Selector: render(isType(draattr.TypeMIG))},
	}
	for i := range res.Classes {
		cl := &res.Classes[i]
		if cl.ExtendedResourceName != draattr.NVIDIAExtendedResource {
			continue
		}
		cl.ExtendedResourceName = ""
		c.warn(&rules.Error{Source: c.source, Rule: -1, Field: "dra.compatibility", Value: strconv.Quote(string(draattr.NVIDIA)),
			Msg: fmt.Sprintf("NVIDIA's class %s serves the extended resource %s (every whole GPU of either driver), so the rules' class %s does not: claims name it to get the devices the rules give %s",
				draattr.NVIDIAGPUClass, draattr.NVIDIAExtendedResource, cl.Name, cl.Resource)})
	}
	res.Classes = append(nv, res.Classes...)
}

// Clash is a class of a Result whose name or extended resource an
// installed class of another driver already has.
type Clash struct {
	// Class is the Result's class; Installed the other one.
	Class, Installed string
	// ExtendedResource is the extended resource both serve; "" when the
	// clash is of names.
	ExtendedResource string
	// Replaces is set when Class is NVIDIA's class made for both drivers
	// (NVIDIA compatibility): applying it replaces Installed, NVIDIA's
	// own, by one that selects NVIDIA's devices as before and
	// featureplug's too.
	Replaces bool
	// Selector is what Installed selects.
	Selector string
}

// String says what applying Class would do.
func (c Clash) String() string {
	switch {
	case c.Replaces:
		return fmt.Sprintf("DeviceClass %s replaces the installed class of that name (%s): it selects NVIDIA's devices as that one does, and featureplug's too; "+
			"NVIDIA's Helm chart puts its own back on upgrade, leaving featureplug's nodes out of claims for %s", c.Class, c.Selector, c.Class)
	case c.ExtendedResource != "":
		return fmt.Sprintf("DeviceClass %s would serve the extended resource %s, which the installed class %s of another driver serves (%s): "+
			"the newer of the two takes every pod asking for %s, so pods meant for the other driver would land on featureplug's devices or the other way round; "+
			"give the resource another name in the rules, or with NVIDIA's driver turn on dra.compatibility: nvidia so that one class serves both",
			c.Class, c.ExtendedResource, c.Installed, c.Selector, c.ExtendedResource)
	}
	return fmt.Sprintf("DeviceClass %s is the name of the installed class of another driver (%s): applying it would overwrite that class and send its claims to featureplug's devices",
		c.Class, c.Selector)
}

// Clashes returns the classes of r whose name or extended resource an
// installed class not made by featureplug (label LabelManagedBy) already
// has, in the order of r's classes.
func (r *Result) Clashes(installed []resourceapi.DeviceClass) []Clash {
	var foreign []*resourceapi.DeviceClass
	for i := range installed {
		if installed[i].Labels[LabelManagedBy] != "featureplug" {
			foreign = append(foreign, &installed[i])
		}
	}
	var out []Clash
	for _, cl := range r.Classes {
		for _, other := range foreign {
			switch {
			case other.Name == cl.Name:
				out = append(out, Clash{Class: cl.Name, Installed: other.Name, Replaces: cl.NVIDIA, Selector: selectorOf(other)})
			case cl.ExtendedResourceName != "" && other.Spec.ExtendedResourceName != nil && *other.Spec.ExtendedResourceName == cl.ExtendedResourceName:
				if slices.ContainsFunc(foreign, func(o *resourceapi.DeviceClass) bool { return o.Name == cl.Name }) && cl.NVIDIA {
					continue // replacing the class of the same name
				}
				out = append(out, Clash{Class: cl.Name, Installed: other.Name, ExtendedResource: cl.ExtendedResourceName, Selector: selectorOf(other)})
			}
		}
	}
	return out
}

// selectorOf writes a class's CEL selectors as one expression.
func selectorOf(c *resourceapi.DeviceClass) string {
	var parts []string
	for _, s := range c.Spec.Selectors {
		if s.CEL != nil {
			parts = append(parts, s.CEL.Expression)
		}
	}
	if len(parts) == 0 {
		return "every device"
	}
	return strings.Join(parts, " && ")
}

func ptr[T any](v T) *T { return &v }
