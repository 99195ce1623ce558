// Package realgpu compares the fake node catalog with what a real GPU
// reported: the outputs test/realgpu/run.sh records under
// discovery/testdata/real (or $FP_REALGPU_DIR). Without them the tests
// skip, saying how to record them.
package realgpu

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"sigs.k8s.io/yaml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
)

// productKey returns the catalog key of the product NVML names nvmlName
// (e.g. "NVIDIA H200" -> "H200-141GB").
func productKey(nvmlName string) (string, bool) {
	for _, p := range fakenode.Products() {
		if p.Name == nvmlName {
			return p.Key, true
		}
	}
	return "", false
}

// productKeys lists the catalog's keys.
func productKeys() []string {
	var out []string
	for _, p := range fakenode.Products() {
		out = append(out, p.Key)
	}
	return out
}

// outputsDir is where run.sh writes by default.
func outputsDir() string {
	if d := os.Getenv("FP_REALGPU_DIR"); d != "" {
		return d
	}
	return filepath.Join("..", "..", "discovery", "testdata", "real")
}

// realInventory reads discover.yaml, or skips the test.
func realInventory(t *testing.T) *discovery.Inventory {
	t.Helper()
	path := filepath.Join(outputsDir(), "discover.yaml")
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) || (err == nil && len(data) == 0) {
		t.Skipf("no real-GPU outputs (%s is missing): run `bash test/realgpu/run.sh` from the repository root on a machine with an NVIDIA GPU and driver (an H200 is expected), then run this test again", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Inventory *discovery.Inventory `json:"inventory"`
	}
	if err := yaml.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if out.Inventory == nil || len(out.Inventory.GPUs) == 0 {
		t.Fatalf("%s holds no GPU", path)
	}
	return out.Inventory
}

// fakeOf discovers a one-GPU fake node of the catalog product key, with
// MIG enabled and the given GPU instance profiles when mig is non-nil.
func fakeOf(t *testing.T, key string, mig []string) (*fakenode.Node, *discovery.GPU) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "name: realgpu\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n  - product: %s\n", key)
	if mig != nil {
		b.WriteString("    mig:\n")
		for _, p := range mig {
			fmt.Fprintf(&b, "      - profile: %s\n", p)
		}
	}
	n, err := fakenode.Parse("realgpu.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	inv, err := discovery.Discover(n.NVML())
	if err != nil {
		t.Fatal(err)
	}
	return n, &inv.GPUs[0]
}

// TestRealGPUMatchesCatalog compares every real GPU of a catalog product
// (an H200 is expected) with the catalog: memory, compute capability,
// architecture, MIG support, and every MIG device present (profile name,
// memory, SMs, slices, engines).
func TestRealGPUMatchesCatalog(t *testing.T) {
	inv := realInventory(t)
	compared := 0
	for _, g := range inv.GPUs {
		key, ok := productKey(g.Product)
		if !ok {
			t.Logf("GPU %d: %q is not in the catalog (have %s); nothing to compare", g.Index, g.Product, strings.Join(productKeys(), ", "))
			continue
		}
		compared++
		t.Run(fmt.Sprintf("GPU%d-%s", g.Index, key), func(t *testing.T) {
			var mig []string
			if g.MIGCapable {
				mig = []string{}
			}
			_, f := fakeOf(t, key, mig)
			if g.MemoryMiB != f.MemoryMiB {
				t.Errorf("memory: real %d MiB, catalog %d MiB", g.MemoryMiB, f.MemoryMiB)
			}
			if g.ComputeMajor != f.ComputeMajor || g.ComputeMinor != f.ComputeMinor || g.Architecture != f.Architecture || g.Family != f.Family {
				t.Errorf("real %d.%d %s %s, catalog %d.%d %s %s", g.ComputeMajor, g.ComputeMinor, g.Architecture, g.Family,
					f.ComputeMajor, f.ComputeMinor, f.Architecture, f.Family)
			}
			if g.MIGCapable != f.MIGCapable {
				t.Errorf("MIG capable: real %v, catalog %v", g.MIGCapable, f.MIGCapable)
			}
			for _, m := range g.MIGDevices {
				_, fg := fakeOf(t, key, []string{m.Profile})
				if len(fg.MIGDevices) != 1 {
					t.Errorf("MIG %s: the catalog has no such profile", m.Profile)
					continue
				}
				fm := fg.MIGDevices[0]
				if m.MemoryMiB != fm.MemoryMiB {
					t.Errorf("MIG %s memory: real %d MiB, catalog %d MiB", m.Profile, m.MemoryMiB, fm.MemoryMiB)
				}
				if m.GISlices != fm.GISlices {
					t.Errorf("MIG %s GPU instance slices: real %d, catalog %d", m.Profile, m.GISlices, fm.GISlices)
				}
				if m.CISlices == m.GISlices && (m.Multiprocessors != fm.Multiprocessors || m.Engines != fm.Engines) {
					t.Errorf("MIG %s: real %d SMs %+v, catalog %d SMs %+v", m.Profile, m.Multiprocessors, m.Engines, fm.Multiprocessors, fm.Engines)
				}
			}
		})
	}
	if compared == 0 {
		t.Skipf("no GPU in %s is a catalog product", outputsDir())
	}
}

// lgipRow is one GPU instance profile of `nvidia-smi mig -lgip`.
type lgipRow struct {
	gpu       int
	name      string
	id        uint32
	instances int
	memoryMiB uint64
	sms       int
	dec, enc  int
	ce, jpeg  int
	ofa       int
}

var (
	lgipFirst  = regexp.MustCompile(`^\|\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+\d+/(\d+)\s+([\d.]+)\s+\S+\s+(\d+)\s+(\d+)\s+(\d+)\s+\|`)
	lgipSecond = regexp.MustCompile(`^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+\|`)
)

// parseLGIP reads an `nvidia-smi mig -lgip` table.
func parseLGIP(t *testing.T, path string) []lgipRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var rows []lgipRow
	sc := bufio.NewScanner(f)
	var cur *lgipRow
	for sc.Scan() {
		line := sc.Text()
		if m := lgipFirst.FindStringSubmatch(line); m != nil {
			gib, _ := strconv.ParseFloat(m[5], 64)
			r := lgipRow{name: m[2], memoryMiB: uint64(math.Round(gib * 1024))}
			r.gpu, _ = strconv.Atoi(m[1])
			id, _ := strconv.Atoi(m[3])
			r.id = uint32(id)
			r.instances, _ = strconv.Atoi(m[4])
			r.sms, _ = strconv.Atoi(m[6])
			r.dec, _ = strconv.Atoi(m[7])
			r.enc, _ = strconv.Atoi(m[8])
			rows = append(rows, r)
			cur = &rows[len(rows)-1]
			continue
		}
		if m := lgipSecond.FindStringSubmatch(line); m != nil && cur != nil {
			cur.ce, _ = strconv.Atoi(m[1])
			cur.jpeg, _ = strconv.Atoi(m[2])
			cur.ofa, _ = strconv.Atoi(m[3])
			cur = nil
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestRealMIGProfilesMatchCatalog compares `nvidia-smi mig -lgip` (recorded
// when a GPU was in MIG mode) with the catalog's GPU instance profiles, as
// the fake reports them through GetGpuInstanceProfileInfo: memory, SMs,
// instance count and engines, by profile ID.
func TestRealMIGProfilesMatchCatalog(t *testing.T) {
	inv := realInventory(t)
	path := filepath.Join(outputsDir(), "lgip.txt")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no %s: the GPU was not in MIG mode when run.sh ran (run.sh never changes the MIG mode)", path)
	}
	rows := parseLGIP(t, path)
	if len(rows) == 0 {
		t.Skipf("%s lists no GPU instance profile", path)
	}
	for _, r := range rows {
		if r.gpu >= len(inv.GPUs) {
			continue
		}
		key, ok := productKey(inv.GPUs[r.gpu].Product)
		if !ok {
			continue
		}
		n, _ := fakeOf(t, key, []string{})
		h, _ := n.NVML().DeviceGetHandleByIndex(0)
		var info *nvml.GpuInstanceProfileInfo
		for enum := range nvml.GPU_INSTANCE_PROFILE_COUNT {
			if i, ret := h.GetGpuInstanceProfileInfo(enum); ret == nvml.SUCCESS && i.Id == r.id {
				info = &i
				break
			}
		}
		if info == nil {
			t.Errorf("GPU %d (%s) profile %s (ID %d): not in the catalog", r.gpu, key, r.name, r.id)
			continue
		}
		got := lgipRow{gpu: r.gpu, name: r.name, id: r.id, instances: int(info.InstanceCount), memoryMiB: info.MemorySizeMB,
			sms: int(info.MultiprocessorCount), dec: int(info.DecoderCount), enc: int(info.EncoderCount),
			ce: int(info.CopyEngineCount), jpeg: int(info.JpegCount), ofa: int(info.OfaCount)}
		// lgip prints GiB with two decimals: allow its rounding.
		if d := int64(got.memoryMiB) - int64(r.memoryMiB); d < -6 || d > 6 {
			t.Errorf("GPU %d (%s) %s memory: real %d MiB, catalog %d MiB", r.gpu, key, r.name, r.memoryMiB, got.memoryMiB)
		}
		got.memoryMiB = r.memoryMiB
		if got != r {
			t.Errorf("GPU %d (%s) %s:\nreal    %+v\ncatalog %+v", r.gpu, key, r.name, r, got)
		}
	}
}

// TestParseLGIP guards the parser with the real H200 listing of
// NVIDIA/mig-parted#120 (two rows), so that the comparison above does not
// pass by reading nothing.
func TestParseLGIP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lgip.txt")
	table := `+-----------------------------------------------------------------------------+
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
|   0  MIG 1g.18gb       19     7/7        16.00      No     16     1     0   |
|                                                             1     1     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 7g.141gb       0     1/1        139.75     No     132    7     0   |
|                                                             8     7     1   |
+-----------------------------------------------------------------------------+
`
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	got := parseLGIP(t, path)
	want := []lgipRow{
		{gpu: 0, name: "1g.18gb", id: 19, instances: 7, memoryMiB: 16384, sms: 16, dec: 1, ce: 1, jpeg: 1},
		{gpu: 0, name: "7g.141gb", id: 0, instances: 1, memoryMiB: 143104, sms: 132, dec: 7, ce: 8, jpeg: 7, ofa: 1},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("parsed %+v\nwant   %+v", got, want)
	}
	// And the catalog agrees with this real listing.
	n, _ := fakeOf(t, "H200-141GB", []string{})
	h, _ := n.NVML().DeviceGetHandleByIndex(0)
	for _, w := range want {
		found := false
		for enum := range nvml.GPU_INSTANCE_PROFILE_COUNT {
			i, ret := h.GetGpuInstanceProfileInfo(enum)
			if ret == nvml.SUCCESS && i.Id == w.id {
				found = true
				if i.MemorySizeMB != w.memoryMiB || int(i.MultiprocessorCount) != w.sms || int(i.InstanceCount) != w.instances || int(i.CopyEngineCount) != w.ce {
					t.Errorf("catalog H200 %s = %+v, real %+v", w.name, i, w)
				}
			}
		}
		if !found {
			t.Errorf("catalog H200 has no profile ID %d", w.id)
		}
	}
}
