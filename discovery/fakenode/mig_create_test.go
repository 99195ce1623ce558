package fakenode_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/discovery/migplace"
)

// nodeWith builds a one-GPU node of product; gpuExtra is YAML added to the
// GPU entry (e.g. "mig: []").
func nodeWith(t testing.TB, product, gpuExtra string) *fakenode.Node {
	t.Helper()
	n, err := fakenode.Parse("test.yaml", fmt.Appendf(nil, `
name: mig-create-test
driverVersion: "570.86.15"
cudaVersion: "12.8"
gpus:
  - product: %s
    %s
`, product, gpuExtra))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// migKeys are the catalog keys of the MIG-capable products.
func migKeys() []string {
	var out []string
	for _, p := range fakenode.Products() {
		if len(p.MIGProfiles) > 0 {
			out = append(out, p.Key)
		}
	}
	return out
}

// geometryOf returns migplace's geometry of a catalog key.
func geometryOf(t testing.TB, key string) migplace.Product {
	t.Helper()
	for _, p := range fakenode.Products() {
		if p.Key == key {
			g, ok := migplace.ProductByName(p.Name)
			if !ok {
				t.Fatalf("%s (%s) is not in migplace's table", key, p.Name)
			}
			return g
		}
	}
	t.Fatalf("no catalog product %s", key)
	return migplace.Product{}
}

// createAt creates a GPU instance of the profile at pl and a compute
// instance that fills it; it returns both (nil on failure) and what NVML
// answered for the GPU instance.
func createAt(t testing.TB, dev nvml.Device, p *migplace.Profile, pl migplace.Placement) (nvml.GpuInstance, nvml.ComputeInstance, nvml.Return) {
	t.Helper()
	info, ret := dev.GetGpuInstanceProfileInfo(p.Enum)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetGpuInstanceProfileInfo(%s): %v", p.Name, ret)
	}
	npl := pl.NVML()
	gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &npl)
	if ret != nvml.SUCCESS {
		return nil, nil, ret
	}
	full, _ := p.FullComputeInstance()
	ciInfo, ret := gi.GetComputeInstanceProfileInfo(full, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		t.Fatalf("compute instance profile of %s: %v", p.Name, ret)
	}
	ci, ret := gi.CreateComputeInstance(&ciInfo)
	if ret != nvml.SUCCESS {
		t.Fatalf("compute instance of %s: %v", p.Name, ret)
	}
	return gi, ci, nvml.SUCCESS
}

// TestEveryPlacementOfEveryProduct creates, on every MIG-capable catalog
// product, an instance of every profile at every placement NVML lists,
// checks that NVML's profile info and placements are migplace's table, that
// the MIG device appears (handle, UUID, name, parent) and that it is gone
// once destroyed.
func TestEveryPlacementOfEveryProduct(t *testing.T) {
	for _, key := range migKeys() {
		t.Run(key, func(t *testing.T) {
			geo := geometryOf(t, key)
			n := nodeWith(t, key, "mig: []")
			lib := n.NVML()
			dev, _ := lib.DeviceGetHandleByIndex(0)
			for i := range geo.Profiles {
				p := &geo.Profiles[i]
				info, ret := dev.GetGpuInstanceProfileInfo(p.Enum)
				if ret != nvml.SUCCESS || info.Id != p.ID || int(info.SliceCount) != p.ComputeSlices ||
					int(info.InstanceCount) != p.MaxInstances || info.MemorySizeMB != p.MemoryMiB {
					t.Fatalf("%s: profile info %+v (%v), want ID %d, %d slices, %d instances, %d MiB", p.Name, info, ret, p.ID, p.ComputeSlices, p.MaxInstances, p.MemoryMiB)
				}
				pls, ret := dev.GetGpuInstancePossiblePlacements(&info)
				got := make([]migplace.Placement, len(pls))
				for k, pl := range pls {
					got[k] = migplace.PlacementOf(pl)
				}
				if ret != nvml.SUCCESS || !slices.Equal(got, p.Placements) {
					t.Fatalf("%s: placements %v (%v), want %v", p.Name, got, ret, p.Placements)
				}
				for _, pl := range p.Placements {
					gi, ci, ret := createAt(t, dev, p, pl)
					if ret != nvml.SUCCESS {
						t.Fatalf("%s at %s on an empty GPU: %v", p.Name, pl, ret)
					}
					giInfo, _ := gi.GetInfo()
					if migplace.PlacementOf(giInfo.Placement) != pl || giInfo.ProfileId != p.ID {
						t.Errorf("%s at %s: GPU instance info %+v", p.Name, pl, giInfo)
					}
					m, ret := dev.GetMigDeviceHandleByIndex(0)
					if ret != nvml.SUCCESS {
						t.Fatalf("%s at %s: MIG device handle: %v", p.Name, pl, ret)
					}
					uuid, _ := m.GetUUID()
					name, _ := m.GetName()
					parent, _ := m.GetDeviceHandleFromMigDeviceHandle()
					if byUUID, ret := lib.DeviceGetHandleByUUID(uuid); ret != nvml.SUCCESS || byUUID != m || parent != dev ||
						name != "NVIDIA "+productName(key)+" MIG "+p.Name {
						t.Errorf("%s at %s: MIG device %s %q (by UUID %v)", p.Name, pl, uuid, name, ret)
					}
					if ret := ci.Destroy(); ret != nvml.SUCCESS {
						t.Fatal(ret)
					}
					if ret := gi.Destroy(); ret != nvml.SUCCESS {
						t.Fatal(ret)
					}
					if _, ret := m.GetUUID(); ret != nvml.ERROR_INVALID_ARGUMENT {
						t.Errorf("%s at %s: destroyed MIG device's UUID: %v, want ERROR_INVALID_ARGUMENT", p.Name, pl, ret)
					}
					if _, ret := lib.DeviceGetHandleByUUID(uuid); ret != nvml.ERROR_NOT_FOUND {
						t.Errorf("%s at %s: destroyed MIG device by UUID: %v, want ERROR_NOT_FOUND", p.Name, pl, ret)
					}
					if _, ret := dev.GetMigDeviceHandleByIndex(0); ret != nvml.ERROR_NOT_FOUND {
						t.Errorf("%s at %s: MIG device 0 after destroying: %v, want ERROR_NOT_FOUND", p.Name, pl, ret)
					}
				}
			}
		})
	}
}

// productName is the NVML name of a catalog key without "NVIDIA ".
func productName(key string) string {
	for _, p := range fakenode.Products() {
		if p.Key == key {
			return p.Name[len("NVIDIA "):]
		}
	}
	return ""
}

// TestCreateErrors checks what NVML answers for placements it cannot
// create, as nvml.h documents: INSUFFICIENT_RESOURCES for a placement
// that is taken or a profile whose instances are all used (the one +me),
// INVALID_ARGUMENT for a placement the profile does not have, NOT_SUPPORTED
// with MIG mode disabled.
func TestCreateErrors(t *testing.T) {
	for _, key := range migKeys() {
		t.Run(key, func(t *testing.T) {
			geo := geometryOf(t, key)
			prof := func(i int) *migplace.Profile { return &geo.Profiles[i] }
			p1g, pme, p1gw, p2g, p3g, p4g, p7g := prof(0), prof(1), prof(2), prof(3), prof(4), prof(5), prof(6)
			at := func(p *migplace.Profile, start int) migplace.Placement {
				return migplace.Placement{Start: start, Size: p.MemorySliceCount()}
			}
			type step struct {
				p   *migplace.Profile
				pl  migplace.Placement
				ret nvml.Return
			}
			for _, tc := range []struct {
				name  string
				steps []step
			}{
				{"same placement twice", []step{{p3g, at(p3g, 4), nvml.SUCCESS}, {p3g, at(p3g, 4), nvml.ERROR_INSUFFICIENT_RESOURCES}}},
				{"overlapping profiles", []step{{p3g, at(p3g, 4), nvml.SUCCESS}, {p2g, at(p2g, 4), nvml.ERROR_INSUFFICIENT_RESOURCES},
					{p1gw, at(p1gw, 6), nvml.ERROR_INSUFFICIENT_RESOURCES}, {p2g, at(p2g, 2), nvml.SUCCESS}, {p1g, at(p1g, 3), nvml.ERROR_INSUFFICIENT_RESOURCES}, {p1g, at(p1g, 1), nvml.SUCCESS}}},
				{"whole GPU next to anything", []step{{p1g, at(p1g, 6), nvml.SUCCESS}, {p7g, at(p7g, 0), nvml.ERROR_INSUFFICIENT_RESOURCES}}},
				{"one +me per GPU", []step{{pme, at(pme, 0), nvml.SUCCESS}, {pme, at(pme, 3), nvml.ERROR_INSUFFICIENT_RESOURCES}, {p1g, at(p1g, 3), nvml.SUCCESS}}},
				{"4g leaves room for a 3g only", []step{{p4g, at(p4g, 0), nvml.SUCCESS}, {p3g, at(p3g, 0), nvml.ERROR_INSUFFICIENT_RESOURCES}, {p3g, at(p3g, 4), nvml.SUCCESS}}},
				{"start not offered", []step{{p3g, at(p3g, 2), nvml.ERROR_INVALID_ARGUMENT}, {p2g, at(p2g, 6), nvml.ERROR_INVALID_ARGUMENT}, {p1g, at(p1g, 7), nvml.ERROR_INVALID_ARGUMENT}}},
				{"wrong size", []step{{p2g, migplace.Placement{Start: 0, Size: 4}, nvml.ERROR_INVALID_ARGUMENT}}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					dev, _ := nodeWith(t, key, "mig: []").NVML().DeviceGetHandleByIndex(0)
					for i, s := range tc.steps {
						info, _ := dev.GetGpuInstanceProfileInfo(s.p.Enum)
						npl := s.pl.NVML()
						if _, ret := dev.CreateGpuInstanceWithPlacement(&info, &npl); ret != s.ret {
							t.Fatalf("step %d: %s at %s: %v, want %v", i, s.p.Name, s.pl, ret, s.ret)
						}
					}
				})
			}
			t.Run("bad arguments", func(t *testing.T) {
				dev, _ := nodeWith(t, key, "mig: []").NVML().DeviceGetHandleByIndex(0)
				info, _ := dev.GetGpuInstanceProfileInfo(p1g.Enum)
				if _, ret := dev.CreateGpuInstanceWithPlacement(&info, nil); ret != nvml.ERROR_INVALID_ARGUMENT {
					t.Errorf("nil placement: %v, want ERROR_INVALID_ARGUMENT", ret)
				}
				bogus := info
				bogus.Id = 99
				pl := at(p1g, 0).NVML()
				if _, ret := dev.CreateGpuInstanceWithPlacement(&bogus, &pl); ret != nvml.ERROR_INVALID_ARGUMENT {
					t.Errorf("unknown profile ID: %v, want ERROR_INVALID_ARGUMENT", ret)
				}
				if _, ret := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_COUNT); ret != nvml.ERROR_INVALID_ARGUMENT {
					t.Errorf("profile enum past the last: %v, want ERROR_INVALID_ARGUMENT", ret)
				}
				if _, ret := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_6_SLICE); ret != nvml.ERROR_NOT_SUPPORTED {
					t.Errorf("a profile the product lacks: %v, want ERROR_NOT_SUPPORTED", ret)
				}
			})
		})
	}
}

// TestMIGDisabled checks the answers of a MIG-capable GPU with MIG mode
// disabled: no instances can be created or listed; an Ampere GPU lists no
// profile, a Hopper or later GPU lists them (so dynamic MIG can plan before
// enabling MIG); placements answer either way.
func TestMIGDisabled(t *testing.T) {
	for _, key := range migKeys() {
		t.Run(key, func(t *testing.T) {
			geo := geometryOf(t, key)
			p3g := &geo.Profiles[4]
			n := nodeWith(t, key, "")
			dev, _ := n.NVML().DeviceGetHandleByIndex(0)
			info, ret := dev.GetGpuInstanceProfileInfo(p3g.Enum)
			if migplace.ModeChangeNeedsReset(geo.ComputeMajor) {
				if ret != nvml.ERROR_NOT_SUPPORTED {
					t.Errorf("Ampere with MIG disabled: profile info %v, want ERROR_NOT_SUPPORTED", ret)
				}
				info = nvml.GpuInstanceProfileInfo{Id: p3g.ID}
			} else if ret != nvml.SUCCESS || info.Id != p3g.ID {
				t.Errorf("MIG disabled: profile info %+v, %v; want profile %d", info, ret, p3g.ID)
			}
			if pls, ret := dev.GetGpuInstancePossiblePlacements(&info); ret != nvml.SUCCESS || len(pls) != 2 {
				t.Errorf("placements with MIG disabled: %v, %v; want 2", pls, ret)
			}
			pl := p3g.Placements[0].NVML()
			if _, ret := dev.CreateGpuInstanceWithPlacement(&info, &pl); ret != nvml.ERROR_NOT_SUPPORTED {
				t.Errorf("creating with MIG disabled: %v, want ERROR_NOT_SUPPORTED", ret)
			}
			if _, ret := dev.GetGpuInstances(&info); ret != nvml.ERROR_NOT_SUPPORTED {
				t.Errorf("listing with MIG disabled: %v, want ERROR_NOT_SUPPORTED", ret)
			}
		})
	}
}

// migMode reads the current and pending MIG mode as booleans.
func migMode(t *testing.T, dev nvml.Device) (current, pending bool) {
	t.Helper()
	c, p, ret := dev.GetMigMode()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	return c == nvml.DEVICE_MIG_ENABLE, p == nvml.DEVICE_MIG_ENABLE
}

// TestSetMigMode checks MIG mode changes as nvmlDeviceSetMigMode makes
// them: at once on an idle GPU; pending, with activationStatus IN_USE,
// while another process holds it (until a reset, or on Hopper and later a
// retry once idle); RESET_REQUIRED and pending on an Ampere GPU the host
// cannot reset; a reset's effects on Ampere only; refused while GPU
// instances exist and on a lost GPU.
func TestSetMigMode(t *testing.T) {
	for _, key := range []string{"A100-SXM4-80GB", "H100-80GB-HBM3", "B200"} {
		t.Run(key, func(t *testing.T) {
			ampere := migplace.ModeChangeNeedsReset(geometryOf(t, key).ComputeMajor)

			t.Run("idle", func(t *testing.T) {
				n := nodeWith(t, key, "health: {rowRemapPending: true}")
				dev, _ := n.NVML().DeviceGetHandleByIndex(0)
				if act, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); act != nvml.SUCCESS || ret != nvml.SUCCESS {
					t.Fatalf("enabling MIG on an idle GPU: activation %v, return %v", act, ret)
				}
				if cur, pend := migMode(t, dev); !cur || !pend {
					t.Errorf("after enabling: current %v, pending %v; want both enabled", cur, pend)
				}
				// Ampere's activation is a reset: the pending remapping
				// takes effect.
				_, _, pending, _, _ := dev.GetRemappedRows()
				if pending == ampere {
					t.Errorf("row remapping pending after enabling MIG: %v (the activation resets the GPU only on Ampere)", pending)
				}
				if act, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); act != nvml.SUCCESS || ret != nvml.SUCCESS {
					t.Errorf("enabling again: %v, %v; want SUCCESS", act, ret)
				}
			})

			t.Run("in use", func(t *testing.T) {
				n := nodeWith(t, key, "")
				dev, _ := n.NVML().DeviceGetHandleByIndex(0)
				uuid, _ := dev.GetUUID()
				if err := n.SetInUse(uuid, true); err != nil {
					t.Fatal(err)
				}
				if act, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); act != nvml.ERROR_IN_USE || ret != nvml.SUCCESS {
					t.Fatalf("enabling MIG on a GPU in use: activation %v, return %v; want IN_USE, SUCCESS", act, ret)
				}
				if cur, pend := migMode(t, dev); cur || !pend {
					t.Fatalf("current %v, pending %v; want disabled, pending enabled", cur, pend)
				}
				if err := n.ResetGPU(0); err == nil {
					t.Error("a GPU in use was reset")
				}
				if err := n.SetInUse(uuid, false); err != nil {
					t.Fatal(err)
				}
				if ampere {
					if err := n.ResetGPU(0); err != nil {
						t.Fatal(err)
					}
				} else if act, _ := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); act != nvml.SUCCESS {
					t.Fatalf("enabling again once idle: %v", act)
				}
				if cur, pend := migMode(t, dev); !cur || !pend {
					t.Errorf("after the reset or retry: current %v, pending %v; want both enabled", cur, pend)
				}
			})

			t.Run("no reset from the host", func(t *testing.T) {
				n := nodeWith(t, key, "")
				dev, _ := n.NVML().DeviceGetHandleByIndex(0)
				if err := n.SetResetUnavailable(0, true); err != nil {
					t.Fatal(err)
				}
				act, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE)
				want := nvml.SUCCESS
				if ampere {
					want = nvml.ERROR_RESET_REQUIRED
				}
				if act != want || ret != nvml.SUCCESS {
					t.Fatalf("activation %v, return %v; want %v, SUCCESS", act, ret, want)
				}
				if cur, _ := migMode(t, dev); cur == ampere {
					t.Errorf("current mode enabled %v on a GPU that cannot be reset", cur)
				}
			})

			t.Run("instances block disabling", func(t *testing.T) {
				n := nodeWith(t, key, "mig: [{profile: "+geometryOf(t, key).Profiles[0].Name+"}]")
				dev, _ := n.NVML().DeviceGetHandleByIndex(0)
				if act, ret := dev.SetMigMode(nvml.DEVICE_MIG_DISABLE); act != nvml.ERROR_IN_USE || ret != nvml.ERROR_IN_USE {
					t.Errorf("disabling MIG with a GPU instance: %v, %v; want IN_USE", act, ret)
				}
				if cur, pend := migMode(t, dev); !cur || !pend {
					t.Errorf("the refused change left current %v, pending %v", cur, pend)
				}
			})

			t.Run("lost", func(t *testing.T) {
				n := nodeWith(t, key, "")
				dev, _ := n.NVML().DeviceGetHandleByIndex(0)
				if err := n.SetGPULost(0, true); err != nil {
					t.Fatal(err)
				}
				if _, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.ERROR_GPU_IS_LOST {
					t.Errorf("lost GPU: %v, want ERROR_GPU_IS_LOST", ret)
				}
			})
		})
	}
}

// TestInUseMIGDevice checks that a MIG device a process runs on cannot be
// destroyed, nor its GPU instance, until the process is gone.
func TestInUseMIGDevice(t *testing.T) {
	n := nodeWith(t, "H100-80GB-HBM3", "mig: [{profile: 3g.40gb}]")
	dev, _ := n.NVML().DeviceGetHandleByIndex(0)
	m, _ := dev.GetMigDeviceHandleByIndex(0)
	uuid, _ := m.GetUUID()
	giID, _ := m.GetGpuInstanceId()
	ciID, _ := m.GetComputeInstanceId()
	gi, _ := dev.GetGpuInstanceById(giID)
	ci, _ := gi.GetComputeInstanceById(ciID)
	if err := n.SetInUse(uuid, true); err != nil {
		t.Fatal(err)
	}
	if ret := ci.Destroy(); ret != nvml.ERROR_IN_USE {
		t.Errorf("destroying a compute instance in use: %v, want ERROR_IN_USE", ret)
	}
	if ret := gi.Destroy(); ret != nvml.ERROR_IN_USE {
		t.Errorf("destroying its GPU instance: %v, want ERROR_IN_USE", ret)
	}
	if err := n.SetInUse(uuid, false); err != nil {
		t.Fatal(err)
	}
	if ret := ci.Destroy(); ret != nvml.SUCCESS {
		t.Errorf("destroying once idle: %v", ret)
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		t.Errorf("destroying the GPU instance: %v", ret)
	}
	if err := n.SetInUse("MIG-nope", true); err == nil {
		t.Error("SetInUse accepted an unknown UUID")
	}
}

// TestRecreatedMIGDeviceUUID checks that a MIG device keeps its UUID while
// it lives and that one created again at the same place gets a new one, as
// on real GPUs, while loading the same file again gives the file's MIG
// devices their UUIDs back.
func TestRecreatedMIGDeviceUUID(t *testing.T) {
	geo := geometryOf(t, "H200-141GB")
	p3g := &geo.Profiles[4]
	spec := "mig: [{profile: 3g.71gb, placement: 0}]"
	n := nodeWith(t, "H200-141GB", spec)
	dev, _ := n.NVML().DeviceGetHandleByIndex(0)
	fileDevs, _ := n.MIGInstances(0)
	again, _ := nodeWith(t, "H200-141GB", spec).MIGInstances(0)
	if fileDevs[0].MIGDevices[0] != again[0].MIGDevices[0] {
		t.Errorf("the file's MIG device has UUID %s, then %s", fileDevs[0].MIGDevices[0], again[0].MIGDevices[0])
	}
	seen := map[string]bool{fileDevs[0].MIGDevices[0]: true}
	for range 3 {
		gi, ci, ret := createAt(t, dev, p3g, p3g.Placements[1])
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		list, _ := n.MIGInstances(0)
		uuid := list[1].MIGDevices[0]
		if seen[uuid] {
			t.Errorf("MIG device created again at %s reuses UUID %s", p3g.Placements[1], uuid)
		}
		seen[uuid] = true
		if m, ret := n.NVML().DeviceGetHandleByUUID(uuid); ret != nvml.SUCCESS {
			t.Errorf("the new MIG device %s: %v", uuid, ret)
		} else if u, _ := m.GetUUID(); u != uuid {
			t.Errorf("handle UUID %s, listed %s", u, uuid)
		}
		if ret := ci.Destroy(); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		if ret := gi.Destroy(); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
	}
}

// TestConcurrentCreateAndDestroy creates and destroys MIG devices from
// many goroutines at once, as overlapping Prepare calls do, while others
// read: every placement is won by exactly one creator, the layout never
// overlaps, and destroying leaves the GPU empty. Run with -race.
func TestConcurrentCreateAndDestroy(t *testing.T) {
	geo := geometryOf(t, "H100-80GB-HBM3")
	n := nodeWith(t, "H100-80GB-HBM3", "mig: []")
	lib := n.NVML()
	dev, _ := lib.DeviceGetHandleByIndex(0)
	p1g := &geo.Profiles[0]
	for round := range 20 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := map[int]int{}
		var created []nvml.GpuInstance
		var cis []nvml.ComputeInstance
		// Three contenders per 1g placement.
		for _, pl := range p1g.Placements {
			for range 3 {
				wg.Go(func() {
					gi, ci, ret := createAt(t, dev, p1g, pl)
					switch ret {
					case nvml.SUCCESS:
						mu.Lock()
						won[pl.Start]++
						created = append(created, gi)
						cis = append(cis, ci)
						mu.Unlock()
					case nvml.ERROR_INSUFFICIENT_RESOURCES:
					default:
						t.Errorf("round %d: 1g at %s: %v", round, pl, ret)
					}
				})
			}
		}
		// Readers: discovery-like calls in between.
		for range 4 {
			wg.Go(func() {
				count, _ := dev.GetMaxMigDeviceCount()
				for i := range count {
					if m, ret := dev.GetMigDeviceHandleByIndex(i); ret == nvml.SUCCESS {
						_, _ = m.GetUUID()
						_, _ = m.GetAttributes()
					}
				}
				_, _ = n.MIGInstances(0)
			})
		}
		wg.Wait()
		for _, pl := range p1g.Placements {
			if won[pl.Start] != 1 {
				t.Fatalf("round %d: placement %s created %d times", round, pl, won[pl.Start])
			}
		}
		list, _ := n.MIGInstances(0)
		if len(list) != 7 {
			t.Fatalf("round %d: %d instances: %s", round, len(list), fakenode.LayoutString(list))
		}
		for i := range cis {
			wg.Go(func() {
				if ret := cis[i].Destroy(); ret != nvml.SUCCESS {
					t.Errorf("destroying compute instance: %v", ret)
				}
				if ret := created[i].Destroy(); ret != nvml.SUCCESS {
					t.Errorf("destroying GPU instance: %v", ret)
				}
			})
		}
		wg.Wait()
		if list, _ := n.MIGInstances(0); len(list) != 0 {
			t.Fatalf("round %d: left %s", round, fakenode.LayoutString(list))
		}
	}
}
