package dra

import (
	"fmt"
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// benchNode is 8 GPUs with 7 MIG 1g.10gb devices each: 56 DRA devices,
// near the 64 one slice holds.
func benchNode() (*discovery.Inventory, *plan.Plan) {
	inv := &discovery.Inventory{DriverVersion: "570.86.15", CUDADriverVersion: "12.8", NVMLVersion: "12.570.86.15"}
	r := plan.Resource{Name: "nvidia.com/mig-1g.10gb", Serve: plan.ServeDRA, Sharing: plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 2}}
	for g := range 8 {
		gpu := discovery.GPU{Index: g, UUID: fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", g), Product: "NVIDIA A100-SXM4-80GB",
			Architecture: "ampere", Family: "ampere", ComputeMajor: 8, MemoryMiB: 81920, MIGCapable: true, MIGEnabled: true}
		for m := range 7 {
			uuid := fmt.Sprintf("MIG-%08d-%04d-0000-0000-000000000000", g, m)
			gpu.MIGDevices = append(gpu.MIGDevices, discovery.MIGDevice{ParentIndex: g, ParentUUID: gpu.UUID, Index: m, UUID: uuid, Profile: "1g.10gb", MemoryMiB: 9856, GISlices: 1, CISlices: 1})
			r.Devices = append(r.Devices, plan.Device{ID: uuid, Kind: plan.DeviceMIG, GPUUUID: gpu.UUID, GPUIndex: g, Index: fmt.Sprintf("%d:%d", g, m), Rule: "mig", Profile: "1g.10gb", MemoryMiB: 9856})
		}
		inv.GPUs = append(inv.GPUs, gpu)
	}
	return inv, &plan.Plan{Resources: []plan.Resource{r}}
}

// BenchmarkBuildSlice is the DRA sink's work for one plan or health
// change on a full node.
func BenchmarkBuildSlice(b *testing.B) {
	inv, p := benchNode()
	o := sliceOpts(sliceCDI)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := BuildSlice(inv, p, o); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDevicesEqual is the Publisher's comparison of a full node's
// devices with the API server's, done on every offer and sync.
func BenchmarkDevicesEqual(b *testing.B) {
	inv, p := benchNode()
	x, err := BuildSlice(inv, p, sliceOpts(sliceCDI))
	if err != nil {
		b.Fatal(err)
	}
	y, _ := BuildSlice(inv, p, sliceOpts(sliceCDI))
	b.ReportAllocs()
	for b.Loop() {
		if !DevicesEqual(x.Devices, y.Devices) {
			b.Fatal("not equal")
		}
	}
}
