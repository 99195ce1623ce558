package fakenode_test

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/fakenode"
)

// gpuView is what go-nvlib reads of one GPU.
type gpuView struct {
	Name     string
	UUID     string
	Bus      string
	NUMA     int
	Arch     string
	Compute  string
	MemMiB   uint64
	MIG      bool
	Profiles []string
	MIGUUIDs []string
}

// view reads a node through go-nvlib, as discovery does.
func view(t testing.TB, n *fakenode.Node) []gpuView {
	t.Helper()
	out, err := tryView(n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryView is view without the test: it returns the first error of the walk.
func tryView(n *fakenode.Node) ([]gpuView, error) {
	var out []gpuView
	err := device.New(n.NVML()).VisitDevices(func(_ int, d device.Device) error {
		var g gpuView
		g.Name, _ = d.GetName()
		g.UUID, _ = d.GetUUID()
		g.Bus, _ = d.GetPCIBusID()
		g.NUMA, _ = d.GetNumaNodeId()
		g.Arch, _ = d.GetArchitectureAsString()
		g.Compute, _ = d.GetCudaComputeCapabilityAsString()
		mem, _ := d.GetMemoryInfo()
		g.MemMiB = mem.Total >> 20
		var err error
		if g.MIG, err = d.IsMigEnabled(); err != nil {
			return err
		}
		err = d.VisitMigDevices(func(_ int, m device.MigDevice) error {
			p, err := m.GetProfile()
			if err != nil {
				return err
			}
			uuid, _ := m.GetUUID()
			g.Profiles = append(g.Profiles, p.String())
			g.MIGUUIDs = append(g.MIGUUIDs, uuid)
			return nil
		})
		out = append(out, g)
		return err
	})
	return out, err
}

// TestBundledNodes checks what go-nvlib reads of every bundled node.
func TestBundledNodes(t *testing.T) {
	type want struct {
		gpus     int
		name     string
		arch     string
		compute  string
		memMiB   uint64
		numa     []int
		profiles [][]string // per GPU; nil: MIG disabled
	}
	a100Mixed := []string{"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"}
	a100TwoG := []string{"2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb"}
	balanced := []string{"3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"}
	tests := map[string]want{
		"dgx-a100": {8, "NVIDIA A100-SXM4-40GB", "Ampere", "8.0", 40960, []int{0, 0, 0, 0, 1, 1, 1, 1},
			[][]string{a100Mixed, a100Mixed, a100TwoG, a100TwoG, nil, nil, nil, nil}},
		"dgx-h100": {8, "NVIDIA H100 80GB HBM3", "Hopper", "9.0", 81559, []int{0, 0, 0, 0, 1, 1, 1, 1},
			make([][]string, 8)},
		"h200-mig":        {2, "NVIDIA H200", "Hopper", "9.0", 143771, []int{0, 0}, [][]string{balanced, balanced}},
		"a100-80gb-mixed": {2, "NVIDIA A100-SXM4-80GB", "Ampere", "8.0", 81920, []int{0, 0}, [][]string{{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb+me"}, nil}},
		"workstation":     {1, "NVIDIA L4", "Ada Lovelace", "8.9", 23034, []int{0}, [][]string{nil}},
		"hgx-b200": {8, "NVIDIA B200", "Blackwell", "10.0", 183359, []int{0, 0, 0, 0, 1, 1, 1, 1},
			make([][]string, 8)},
		"l40s-pcie": {4, "NVIDIA L40S", "Ada Lovelace", "8.9", 46068, []int{0, 0, 1, 1}, make([][]string, 4)},
		"l40s-vfio": {4, "NVIDIA L40S", "Ada Lovelace", "8.9", 46068, []int{0, 0, 1, 1}, make([][]string, 4)},
		"h100-nvl":  {4, "NVIDIA H100 NVL", "Hopper", "9.0", 95830, []int{0, 0, 1, 1}, make([][]string, 4)},
	}
	names := fakenode.BundledNames()
	if !slices.IsSorted(names) || len(names) != len(tests) {
		t.Fatalf("BundledNames = %v, want the %d nodes of this test, sorted", names, len(tests))
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			w, ok := tests[name]
			if !ok {
				t.Fatalf("no expectations for bundled node %s", name)
			}
			n, err := fakenode.Named(name)
			if err != nil {
				t.Fatal(err)
			}
			if n.Name() != name {
				t.Errorf("the file of bundled node %s names it %q", name, n.Name())
			}
			gpus := view(t, n)
			if len(gpus) != w.gpus {
				t.Fatalf("%d GPUs, want %d", len(gpus), w.gpus)
			}
			for i, g := range gpus {
				if g.Name != w.name || g.Arch != w.arch || g.Compute != w.compute || g.MemMiB != w.memMiB || g.NUMA != w.numa[i] {
					t.Errorf("GPU %d = %+v, want %s %s %s %d MiB NUMA %d", i, g, w.name, w.arch, w.compute, w.memMiB, w.numa[i])
				}
				if g.MIG != (w.profiles[i] != nil) || !slices.Equal(g.Profiles, w.profiles[i]) {
					t.Errorf("GPU %d MIG %v %v, want %v", i, g.MIG, g.Profiles, w.profiles[i])
				}
			}
		})
	}
}

// TestDeterministicIDs checks UUID and bus ID formats, that loading a file
// twice gives the same IDs, and that different nodes get different ones.
func TestDeterministicIDs(t *testing.T) {
	gpuRE := regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	migRE := regexp.MustCompile(`^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	busRE := regexp.MustCompile(`^0000:[0-9a-f]{2}:00\.0$`)
	seen := map[string]string{}
	for _, name := range fakenode.BundledNames() {
		a, _ := fakenode.Named(name)
		b, _ := fakenode.Named(name)
		va, vb := view(t, a), view(t, b)
		if !reflect.DeepEqual(va, vb) {
			t.Errorf("%s: two builds differ:\n%+v\n%+v", name, va, vb)
		}
		for _, g := range va {
			if !gpuRE.MatchString(g.UUID) || !busRE.MatchString(g.Bus) {
				t.Errorf("%s: GPU UUID %q or bus ID %q malformed", name, g.UUID, g.Bus)
			}
			ids := append([]string{g.UUID}, g.MIGUUIDs...)
			for _, m := range g.MIGUUIDs {
				if !migRE.MatchString(m) {
					t.Errorf("%s: MIG UUID %q malformed", name, m)
				}
			}
			for _, id := range ids {
				if other, dup := seen[id]; dup {
					t.Errorf("UUID %s in both %s and %s", id, other, name)
				}
				seen[id] = name
			}
		}
	}
}

// TestOpenAndReload checks Open by name and by path, Path and Reload.
func TestOpenAndReload(t *testing.T) {
	byName, err := fakenode.Open("h200-mig")
	if err != nil {
		t.Fatal(err)
	}
	if byName.Path() != "" {
		t.Errorf("bundled node has path %q", byName.Path())
	}
	again, err := byName.Reload()
	if err != nil || !reflect.DeepEqual(view(t, again), view(t, byName)) {
		t.Errorf("Reload of a bundled node: %v", err)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "node.yaml")
	data, err := os.ReadFile("testdata/compute-instances.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	byPath, err := fakenode.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if byPath.Path() != path || byPath.Name() != "compute-instances" {
		t.Errorf("Open(%s): path %q, name %q", path, byPath.Path(), byPath.Name())
	}
	before := view(t, byPath)
	changed := strings.Replace(string(data), "computeInstances: [1, 1, 2]", "computeInstances: [4]", 1)
	if err := os.WriteFile(path, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	after, err := byPath.Reload()
	if err != nil {
		t.Fatal(err)
	}
	got := view(t, after)
	if got[0].UUID != before[0].UUID || got[0].MIGUUIDs[0] != before[0].MIGUUIDs[0] {
		t.Errorf("reloading changed the GPU or the unchanged MIG device's UUID")
	}
	if want := []string{"1c.3g.20gb", "2c.3g.20gb", "4g.20gb"}; !slices.Equal(got[0].Profiles, want) {
		t.Errorf("after the change: %v, want %v", got[0].Profiles, want)
	}
	if _, err := fakenode.Named("../nodes/dgx-a100"); err == nil {
		t.Error("Named accepted a path")
	}
	parsed, _ := fakenode.Parse("x.yaml", data)
	if _, err := parsed.Reload(); err == nil {
		t.Error("Reload of a parsed node succeeded")
	}
}

// TestConcurrentUse reads, reconfigures and raises events on one node from
// several goroutines; run with -race.
func TestConcurrentUse(t *testing.T) {
	n, err := fakenode.Named("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	lib := n.NVML()
	set := listen(t, n, nvml.EventTypeXidCriticalError)
	defer freeSet(t, set)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				// A MIG device destroyed in the middle of a walk answers
				// INVALID_ARGUMENT (or NOT_FOUND), as on a real driver;
				// anything else is a bug.
				if _, err := tryView(n); err != nil &&
					!strings.Contains(err.Error(), "ERROR_INVALID_ARGUMENT") && !strings.Contains(err.Error(), "ERROR_NOT_FOUND") {
					t.Error(err)
				}
			}
		})
	}
	wg.Go(func() {
		dev, _ := lib.DeviceGetHandleByIndex(4)
		if ret, _ := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
			t.Error(ret)
			return
		}
		info, _ := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
		for range 20 {
			gi, ret := dev.CreateGpuInstance(&info)
			if ret != nvml.SUCCESS {
				t.Error(ret)
				return
			}
			ciInfo, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, 0)
			ci, _ := gi.CreateComputeInstance(&ciInfo)
			if ret := ci.Destroy(); ret != nvml.SUCCESS {
				t.Error(ret)
			}
			if ret := gi.Destroy(); ret != nvml.SUCCESS {
				t.Error(ret)
			}
		}
	})
	wg.Go(func() {
		for i := range 50 {
			if err := n.InjectXID(i%8, 79); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Go(func() {
		for received := 0; received < 50; {
			if _, ret := set.Wait(5000); ret != nvml.SUCCESS {
				t.Errorf("Wait: %v after %d events", ret, received)
				return
			}
			received++
		}
	})
	wg.Wait()
}

// BenchmarkBuildNode measures parsing, validating and building the largest
// bundled node.
func BenchmarkBuildNode(b *testing.B) {
	for b.Loop() {
		if _, err := fakenode.Named("dgx-a100"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadNode measures a go-nvlib pass over every GPU and MIG device
// of the largest bundled node.
func BenchmarkReadNode(b *testing.B) {
	n, err := fakenode.Named("dgx-a100")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		view(b, n)
	}
}

// TestFileSizeCap checks that a fake node file over MaxFileSize is refused
// by Load, Open and ReadFile with an error naming the file, its size and
// the cap, without reading it whole, while a largest-possible node written
// out in full is well under the cap.
func TestFileSizeCap(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	// A valid start, then 64 MiB of padding: a sparse file, so the test
	// writes nothing, and a reader that read it whole would take seconds.
	if _, err := f.WriteString("name: big\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n- product: H100-80GB-HBM3\n#"); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	want := big + ": the file is 67108864 bytes, over the cap of 262144 bytes (fakenode.MaxFileSize) for a fake node file"
	for name, read := range map[string]func() error{
		"Load":     func() error { _, err := fakenode.Load(big); return err },
		"Open":     func() error { _, err := fakenode.Open(big); return err },
		"ReadFile": func() error { _, err := fakenode.ReadFile(big); return err },
	} {
		if err := read(); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
	if _, err := fakenode.Parse("mem.yaml", make([]byte, fakenode.MaxFileSize+1)); err == nil || !strings.Contains(err.Error(), "mem.yaml: the file is 262145 bytes, over the cap") {
		t.Errorf("Parse of a large buffer: %v", err)
	}

	// The largest node a file can describe, in long form: MaxGPUs GPUs,
	// each its own entry with seven MIG devices, placements, health and
	// NUMA written out, every pair in an NVLink group.
	var b strings.Builder
	b.WriteString("# The largest node: every field written out, one entry per GPU.\nname: largest\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n")
	for i := range fakenode.MaxGPUs {
		b.WriteString("  - product: H100-80GB-HBM3 # an H100 of the HGX baseboard, seven 1g.10gb instances\n    count: 1\n    numa: " + strconv.Itoa(i/8) + "\n    mode: compute\n")
		b.WriteString("    health: {rowRemapPending: false, rowRemapFailed: false, volatileDoubleBitErrors: 0}\n    mig:\n")
		for p := range 7 {
			b.WriteString("      - profile: 1g.10gb\n        count: 1\n        placement: " + strconv.Itoa(p) + "\n        computeInstances: [1]\n")
		}
	}
	b.WriteString("nvlink:\n")
	for i := range fakenode.MaxGPUs {
		for j := i + 1; j < fakenode.MaxGPUs; j++ {
			b.WriteString("  - gpus: [" + strconv.Itoa(i) + ", " + strconv.Itoa(j) + "]\n    links: 1\n")
		}
	}
	if _, err := fakenode.Parse("largest.yaml", []byte(b.String())); err != nil {
		t.Fatalf("the largest node does not parse: %v", err)
	}
	if n := b.Len(); n*4 > fakenode.MaxFileSize {
		t.Errorf("the largest node in long form is %d bytes, within 4x of the cap %d", n, fakenode.MaxFileSize)
	} else {
		t.Logf("the largest node in long form is %d bytes; the cap is %d", n, fakenode.MaxFileSize)
	}
}
