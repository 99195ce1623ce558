package draclass_test

import (
	"context"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/draclass"
)

// TestVFIOClasses checks that a devices: vfio rule that says serve: dra
// gets a class per name its template gives, without an extended
// resource, whose selector, as the scheduler evaluates it, takes the VFIO
// devices of that resource only (not another VFIO resource's, not a
// GPU's), and that a VFIO rule left to the default gets no class.
func TestVFIOClasses(t *testing.T) {
	rs, err := rules.Parse("vfio.yaml", []byte(`apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: l40s-vms
  devices: vfio
  matchFeatures:
  - feature: nvidia.vfio
    matchExpressions:
      product: {op: In, value: ["NVIDIA L40S"]}
  resource: 'nvidia.com/{{ .device_name }}'
  serve: dra
- name: other-vms
  devices: vfio
  resource: example.com/vm
- name: gpus
  devices: gpu
  resource: example.com/gpu
  serve: dra
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := draclass.Compile(rs, catalogNodes(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Class("example.com/vm"); ok || slices.Contains(res.DevicePlugin, "example.com/vm") {
		t.Errorf("a VFIO rule without serve: dra: class %v, DevicePlugin %v; want neither", ok, res.DevicePlugin)
	}
	c, ok := res.Class("nvidia.com/AD102GL_L40S")
	if !ok {
		t.Fatalf("no class for nvidia.com/AD102GL_L40S; classes %v", res.Classes)
	}
	if c.Name != "ad102gl-l40s.nvidia.com.featureplug.io" || c.Object.Spec.ExtendedResourceName != nil || c.Fallback != "" || !c.VFIO {
		t.Errorf("class %s: extended resource %v, fallback %q, VFIO %v", c.Name, c.Object.Spec.ExtendedResourceName, c.Fallback, c.VFIO)
	}
	gpuClass, ok := res.Class("example.com/gpu")
	if !ok {
		t.Fatal("no class for example.com/gpu")
	}
	vfioDev := func(resource string) dracel.Device {
		attrs := draattr.VFIODevice(&discovery.VFIODevice{PCIAddress: "0000:47:00.0", VendorID: "10de", DeviceID: "26b9",
			Product: "NVIDIA L40S", DeviceName: "AD102GL_L40S", IOMMUGroup: 34, NUMANode: 0})
		attrs[draattr.AttrResource] = resourceapi.DeviceAttribute{StringValue: &resource}
		return dracel.Device{Driver: draattr.Domain, Attributes: attrs}
	}
	gpu := resourceapi.DeviceAttribute{StringValue: ptrTo("gpu")}
	gpuDev := dracel.Device{Driver: draattr.Domain, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		draattr.AttrType: gpu, draattr.AttrResource: {StringValue: ptrTo("nvidia.com/AD102GL_L40S")}, "migEnabled": {BoolValue: ptrTo(false)}}}
	compiler := dracel.GetCompiler(dracel.Features{})
	for _, tt := range []struct {
		class *draclass.Class
		dev   dracel.Device
		what  string
		want  bool
	}{
		{c, vfioDev("nvidia.com/AD102GL_L40S"), "its VFIO GPU", true},
		{c, vfioDev("example.com/vm"), "another VFIO resource's GPU", false},
		{c, gpuDev, "a GPU for containers carrying the name", false},
		{gpuClass, vfioDev("example.com/gpu"), "a VFIO GPU, from the GPU class", false},
	} {
		prog := compiler.CompileCELExpression(tt.class.Selector, dracel.Options{})
		if prog.Error != nil {
			t.Fatalf("class %s: %v", tt.class.Name, prog.Error)
		}
		got, _, err := prog.DeviceMatches(context.Background(), tt.dev)
		if err != nil {
			t.Errorf("class %s on %s: %v (a runtime error fails the claim)", tt.class.Name, tt.what, err)
		}
		if got != tt.want {
			t.Errorf("class %s on %s: %v (err %v), want %v\n%s", tt.class.Name, tt.what, got, err, tt.want, tt.class.Selector)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
