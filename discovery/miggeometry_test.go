package discovery_test

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/discovery/migplace"
)

// oneGPU builds a one-GPU fake node of product; extra is added to its GPU
// entry (e.g. "mig: []").
func oneGPU(t *testing.T, product, extra string) *fakenode.Node {
	t.Helper()
	n, err := fakenode.Parse("test.yaml", fmt.Appendf(nil, "name: geo\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n  - product: %s\n    %s\n", product, extra))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// discoverGeometry discovers lib and reads its MIG geometry.
func discoverGeometry(t *testing.T, lib nvml.Interface) *discovery.Inventory {
	t.Helper()
	inv, err := discovery.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	if err := discovery.ReadMIGGeometry(lib, inv); err != nil {
		t.Fatal(err)
	}
	return inv
}

// TestMIGGeometryMatchesCatalog discovers every MIG-capable catalog
// product with ReadMIGGeometry and checks that what NVML reports, with the
// names go-nvlib derives, is migplace's table: the one table the fake
// node answers from, read back through the path a real GPU takes. An
// Ampere GPU with MIG disabled lists no profile, so it has no geometry.
func TestMIGGeometryMatchesCatalog(t *testing.T) {
	for _, p := range fakenode.Products() {
		if len(p.MIGProfiles) == 0 {
			continue
		}
		t.Run(p.Key, func(t *testing.T) {
			want, ok := migplace.ProductByName(p.Name)
			if !ok {
				t.Fatalf("%s is not in migplace's table", p.Name)
			}
			reset := migplace.ModeChangeNeedsReset(want.ComputeMajor)
			for _, extra := range []string{"mig: []", ""} {
				inv := discoverGeometry(t, oneGPU(t, p.Key, extra).NVML())
				geo := inv.GPUs[0].MIGGeometry
				if extra == "" && reset {
					if geo != nil {
						t.Errorf("Ampere with MIG disabled: geometry %+v, want none", geo)
					}
					continue
				}
				if geo == nil {
					t.Fatalf("%q: no geometry", extra)
				}
				if !reflect.DeepEqual(geo.Profiles, want.Profiles) {
					t.Errorf("%q: profiles\n%+v\nwant\n%+v", extra, geo.Profiles, want.Profiles)
				}
				if geo.ModeChangeNeedsReset != reset {
					t.Errorf("ModeChangeNeedsReset = %v, want %v", geo.ModeChangeNeedsReset, reset)
				}
			}
		})
	}
}

// TestMIGGeometryOnlyWhenAsked checks that Discover alone reads no
// geometry and no placements (it makes none of those NVML calls).
func TestMIGGeometryOnlyWhenAsked(t *testing.T) {
	inv, err := discovery.Discover(oneGPU(t, "H200-141GB", "mig: [{profile: 3g.71gb}]").NVML())
	if err != nil {
		t.Fatal(err)
	}
	g := inv.GPUs[0]
	if g.MIGGeometry != nil || g.MIGDevices[0].Placement != nil || g.MIGDevices[0].GPUInstanceProfileID != nil {
		t.Errorf("geometry read without ReadMIGGeometry: %+v", g)
	}
}

// TestRediscoveryAfterCreate creates MIG devices through NVML at chosen
// placements and checks that discovery sees them through the same path as
// a file's static MIG devices, with their placements and profile IDs, the
// same UUIDs on every discovery, and that a destroyed one is gone.
func TestRediscoveryAfterCreate(t *testing.T) {
	n := oneGPU(t, "H100-80GB-HBM3", "")
	lib := n.NVML()
	dev, _ := lib.DeviceGetHandleByIndex(0)
	if act, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); act != nvml.SUCCESS || ret != nvml.SUCCESS {
		t.Fatalf("enabling MIG: %v %v", act, ret)
	}
	geo, _ := migplace.ProductByName("NVIDIA H100 80GB HBM3")
	type want struct {
		profile string
		start   int
	}
	var cis []nvml.ComputeInstance
	var gis []nvml.GpuInstance
	for _, w := range []want{{"3g.40gb", 4}, {"2g.20gb", 0}, {"1g.10gb", 3}} {
		p, _ := geo.Profile(w.profile)
		info, _ := dev.GetGpuInstanceProfileInfo(p.Enum)
		pl, _ := p.PlacementAt(w.start)
		npl := pl.NVML()
		gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &npl)
		if ret != nvml.SUCCESS {
			t.Fatalf("%s at %d: %v", w.profile, w.start, ret)
		}
		full, _ := p.FullComputeInstance()
		ciInfo, _ := gi.GetComputeInstanceProfileInfo(full, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		ci, ret := gi.CreateComputeInstance(&ciInfo)
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		gis, cis = append(gis, gi), append(cis, ci)
	}
	discover := func() *discovery.GPU {
		return &discoverGeometry(t, lib).GPUs[0]
	}
	first := discover()
	got := map[string]int{}
	for _, m := range first.MIGDevices {
		p, _ := first.MIGGeometry.Profile(m.Profile)
		if m.Placement == nil || m.GPUInstanceProfileID == nil || *m.GPUInstanceProfileID != p.ID {
			t.Fatalf("MIG device %+v lacks its placement or profile ID", m)
		}
		got[m.Profile] = m.Placement.Start
	}
	if !reflect.DeepEqual(got, map[string]int{"3g.40gb": 4, "2g.20gb": 0, "1g.10gb": 3}) {
		t.Errorf("discovered placements %v", got)
	}
	if again := discover(); !reflect.DeepEqual(again.MIGDevices, first.MIGDevices) {
		t.Errorf("a second discovery differs:\n%+v\n%+v", again.MIGDevices, first.MIGDevices)
	}
	if ret := cis[1].Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if ret := gis[1].Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	after := discover()
	if len(after.MIGDevices) != 2 {
		t.Fatalf("after destroying the 2g: %+v", after.MIGDevices)
	}
	for _, m := range after.MIGDevices {
		if m.Profile == "2g.20gb" {
			t.Errorf("destroyed MIG device still discovered: %+v", m)
		}
	}
}

// TestMIGModePending checks that discovery reports a MIG mode change that
// waits for the GPU to be idle.
func TestMIGModePending(t *testing.T) {
	n := oneGPU(t, "A100-SXM4-80GB", "")
	dev, _ := n.NVML().DeviceGetHandleByIndex(0)
	uuid, _ := dev.GetUUID()
	if err := n.SetInUse(uuid, true); err != nil {
		t.Fatal(err)
	}
	if act, _ := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); act != nvml.ERROR_IN_USE {
		t.Fatalf("activation %v, want IN_USE", act)
	}
	inv, err := discovery.Discover(n.NVML())
	if err != nil {
		t.Fatal(err)
	}
	if g := inv.GPUs[0]; g.MIGEnabled || !g.MIGModePending {
		t.Errorf("MIGEnabled %v, MIGModePending %v; want false, true", g.MIGEnabled, g.MIGModePending)
	}
}

// TestDiscoveryWhileMIGDevicesChange discovers a GPU again and again while
// other goroutines create and destroy MIG devices on it, as dynamic MIG's
// Prepare and Unprepare run beside the agent's discovery: every discovery
// succeeds, lists no MIG device twice, and each device it lists has the
// placement its profile allows. Run with -race.
func TestDiscoveryWhileMIGDevicesChange(t *testing.T) {
	n := oneGPU(t, "H100-80GB-HBM3", "mig: []")
	lib := n.NVML()
	dev, _ := lib.DeviceGetHandleByIndex(0)
	geo, _ := migplace.ProductByName("NVIDIA H100 80GB HBM3")
	p1g, _ := geo.Profile("1g.10gb")
	info, _ := dev.GetGpuInstanceProfileInfo(p1g.Enum)
	full, _ := p1g.FullComputeInstance()
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, pl := range p1g.Placements {
		wg.Go(func() {
			npl := pl.NVML()
			for {
				select {
				case <-done:
					return
				default:
				}
				gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &npl)
				if ret != nvml.SUCCESS {
					continue
				}
				ciInfo, _ := gi.GetComputeInstanceProfileInfo(full, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
				if ci, ret := gi.CreateComputeInstance(&ciInfo); ret == nvml.SUCCESS {
					if ret := ci.Destroy(); ret != nvml.SUCCESS {
						t.Errorf("destroying a compute instance: %v", ret)
					}
				}
				if ret := gi.Destroy(); ret != nvml.SUCCESS {
					t.Errorf("destroying a GPU instance: %v", ret)
				}
			}
		})
	}
	for range 200 {
		inv, err := discovery.Discover(lib)
		if err == nil {
			err = discovery.ReadMIGGeometry(lib, inv)
		}
		if err != nil {
			close(done)
			wg.Wait()
			t.Fatalf("discovery while MIG devices change: %v", err)
		}
		seen := map[string]bool{}
		for _, m := range inv.GPUs[0].MIGDevices {
			if seen[m.UUID] {
				t.Errorf("MIG device %s listed twice", m.UUID)
			}
			seen[m.UUID] = true
			if m.Placement != nil && !slices.Contains(p1g.Placements, *m.Placement) {
				t.Errorf("MIG device %s at %v", m.UUID, m.Placement)
			}
		}
	}
	close(done)
	wg.Wait()
}
