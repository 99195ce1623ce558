package dra

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/featureplug/featureplug/discovery/migplace"
	"github.com/featureplug/featureplug/rules/plan"
)

// TestBuildSliceNVIDIACompatibility: with the plan's DRA compatibility
// "nvidia", devices are named and carry attributes as NVIDIA's DRA driver
// names them, qualified by its domain, and keep the sink's own resource
// attribute and shares capacity.
func TestBuildSliceNVIDIACompatibility(t *testing.T) {
	inv := sliceInventory()
	m := &inv.GPUs[1].MIGDevices[0]
	pid := uint32(19)
	m.GPUInstanceProfileID, m.Placement = &pid, &migplace.Placement{Start: 6, Size: 1}
	p := slicePlan()
	p.DRACompatibility = "nvidia"
	p.Resources[2].Sharing = plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 2}
	b := mustBuild(t, inv, p, withOpts(sliceOpts(sliceCDI), func(o *BuildOptions) { o.Default = plan.ServeDRA }))
	if got := deviceNames(b.Devices); len(got) != 2 || got[0] != "gpu-0" || got[1] != "gpu-1-mig-1g10gb-19-6" {
		t.Fatalf("devices %v, want gpu-0 and gpu-1-mig-1g10gb-19-6", got)
	}
	gpu, mig := b.Devices[0], b.Devices[1]
	for _, c := range []struct {
		dev  resourceapi.Device
		attr resourceapi.QualifiedName
		want string
	}{
		{gpu, "gpu.nvidia.com/type", "gpu"},
		{gpu, "gpu.nvidia.com/productName", "NVIDIA A100-SXM4-80GB"},
		{gpu, "gpu.nvidia.com/uuid", sliceGPU0},
		{gpu, "resource", "example.com/a100-80gb"},
		{mig, "gpu.nvidia.com/type", "mig"},
		{mig, "gpu.nvidia.com/profile", "1g.10gb"},
		{mig, "gpu.nvidia.com/parentUUID", sliceGPU1},
		{mig, "gpu.nvidia.com/productName", "NVIDIA A100-SXM4-80GB"},
		{mig, "gpu.nvidia.com/brand", "Nvidia"},
		{mig, "resource", "nvidia.com/mig-1g.10gb"},
	} {
		if a, ok := c.dev.Attributes[c.attr]; !ok || a.StringValue == nil || *a.StringValue != c.want {
			t.Errorf("%s: %s = %+v, want %q", c.dev.Name, c.attr, a, c.want)
		}
	}
	if a := gpu.Attributes["gpu.nvidia.com/cudaComputeCapability"]; a.VersionValue == nil || *a.VersionValue != "8.0.0" {
		t.Errorf("cudaComputeCapability = %+v, want version 8.0.0", a)
	}
	for _, own := range []resourceapi.QualifiedName{"product", "type", "uuid", "computeCapability"} {
		if _, ok := gpu.Attributes[own]; ok {
			t.Errorf("%s carries %s besides NVIDIA's name for it", gpu.Name, own)
		}
	}
	if c, ok := gpu.Capacity["gpu.nvidia.com/memory"]; !ok || c.Value.Value() != 81920<<20 {
		t.Errorf("memory capacity %+v, want 80 GiB as gpu.nvidia.com/memory", c)
	}
	if c, ok := mig.Capacity["gpu.nvidia.com/multiprocessors"]; !ok || c.Value.Value() != 14 {
		t.Errorf("multiprocessors capacity %+v, want 14", c)
	}
	if c, ok := mig.Capacity[CapShares]; !ok || c.Value.Value() != 2 {
		t.Errorf("time-sliced MIG device without its shares: %+v", mig.Capacity)
	}
	if n := len(mig.Attributes) + len(mig.Capacity); n > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		t.Errorf("%d attributes and capacities on the MIG device", n)
	}
	if d, ok := b.Table.Lookup("gpu-1-mig-1g10gb-19-6"); !ok || d.Device.ID != sliceMIG {
		t.Errorf("the table has no MIG device under its slice name: %+v", d)
	}
}

// TestBuildSliceUnknownCompatibility refuses a plan whose DRA naming the
// sink does not know rather than publishing under a wrong one.
func TestBuildSliceUnknownCompatibility(t *testing.T) {
	p := slicePlan()
	p.DRACompatibility = "amd"
	if _, err := BuildSlice(sliceInventory(), p, sliceOpts(sliceCDI)); err == nil {
		t.Error("BuildSlice took DRA compatibility amd")
	}
}
