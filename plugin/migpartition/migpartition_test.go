package migpartition_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/discovery/migplace"
	"github.com/featureplug/featureplug/plugin/migpartition"
	"github.com/featureplug/featureplug/rules/plan"
)

// dynamicGPU is GPU index of a catalog product offering every profile
// (or those named) and, with whole set, the whole GPU: what the rules make
// of it (rules' own tests check that they do).
func dynamicGPU(t testing.TB, product string, index int, whole bool, only ...string) plan.DynamicGPU {
	t.Helper()
	geo, ok := migplace.ProductByName(product)
	if !ok {
		t.Fatalf("no catalog product %s", product)
	}
	g := plan.DynamicGPU{
		UUID: fmt.Sprintf("GPU-%08x-1111-2222-3333-444455556666", index), Index: index, Product: product,
		Rule: "dyn", ModeChangeNeedsReset: migplace.ModeChangeNeedsReset(geo.ComputeMajor),
		Capacity: migplace.Capacity(geo.Profiles),
	}
	if whole {
		g.WholeGPU = "nvidia.com/gpu"
	}
	for _, p := range geo.Profiles {
		if len(only) > 0 && !slices.Contains(only, p.Name) {
			continue
		}
		ci, _ := p.FullComputeInstance()
		g.Profiles = append(g.Profiles, plan.DynamicProfile{Profile: p, Resource: "nvidia.com/mig-" + strings.ReplaceAll(p.Name, "+", "-"), ComputeInstanceProfile: ci})
	}
	return g
}

// catalogProducts are the MIG-capable products of migplace's table.
func catalogProducts() []string {
	var out []string
	for _, p := range migplace.Products() {
		out = append(out, p.Name)
	}
	return out
}

// checkAPI checks a layout against resource.k8s.io/v1's rules for
// ResourceSlices of one pool: each slice holds counter sets or devices,
// within the counts; names are DNS labels, unique in the pool; every
// consumption names a counter set of the pool and counters it holds, at
// most their values.
func checkAPI(t *testing.T, l migpartition.Layout) {
	t.Helper()
	sets := map[string]resourceapi.CounterSet{}
	devices := map[string]bool{}
	for i, s := range l.Slices {
		if len(s.SharedCounters) > 0 && len(s.Devices) > 0 {
			t.Errorf("slice %d holds counter sets and devices", i)
		}
		if len(s.SharedCounters) > resourceapi.ResourceSliceMaxCounterSets || len(s.Devices) > resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures {
			t.Errorf("slice %d: %d counter sets, %d devices", i, len(s.SharedCounters), len(s.Devices))
		}
		for _, cs := range s.SharedCounters {
			if errs := validation.IsDNS1123Label(cs.Name); len(errs) > 0 {
				t.Errorf("counter set %q: %v", cs.Name, errs)
			}
			if _, dup := sets[cs.Name]; dup {
				t.Errorf("counter set %q twice", cs.Name)
			}
			if len(cs.Counters) == 0 || len(cs.Counters) > resourceapi.ResourceSliceMaxCountersPerCounterSet {
				t.Errorf("counter set %q has %d counters", cs.Name, len(cs.Counters))
			}
			for name := range cs.Counters {
				if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
					t.Errorf("counter %q: %v", name, errs)
				}
			}
			sets[cs.Name] = cs
		}
	}
	for _, s := range l.Slices {
		for _, d := range s.Devices {
			if errs := validation.IsDNS1123Label(d.Name); len(errs) > 0 {
				t.Errorf("device %q: %v", d.Name, errs)
			}
			if devices[d.Name] {
				t.Errorf("device %q twice", d.Name)
			}
			devices[d.Name] = true
			if len(d.ConsumesCounters) != 1 {
				t.Errorf("device %q consumes from %d counter sets", d.Name, len(d.ConsumesCounters))
				continue
			}
			c := d.ConsumesCounters[0]
			set, ok := sets[c.CounterSet]
			if !ok {
				t.Errorf("device %q consumes from counter set %q, which the pool lacks", d.Name, c.CounterSet)
				continue
			}
			if len(c.Counters) == 0 || len(c.Counters) > resourceapi.ResourceSliceMaxCountersPerDeviceCounterConsumption {
				t.Errorf("device %q consumes %d counters", d.Name, len(c.Counters))
			}
			for name, v := range c.Counters {
				have, ok := set.Counters[name]
				if !ok || v.Value.Cmp(have.Value) > 0 {
					t.Errorf("device %q consumes %s of %q, the set holds %v", d.Name, v.Value.String(), name, have.Value.String())
				}
			}
		}
	}
}

// TestLayoutEveryProduct lays out one GPU of every catalog product with
// every profile and the whole GPU, and checks the API's rules, the
// devices (one per placement, plus the whole GPU), the counters (memory
// slices, compute slices, and the OFA, and on Ampere JPEG, of the +me
// profile) and that every device name resolves to what it stands for.
func TestLayoutEveryProduct(t *testing.T) {
	for _, product := range catalogProducts() {
		t.Run(product, func(t *testing.T) {
			g := dynamicGPU(t, product, 0, true)
			l := migpartition.Build([]plan.DynamicGPU{g}, migpartition.Options{})
			checkAPI(t, l)
			placements := 0
			for _, p := range g.Profiles {
				placements += len(p.Placements)
			}
			if got := l.Devices(); got != placements+1 {
				t.Errorf("%d devices, want %d placements + the whole GPU", got, placements)
			}
			set := l.Slices[0].SharedCounters[0]
			// The +me profile's OFA is the one engine that limits layouts
			// (on A100 its JPEG too, which limits the same ones).
			want := []string{"compute-slices", "memory-slice-0", "memory-slice-1", "memory-slice-2", "memory-slice-3",
				"memory-slice-4", "memory-slice-5", "memory-slice-6", "memory-slice-7", "ofa-engines"}
			var got []string
			for name := range set.Counters {
				got = append(got, name)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("counters %v, want %v", got, want)
			}
			for _, s := range l.Slices {
				for _, d := range s.Devices {
					a, ok := l.Lookup(d.Name)
					if !ok || a.GPU != g.UUID {
						t.Fatalf("device %q does not resolve: %+v", d.Name, a)
					}
					if a.Whole {
						if d.Name != migpartition.WholeGPUDeviceName(g.UUID) || len(d.ConsumesCounters[0].Counters) != len(set.Counters) {
							t.Errorf("whole GPU device %q consumes %v", d.Name, d.ConsumesCounters[0].Counters)
						}
						continue
					}
					ref, ok := migpartition.ParseDeviceName(d.Name)
					if !ok || ref.GPU != migpartition.WholeGPUDeviceName(g.UUID) || ref.ProfileID != a.Target.ProfileID || ref.Start != a.Target.Placement.Start {
						t.Errorf("device %q parses to %+v, %v; stands for %s", d.Name, ref, ok, a.Target)
					}
					want, err := g.Target(ref.ProfileID, ref.Start)
					if err != nil || want != a.Target {
						t.Errorf("device %q: target %+v, the plan's %+v (%v)", d.Name, a.Target, want, err)
					}
				}
			}
		})
	}
}

// TestLargestGPUs says what the largest catalog GPUs need when every
// profile and the whole GPU are offered: per GPU 26 devices (25
// placements and the whole GPU) drawing on one counter set of 10 counters;
// for 8 GPUs 208 devices in 4 device slices (two GPUs, 52 devices, each:
// a GPU's devices stay in one slice) and the 8 counter sets in 1 slice.
func TestLargestGPUs(t *testing.T) {
	for _, product := range []string{"NVIDIA B200", "NVIDIA H200"} {
		t.Run(product, func(t *testing.T) {
			one := migpartition.Build([]plan.DynamicGPU{dynamicGPU(t, product, 0, true)}, migpartition.Options{})
			var gpus []plan.DynamicGPU
			for i := range 8 {
				gpus = append(gpus, dynamicGPU(t, product, i, true))
			}
			eight := migpartition.Build(gpus, migpartition.Options{})
			checkAPI(t, eight)
			s1, s8 := one.Sizes(), eight.Sizes()
			t.Logf("%s: 1 GPU %+v; 8 GPUs %+v", product, s1, s8)
			if s1 != (migpartition.Sizes{GPUs: 1, Devices: 26, CounterSets: 1, Counters: 10, CounterSlices: 1, DeviceSlices: 1}) {
				t.Errorf("one GPU: %+v", s1)
			}
			if s8 != (migpartition.Sizes{GPUs: 8, Devices: 208, CounterSets: 8, Counters: 80, CounterSlices: 1, DeviceSlices: 4}) {
				t.Errorf("8 GPUs: %+v", s8)
			}
			for _, s := range eight.Slices[1:] {
				if len(s.Devices) != 52 {
					t.Errorf("a device slice holds %d devices, want two GPUs' 52", len(s.Devices))
				}
			}
			// 16 GPUs (fakenode.MaxGPUs) need a second counter slice.
			for i := 8; i < 16; i++ {
				gpus = append(gpus, dynamicGPU(t, product, i, true))
			}
			sixteen := migpartition.Build(gpus, migpartition.Options{})
			checkAPI(t, sixteen)
			if s := sixteen.Sizes(); s.CounterSlices != 2 || s.DeviceSlices != 8 || s.Devices != 416 {
				t.Errorf("16 GPUs: %+v", s)
			}
		})
	}
}

// TestWithheld checks that a GPU holding a MIG device featureplug did not
// create is left out, saying which, and that one holding only its own is
// laid out.
func TestWithheld(t *testing.T) {
	g := dynamicGPU(t, "NVIDIA H100 80GB HBM3", 0, true)
	g.Existing = []plan.ExistingMIG{
		{UUID: "MIG-ours", Profile: "3g.40gb", ProfileID: 9, Placement: migplace.Placement{Start: 4, Size: 4}, Whole: true},
		{UUID: "MIG-theirs", Profile: "1g.10gb", ProfileID: 19, Placement: migplace.Placement{Start: 0, Size: 1}, Whole: true},
	}
	other := dynamicGPU(t, "NVIDIA H100 80GB HBM3", 1, true)
	l := migpartition.Build([]plan.DynamicGPU{g, other}, migpartition.Options{Created: func(uuid string) bool { return uuid == "MIG-ours" }})
	if len(l.Withheld) != 1 || l.Withheld[0].GPU != g.UUID || !strings.Contains(l.Withheld[0].Reason, "GPU 0 holds MIG devices featureplug did not create: 1g.10gb {0}:1 (MIG-theirs)") {
		t.Errorf("withheld %+v", l.Withheld)
	}
	if s := l.Sizes(); s.GPUs != 1 {
		t.Errorf("laid out %d GPUs, want the other one", s.GPUs)
	}
	if l := migpartition.Build([]plan.DynamicGPU{g}, migpartition.Options{Created: func(string) bool { return true }}); len(l.Withheld) != 0 {
		t.Errorf("a GPU holding only its own MIG devices is withheld: %+v", l.Withheld)
	}
}

// TestParseDeviceName checks names that are not placements.
func TestParseDeviceName(t *testing.T) {
	name := migpartition.PlacementDeviceName("GPU-6f4a1b2c-1111-2222-3333-444455556666", "1g.10gb+me", 20, 6)
	if name != "gpu-6f4a1b2c-1111-2222-3333-444455556666-mig-1g10gbme-20-6" {
		t.Errorf("name %q", name)
	}
	ref, ok := migpartition.ParseDeviceName(name)
	if !ok || ref != (migpartition.DeviceRef{GPU: "gpu-6f4a1b2c-1111-2222-3333-444455556666", ProfileID: 20, Start: 6}) {
		t.Errorf("ParseDeviceName(%q) = %+v, %v", name, ref, ok)
	}
	for _, bad := range []string{"gpu-6f4a1b2c-1111-2222-3333-444455556666", "gpu-x-mig-3g40gb-9", "gpu-x-mig-3g40gb-9-8", "gpu-x-nope-3g40gb-9-4", "gpu-x-mig--9-4", "mig-3g40gb-9-4"} {
		if ref, ok := migpartition.ParseDeviceName(bad); ok {
			t.Errorf("ParseDeviceName(%q) = %+v", bad, ref)
		}
	}
}

// admits reports whether the counters let all the devices be allocated
// together: what the scheduler checks.
func admits(set resourceapi.CounterSet, devs []resourceapi.Device) bool {
	used := map[string]*resource.Quantity{}
	for _, d := range devs {
		for name, v := range d.ConsumesCounters[0].Counters {
			if used[name] == nil {
				q := v.Value.DeepCopy()
				used[name] = &q
			} else {
				used[name].Add(v.Value)
			}
		}
	}
	for name, q := range used {
		if q.Cmp(set.Counters[name].Value) > 0 {
			return false
		}
	}
	return true
}

// TestCountersAreNVMLsRules checks, on every catalog product, that the
// counters admit exactly the sets of placements the GPU holds: every set
// of MIG placements the counters admit is created by NVML (the fake
// node's rules: no overlap, at most MaxInstances of a profile), and every
// set they refuse is refused by NVML; the whole GPU goes with nothing.
// The two rule sets are written independently, so this catches a missing
// counter (two +me instances) or a needless one (a layout refused).
func TestCountersAreNVMLsRules(t *testing.T) {
	for _, p := range fakenode.Products() {
		if len(p.MIGProfiles) == 0 {
			continue
		}
		t.Run(p.Key, func(t *testing.T) {
			g := dynamicGPU(t, p.Name, 0, true)
			l := migpartition.Build([]plan.DynamicGPU{g}, migpartition.Options{})
			set := l.Slices[0].SharedCounters[0]
			var whole resourceapi.Device
			var devs []resourceapi.Device
			for _, d := range l.Slices[1].Devices {
				if a, _ := l.Lookup(d.Name); a.Whole {
					whole = d
				} else {
					devs = append(devs, d)
				}
			}
			node, err := fakenode.Parse("n.yaml", fmt.Appendf(nil, "name: counters\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n  - product: %s\n    mig: []\n", p.Key))
			if err != nil {
				t.Fatal(err)
			}
			dev, _ := node.NVML().DeviceGetHandleByIndex(0)
			nvmlHolds := func(chosen []resourceapi.Device) bool {
				var gis []nvml.GpuInstance
				defer func() {
					for _, gi := range gis {
						if ret := gi.Destroy(); ret != nvml.SUCCESS {
							t.Fatal(ret)
						}
					}
				}()
				for _, d := range chosen {
					a, _ := l.Lookup(d.Name)
					info, ret := dev.GetGpuInstanceProfileInfo(a.Target.ProfileEnum)
					if ret != nvml.SUCCESS {
						t.Fatal(ret)
					}
					pl := a.Target.Placement.NVML()
					gi, ret := dev.CreateGpuInstanceWithPlacement(&info, &pl)
					if ret == nvml.ERROR_INSUFFICIENT_RESOURCES {
						return false
					}
					if ret != nvml.SUCCESS {
						t.Fatalf("%s: %v", a.Target, ret)
					}
					gis = append(gis, gi)
				}
				return true
			}
			// Every set of at most 8 placements (the memory slices) the
			// counters or NVML could hold: sets are grown one device at a
			// time while NVML holds them, and each refused extension is
			// checked against the counters.
			checked, held := 0, 0
			var grow func(from int, chosen []resourceapi.Device)
			grow = func(from int, chosen []resourceapi.Device) {
				for i := from; i < len(devs); i++ {
					next := append(slices.Clone(chosen), devs[i])
					checked++
					byCounters, byNVML := admits(set, next), nvmlHolds(next)
					if byCounters != byNVML {
						names := make([]string, len(next))
						for k, d := range next {
							a, _ := l.Lookup(d.Name)
							names[k] = a.Target.Profile + " " + a.Target.Placement.String()
						}
						t.Fatalf("counters admit %v, NVML holds %v: %s", byCounters, byNVML, strings.Join(names, ", "))
					}
					if byNVML {
						held++
						if admits(set, append(slices.Clone(next), whole)) {
							t.Fatalf("the whole GPU is admitted next to %d MIG devices", len(next))
						}
						grow(i+1, next)
					}
				}
			}
			grow(0, nil)
			if !admits(set, []resourceapi.Device{whole}) {
				t.Error("the whole GPU alone is refused")
			}
			t.Logf("%s: %d sets checked, %d held", p.Key, checked, held)
		})
	}
}
