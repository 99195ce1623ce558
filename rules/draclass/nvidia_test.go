package draclass_test

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"

	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/draclass"
)

// nvidiaDevice is a device as NVIDIA's DRA driver publishes it: driver
// gpu.nvidia.com, unqualified attributes.
func nvidiaDevice(kind string) dracel.Device {
	return dracel.Device{Driver: draattr.NVIDIADomain, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":        {StringValue: ptr.To(kind)},
		"productName": {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
	}}
}

// TestNVIDIAClasses: with dra.compatibility: nvidia, gpu.nvidia.com and
// mig.nvidia.com select every whole GPU or MIG device featureplug
// publishes and NVIDIA's driver's devices of that type, and no device of
// the other type; gpu.nvidia.com serves nvidia.com/gpu, and the rules'
// own class for nvidia.com/gpu gives that extended resource up, saying so.
// Without compatibility there are no such classes.
func TestNVIDIAClasses(t *testing.T) {
	rs, err := rules.Load("mixed")
	if err != nil {
		t.Fatal(err)
	}
	own, err := draclass.Compile(rs, catalogNodes(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range own.Classes {
		if c.NVIDIA || c.Name == draattr.NVIDIAGPUClass || c.Name == draattr.NVIDIAMIGClass {
			t.Errorf("without compatibility: class %s", c.Name)
		}
	}
	if c, ok := own.Class(draattr.NVIDIAExtendedResource); !ok || c.Name != "gpu.nvidia.com.featureplug.io" || c.ExtendedResourceName != draattr.NVIDIAExtendedResource {
		t.Errorf("without compatibility: class of nvidia.com/gpu %+v", c)
	}

	rs = rs.WithDRACompatibility(draattr.NVIDIA)
	res, err := draclass.Compile(rs, catalogNodes(t))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]draclass.Class{}
	for _, c := range res.Classes {
		byName[c.Name] = c
	}
	gpuClass, migClass := byName[draattr.NVIDIAGPUClass], byName[draattr.NVIDIAMIGClass]
	if !gpuClass.NVIDIA || !migClass.NVIDIA {
		t.Fatalf("classes %v: want NVIDIA's gpu.nvidia.com and mig.nvidia.com", res.Classes)
	}
	if ext := gpuClass.Object.Spec.ExtendedResourceName; ext == nil || *ext != "nvidia.com/gpu" {
		t.Errorf("gpu.nvidia.com extendedResourceName %v, want nvidia.com/gpu", ext)
	}
	if migClass.Object.Spec.ExtendedResourceName != nil {
		t.Errorf("mig.nvidia.com extendedResourceName %v, want none (as NVIDIA's)", *migClass.Object.Spec.ExtendedResourceName)
	}
	rulesGPU, ok := res.Class(draattr.NVIDIAExtendedResource)
	if !ok || rulesGPU.Object.Spec.ExtendedResourceName != nil {
		t.Errorf("the rules' class of nvidia.com/gpu %+v keeps the extended resource NVIDIA's class serves", rulesGPU)
	}
	warned := false
	for _, w := range res.Warnings {
		warned = warned || strings.Contains(w.Error(), "so the rules' class gpu.nvidia.com.featureplug.io does not")
	}
	if !warned {
		t.Errorf("no warning that nvidia.com/gpu moved to gpu.nvidia.com: %v", res.Warnings)
	}

	compiler := dracel.GetCompiler(dracel.Features{})
	ctx := context.Background()
	prog := func(c draclass.Class) dracel.CompilationResult {
		p := compiler.CompileCELExpression(c.Selector, dracel.Options{})
		if p.Error != nil {
			t.Fatalf("%s: %v\n%s", c.Name, p.Error, c.Selector)
		}
		return p
	}
	gpuProg, migProg := prog(gpuClass), prog(migClass)
	match := func(p dracel.CompilationResult, d dracel.Device) bool {
		ok, _, err := p.DeviceMatches(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	counted := map[string]int{}
	for _, n := range catalogNodes(t) {
		for _, d := range publish(t, rs, n.Inventory, nil) {
			if d.resource == "" {
				continue
			}
			typ := *d.dev.Attributes["gpu.nvidia.com/type"].StringValue
			counted[typ]++
			if got := match(gpuProg, d.dev); got != (typ == "gpu") {
				t.Errorf("%s: gpu.nvidia.com selects %s (%s): %v", n.Name, d.id, typ, got)
			}
			if got := match(migProg, d.dev); got != (typ == "mig") {
				t.Errorf("%s: mig.nvidia.com selects %s (%s): %v", n.Name, d.id, typ, got)
			}
		}
	}
	if counted["gpu"] == 0 || counted["mig"] == 0 {
		t.Fatalf("checked devices %v", counted)
	}
	if !match(gpuProg, nvidiaDevice("gpu")) || match(gpuProg, nvidiaDevice("mig")) || !match(migProg, nvidiaDevice("mig")) {
		t.Error("NVIDIA's classes do not select NVIDIA's driver's devices as NVIDIA's own classes do")
	}
	// A device of featureplug's own naming has no gpu.nvidia.com/type.
	ownDev := publish(t, rs.WithDRACompatibility(draattr.Own), catalogNodes(t)[0].Inventory, nil)[0]
	if match(gpuProg, ownDev.dev) || match(migProg, ownDev.dev) {
		t.Error("NVIDIA's classes select a device published without compatibility")
	}
}

// TestClashes: offline, against NVIDIA's classes, a rules class serving
// nvidia.com/gpu clashes over the extended resource, and with
// compatibility featureplug's gpu.nvidia.com replaces NVIDIA's; classes
// featureplug made itself never clash.
func TestClashes(t *testing.T) {
	rs, err := rules.Load("mixed")
	if err != nil {
		t.Fatal(err)
	}
	own, err := draclass.Compile(rs, catalogNodes(t))
	if err != nil {
		t.Fatal(err)
	}
	clashes := own.Clashes(draclass.NVIDIAClasses())
	if len(clashes) != 1 || clashes[0].Class != "gpu.nvidia.com.featureplug.io" || clashes[0].Installed != draattr.NVIDIAGPUClass ||
		clashes[0].ExtendedResource != "nvidia.com/gpu" || clashes[0].Replaces {
		t.Errorf("clashes %+v, want gpu.nvidia.com.featureplug.io over nvidia.com/gpu with NVIDIA's gpu.nvidia.com", clashes)
	}
	if len(clashes) > 0 && !strings.Contains(clashes[0].String(), "the newer of the two takes every pod asking for nvidia.com/gpu") {
		t.Errorf("clash text: %s", clashes[0])
	}

	nv, err := draclass.Compile(rs.WithDRACompatibility(draattr.NVIDIA), catalogNodes(t))
	if err != nil {
		t.Fatal(err)
	}
	clashes = nv.Clashes(draclass.NVIDIAClasses())
	if len(clashes) != 2 || !clashes[0].Replaces || !clashes[1].Replaces {
		t.Errorf("with compatibility: clashes %+v, want gpu.nvidia.com and mig.nvidia.com replacing NVIDIA's", clashes)
	}
	// What featureplug applied before is its own.
	var installed []resourceapi.DeviceClass
	for _, c := range nv.Classes {
		installed = append(installed, *c.Object)
	}
	if got := nv.Clashes(installed); len(got) != 0 {
		t.Errorf("featureplug's own classes clash with themselves: %+v", got)
	}
	// Another driver's class of a featureplug class's name.
	other := resourceapi.DeviceClass{}
	other.Name = "gpu.nvidia.com.featureplug.io"
	if got := own.Clashes([]resourceapi.DeviceClass{other}); len(got) != 1 || got[0].ExtendedResource != "" || got[0].Replaces {
		t.Errorf("clashes %+v, want one of names", got)
	}
}
