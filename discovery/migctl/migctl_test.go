package migctl_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/discovery/migctl"
	"github.com/featureplug/featureplug/discovery/migplace"
)

// fake builds a one-GPU node of product; extra is added to its GPU entry.
func fake(t *testing.T, product, extra string) (*fakenode.Node, string) {
	t.Helper()
	n, err := fakenode.Parse("n.yaml", fmt.Appendf(nil, "name: migctl\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n  - product: %s\n    %s\n", product, extra))
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := n.NVML().DeviceGetHandleByIndex(0)
	uuid, _ := dev.GetUUID()
	return n, uuid
}

// target is the target of profile name at start on gpu of product.
func target(t *testing.T, product, gpu, name string, start int) migplace.Target {
	t.Helper()
	geo, _ := migplace.ProductByName(product)
	p, ok := geo.Profile(name)
	if !ok {
		t.Fatalf("%s has no %s", product, name)
	}
	pl, ok := p.PlacementAt(start)
	if !ok {
		t.Fatalf("%s has no placement at %d", name, start)
	}
	ci, _ := p.FullComputeInstance()
	return migplace.Target{GPUUUID: gpu, Profile: name, ProfileEnum: p.Enum, ProfileID: p.ID, Placement: pl, ComputeInstanceProfile: ci}
}

// TestEnsureAndDestroy takes one MIG device through its life: Ensure
// refuses while MIG is disabled, creates once enabled (discovery and
// NVML's handles see it), returns the same device when called again, and
// Destroy removes it only given its UUID, then is done.
func TestEnsureAndDestroy(t *testing.T) {
	n, gpu := fake(t, "H100-80GB-HBM3", "")
	lib := n.NVML()
	tg := target(t, "NVIDIA H100 80GB HBM3", gpu, "3g.40gb", 4)
	if _, _, err := migctl.Ensure(lib, tg); !errors.Is(err, migctl.ErrMIGDisabled) {
		t.Fatalf("Ensure with MIG disabled: %v", err)
	}
	if err := migctl.SetMode(lib, gpu, true); err != nil {
		t.Fatal(err)
	}
	d, created, err := migctl.Ensure(lib, tg)
	if err != nil || !created || d.UUID == "" || d.Placement != tg.Placement || d.ProfileID != 9 || d.ComputeInstances != 1 {
		t.Fatalf("Ensure: %+v, created %v, %v", d, created, err)
	}
	if h, ret := lib.DeviceGetHandleByUUID(d.UUID); ret != nvml.SUCCESS {
		t.Errorf("the MIG device %s has no handle: %v", d.UUID, ret)
	} else if name, _ := h.GetName(); name != "NVIDIA H100 80GB HBM3 MIG 3g.40gb" {
		t.Errorf("MIG device name %q", name)
	}
	inv, err := discovery.Discover(lib)
	if err != nil {
		t.Fatal(err)
	}
	if m := inv.GPUs[0].MIGDevices; len(m) != 1 || m[0].UUID != d.UUID || m[0].Profile != "3g.40gb" {
		t.Errorf("discovered %+v", m)
	}
	again, created, err := migctl.Ensure(lib, tg)
	if err != nil || created || again != d {
		t.Errorf("Ensure again: %+v, created %v, %v; want %+v, not created", again, created, err, d)
	}
	if err := migctl.Destroy(lib, gpu, tg.Placement, "MIG-someone-else"); !errors.Is(err, migctl.ErrNotCreated) {
		t.Errorf("Destroy with another UUID: %v", err)
	}
	if err := migctl.Destroy(lib, gpu, tg.Placement, ""); !errors.Is(err, migctl.ErrNotCreated) {
		t.Errorf("Destroy of a complete device without its UUID: %v", err)
	}
	if list, _ := migctl.List(lib, gpu); len(list) != 1 {
		t.Fatalf("a refused Destroy changed the GPU: %+v", list)
	}
	if err := migctl.Destroy(lib, gpu, tg.Placement, d.UUID); err != nil {
		t.Fatal(err)
	}
	if list, _ := migctl.List(lib, gpu); len(list) != 0 {
		t.Errorf("left %+v", list)
	}
	if _, ret := lib.DeviceGetHandleByUUID(d.UUID); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("destroyed MIG device handle: %v", ret)
	}
	if err := migctl.Destroy(lib, gpu, tg.Placement, d.UUID); err != nil {
		t.Errorf("Destroy of an empty placement: %v", err)
	}
	again, created, err = migctl.Ensure(lib, tg)
	if err != nil || !created || again.UUID == d.UUID {
		t.Errorf("re-created %+v (%v, %v); want a new UUID", again, created, err)
	}
}

// TestEnsureFinishesHalfMade checks what a Prepare cut short between the
// GPU instance and the compute instance leaves: Ensure adds the compute
// instance, and Destroy without a UUID removes the bare GPU instance.
func TestEnsureFinishesHalfMade(t *testing.T) {
	for _, finish := range []bool{true, false} {
		n, gpu := fake(t, "H200-141GB", "mig: []")
		lib := n.NVML()
		tg := target(t, "NVIDIA H200", gpu, "2g.35gb", 2)
		dev, _ := lib.DeviceGetHandleByUUID(gpu)
		info, _ := dev.GetGpuInstanceProfileInfo(tg.ProfileEnum)
		pl := tg.Placement.NVML()
		if _, ret := dev.CreateGpuInstanceWithPlacement(&info, &pl); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		if !finish {
			if err := migctl.Destroy(lib, gpu, tg.Placement, ""); err != nil {
				t.Fatal(err)
			}
			if list, _ := migctl.List(lib, gpu); len(list) != 0 {
				t.Errorf("the bare GPU instance is left: %+v", list)
			}
			continue
		}
		d, created, err := migctl.Ensure(lib, tg)
		if err != nil || !created || d.UUID == "" || d.ComputeInstances != 1 {
			t.Fatalf("Ensure on a bare GPU instance: %+v, %v, %v", d, created, err)
		}
		if list, _ := migctl.List(lib, gpu); len(list) != 1 {
			t.Errorf("Ensure made a second instance: %+v", list)
		}
	}
}

// TestEnsureRefusesOthers checks that Ensure never takes over or works
// around a MIG device it was not asked for: an overlapping instance, an
// instance of another profile at the same placement (4g and 3g both sit at
// {0}:4), one split into several compute instances.
func TestEnsureRefusesOthers(t *testing.T) {
	const product = "NVIDIA A100-SXM4-80GB"
	for _, tc := range []struct {
		name, layout string
		target       string
		start        int
		want         error
		msg          string
	}{
		{"overlapping", "mig: [{profile: 2g.20gb, placement: 4}]", "3g.40gb", 4, migctl.ErrPlacementTaken, "the placement is taken by GPU instance"},
		{"another profile", "mig: [{profile: 4g.40gb}]", "3g.40gb", 0, migctl.ErrNotCreated, "is of profile 5"},
		{"split", "mig: [{profile: 3g.40gb, placement: 4, computeInstances: [1, 2]}]", "3g.40gb", 4, migctl.ErrNotCreated, "holds 2 compute instances"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, gpu := fake(t, "A100-SXM4-80GB", tc.layout)
			lib := n.NVML()
			before, _ := migctl.List(lib, gpu)
			_, _, err := migctl.Ensure(lib, target(t, product, gpu, tc.target, tc.start))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Ensure: %v; want %v with %q", err, tc.want, tc.msg)
			}
			after, _ := migctl.List(lib, gpu)
			if fmt.Sprint(before) != fmt.Sprint(after) {
				t.Errorf("the GPU changed: %v -> %v", before, after)
			}
			if len(before) > 0 && before[0].UUID != "" {
				if err := migctl.Destroy(lib, gpu, before[0].Placement, before[0].UUID+"x"); !errors.Is(err, migctl.ErrNotCreated) {
					t.Errorf("Destroy of the other device: %v", err)
				}
			}
		})
	}
}

// TestDestroyInUse checks that a MIG device a process runs on is not
// destroyed (ErrInUse), and is once the process is gone.
func TestDestroyInUse(t *testing.T) {
	n, gpu := fake(t, "B200", "mig: []")
	lib := n.NVML()
	tg := target(t, "NVIDIA B200", gpu, "1g.23gb", 6)
	d, _, err := migctl.Ensure(lib, tg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.SetInUse(d.UUID, true); err != nil {
		t.Fatal(err)
	}
	if err := migctl.Destroy(lib, gpu, tg.Placement, d.UUID); !errors.Is(err, migctl.ErrInUse) {
		t.Errorf("Destroy in use: %v", err)
	}
	if list, _ := migctl.List(lib, gpu); len(list) != 1 || list[0].UUID != d.UUID {
		t.Errorf("after a refused Destroy: %+v", list)
	}
	if err := n.SetInUse(d.UUID, false); err != nil {
		t.Fatal(err)
	}
	if err := migctl.Destroy(lib, gpu, tg.Placement, d.UUID); err != nil {
		t.Error(err)
	}
}

// TestSetMode checks SetMode's answers: at once on an idle GPU, pending
// while a process holds it (ErrModePending and ErrInUse), pending on an
// Ampere GPU the host cannot reset, refused while instances exist.
func TestSetMode(t *testing.T) {
	t.Run("in use", func(t *testing.T) {
		n, gpu := fake(t, "A100-SXM4-40GB", "")
		if err := n.SetInUse(gpu, true); err != nil {
			t.Fatal(err)
		}
		err := migctl.SetMode(n.NVML(), gpu, true)
		if !errors.Is(err, migctl.ErrModePending) || !errors.Is(err, migctl.ErrInUse) {
			t.Errorf("SetMode on a GPU in use: %v", err)
		}
		_ = n.SetInUse(gpu, false)
		if err := migctl.SetMode(n.NVML(), gpu, true); err != nil {
			t.Errorf("SetMode once idle: %v", err)
		}
	})
	t.Run("no reset", func(t *testing.T) {
		n, gpu := fake(t, "A100-SXM4-40GB", "")
		_ = n.SetResetUnavailable(0, true)
		if err := migctl.SetMode(n.NVML(), gpu, true); !errors.Is(err, migctl.ErrModePending) || !strings.Contains(err.Error(), "until the GPU is reset") {
			t.Errorf("SetMode without a reset: %v", err)
		}
	})
	t.Run("instances", func(t *testing.T) {
		n, gpu := fake(t, "H100-80GB-HBM3", "mig: [{profile: 1g.10gb}]")
		if err := migctl.SetMode(n.NVML(), gpu, false); !errors.Is(err, migctl.ErrInUse) {
			t.Errorf("disabling with an instance: %v", err)
		}
		if err := migctl.SetMode(n.NVML(), gpu, true); err != nil {
			t.Errorf("enabling an enabled GPU: %v", err)
		}
	})
}

// TestConcurrentEnsure runs Ensure from many goroutines at once, as
// overlapping Prepare calls (and a kubelet retry racing the first call)
// do: each target gets exactly one MIG device, every caller of a target
// gets that device, and concurrent Destroy calls leave the GPU empty. Run
// with -race.
func TestConcurrentEnsure(t *testing.T) {
	const product = "NVIDIA H100 80GB HBM3"
	n, gpu := fake(t, "H100-80GB-HBM3", "mig: []")
	lib := n.NVML()
	targets := []migplace.Target{
		target(t, product, gpu, "3g.40gb", 4), target(t, product, gpu, "2g.20gb", 2),
		target(t, product, gpu, "1g.10gb", 1), target(t, product, gpu, "1g.10gb+me", 0),
	}
	for round := range 10 {
		var mu sync.Mutex
		got := map[migplace.Placement]map[string]bool{}
		var wg sync.WaitGroup
		for _, tg := range targets {
			for range 4 {
				wg.Go(func() {
					d, _, err := migctl.Ensure(lib, tg)
					if err != nil {
						t.Errorf("round %d: %s: %v", round, tg, err)
						return
					}
					mu.Lock()
					if got[tg.Placement] == nil {
						got[tg.Placement] = map[string]bool{}
					}
					got[tg.Placement][d.UUID] = true
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		list, err := migctl.List(lib, gpu)
		if err != nil || len(list) != len(targets) {
			t.Fatalf("round %d: %d instances: %+v (%v)", round, len(list), list, err)
		}
		for _, d := range list {
			if len(got[d.Placement]) != 1 || !got[d.Placement][d.UUID] || d.ComputeInstances != 1 {
				t.Fatalf("round %d: at %s callers got %v, NVML holds %s", round, d.Placement, got[d.Placement], d)
			}
		}
		for _, d := range list {
			for range 2 {
				wg.Go(func() {
					if err := migctl.Destroy(lib, gpu, d.Placement, d.UUID); err != nil {
						t.Errorf("round %d: destroying %s: %v", round, d, err)
					}
				})
			}
		}
		wg.Wait()
		if list, _ := migctl.List(lib, gpu); len(list) != 0 {
			t.Fatalf("round %d: left %+v", round, list)
		}
	}
}

// TestTargetFor checks that every placement of every catalog product
// resolves from its profile ID and start, through NVML alone, to the
// target the catalog gives.
func TestTargetFor(t *testing.T) {
	for _, p := range fakenode.Products() {
		if len(p.MIGProfiles) == 0 {
			continue
		}
		n, gpu := fake(t, p.Key, "mig: []")
		geo, _ := migplace.ProductByName(p.Name)
		for _, prof := range geo.Profiles {
			for _, pl := range prof.Placements {
				got, err := migctl.TargetFor(n.NVML(), gpu, prof.ID, pl.Start)
				if want := target(t, p.Name, gpu, prof.Name, pl.Start); err != nil || got != want {
					t.Errorf("%s: TargetFor(%d, %d) = %+v, %v; want %+v", p.Key, prof.ID, pl.Start, got, err, want)
				}
			}
		}
		if _, err := migctl.TargetFor(n.NVML(), gpu, 9, 2); err == nil {
			t.Errorf("%s: a 3g at memory slice 2 resolved", p.Key)
		}
		if _, err := migctl.TargetFor(n.NVML(), gpu, 99, 0); err == nil {
			t.Errorf("%s: profile 99 resolved", p.Key)
		}
	}
}
