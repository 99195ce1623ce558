package migplace_test

import (
	"slices"
	"testing"

	"github.com/featureplug/featureplug/discovery/migplace"
)

// TestPlacement checks the placement arithmetic.
func TestPlacement(t *testing.T) {
	a, b, c := migplace.Placement{Start: 0, Size: 4}, migplace.Placement{Start: 4, Size: 4}, migplace.Placement{Start: 2, Size: 2}
	if a.Mask() != 0x0F || b.Mask() != 0xF0 || c.Mask() != 0x0C {
		t.Errorf("masks %#x %#x %#x", a.Mask(), b.Mask(), c.Mask())
	}
	if a.Overlaps(b) || !a.Overlaps(c) || b.Overlaps(c) {
		t.Error("overlaps")
	}
	if a.String() != "{0}:4" || (migplace.Placement{Start: -1, Size: 2}).Mask() != 0 {
		t.Errorf("%s", a)
	}
	if got := migplace.PlacementOf(b.NVML()); got != b {
		t.Errorf("NVML round trip %v", got)
	}
}

// TestComputeInstances checks the compute instance sizes each GPU
// instance size holds, as `nvidia-smi mig -lcip` lists them.
func TestComputeInstances(t *testing.T) {
	for g, want := range map[int][]int{1: {1}, 2: {1, 2}, 3: {1, 2, 3}, 4: {1, 2, 4}, 7: {1, 2, 3, 4, 7}} {
		if got := migplace.ComputeInstanceSizes(g); !slices.Equal(got, want) {
			t.Errorf("%dg: %v, want %v", g, got, want)
		}
	}
	for slices, enum := range map[int]int{1: 0, 2: 1, 3: 2, 4: 3, 7: 4} {
		if got, ok := migplace.ComputeInstanceProfile(slices); !ok || got != enum {
			t.Errorf("%d slices: profile %d, %v; want %d", slices, got, ok, enum)
		}
	}
	if _, ok := migplace.ComputeInstanceProfile(5); ok {
		t.Error("a 5-slice compute instance profile")
	}
}

// TestCatalog checks the table's invariants on every product: the seven
// profiles with distinct IDs and enums, placements within the 8 memory
// slices, all of a profile's size, at least as many as its instances;
// the whole-GPU profile's capacity; Ampere's mode change needing a reset.
func TestCatalog(t *testing.T) {
	products := migplace.Products()
	if len(products) != 6 {
		t.Errorf("%d products", len(products))
	}
	for _, p := range products {
		ids, enums := map[uint32]bool{}, map[int]bool{}
		for _, prof := range p.Profiles {
			if ids[prof.ID] || enums[prof.Enum] {
				t.Errorf("%s %s: ID %d or enum %d twice", p.Name, prof.Name, prof.ID, prof.Enum)
			}
			ids[prof.ID], enums[prof.Enum] = true, true
			if len(prof.Placements) < prof.MaxInstances && prof.MaxInstances > 1 {
				t.Errorf("%s %s: %d placements for %d instances", p.Name, prof.Name, len(prof.Placements), prof.MaxInstances)
			}
			for _, pl := range prof.Placements {
				if pl.Size != prof.MemorySliceCount() || pl.Start < 0 || pl.Start+pl.Size > migplace.MemorySlices || pl.Start%pl.Size != 0 && pl.Size > 1 {
					t.Errorf("%s %s: placement %s", p.Name, prof.Name, pl)
				}
			}
			if _, ok := prof.FullComputeInstance(); !ok {
				t.Errorf("%s %s: no compute instance fills it", p.Name, prof.Name)
			}
		}
		if len(p.Profiles) != 7 {
			t.Errorf("%s: %d profiles", p.Name, len(p.Profiles))
		}
		whole := p.Profiles[len(p.Profiles)-1]
		if c := migplace.Capacity(p.Profiles); c.MemorySlices != 0xFF || c.ComputeSlices != migplace.ComputeSlices || c.Engines != whole.Engines {
			t.Errorf("%s: capacity %+v, whole profile %+v", p.Name, c, whole.Engines)
		}
		if got := migplace.ModeChangeNeedsReset(p.ComputeMajor); got != (p.ComputeMajor == 8) {
			t.Errorf("%s: mode change needs reset %v", p.Name, got)
		}
		if _, ok := migplace.ProductByName(p.Name); !ok {
			t.Errorf("%s: not found by name", p.Name)
		}
	}
}

// TestScarceEngines checks which engines limit layouts: on every catalog
// product only the OFA the +me profile and the whole-GPU profile hold
// (the A100's JPEG limits the same layouts and is dropped), and none when
// the +me profile is not offered.
func TestScarceEngines(t *testing.T) {
	for _, p := range migplace.Products() {
		c := migplace.Capacity(p.Profiles)
		if got := migplace.ScarceEngines(p.Profiles, c); !slices.Equal(got, []migplace.EngineKind{migplace.EngineOFA}) {
			t.Errorf("%s: %v, want [ofa]", p.Name, got)
		}
		noME := slices.DeleteFunc(slices.Clone(p.Profiles), func(x migplace.Profile) bool { return x.Enum == p.Profiles[1].Enum })
		if got := migplace.ScarceEngines(noME, c); len(got) != 0 {
			t.Errorf("%s without +me: %v, want none", p.Name, got)
		}
	}
}
