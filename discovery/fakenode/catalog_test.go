package fakenode_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/fakenode"
)

// catalogProfiles are the MIG profile names of gpu-catalog.md, per product,
// in GPU instance profile order (1g, 1g+me, 1g wide, 2g, 3g, 4g, 7g).
func catalogProfiles() map[string][]string {
	return map[string][]string{
		"A100-SXM4-40GB": {"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
		"A100-SXM4-80GB": {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
		"H100-80GB-HBM3": {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
		"H200-141GB":     {"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
		// NVIDIA/mig-parted's default config for 0x2321 (H100 NVL) and
		// 0x2901 (B200).
		"H100-NVL": {"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"},
		"B200":     {"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"},
	}
}

// migNode builds a one-GPU node of product with MIG enabled and no GPU
// instances.
func migNode(t testing.TB, product string) *fakenode.Node {
	t.Helper()
	n, err := fakenode.Parse("test.yaml", fmt.Appendf(nil, `
name: catalog-test
driverVersion: "570.86.15"
cudaVersion: "12.8"
gpus:
  - product: %s
    mig: []
`, product))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCatalogProfileNames checks that go-nvlib derives exactly the catalog's
// MIG profile names from what the fake reports: the profiles a GPU offers
// (GetMigProfiles) and the profile of a MIG device created through NVML
// (GetProfile).
func TestCatalogProfileNames(t *testing.T) {
	for product, want := range catalogProfiles() {
		t.Run(product, func(t *testing.T) {
			lib := migNode(t, product).NVML()
			devlib := device.New(lib)

			var offered []string
			err := devlib.VisitDevices(func(_ int, d device.Device) error {
				profiles, err := d.GetMigProfiles()
				if err != nil {
					return err
				}
				for _, p := range profiles {
					if info := p.GetInfo(); info.C == info.G {
						offered = append(offered, p.String())
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			// go-nvlib lists a profile once per compute instance profile
			// that yields it (e.g. 1_SLICE and 1_SLICE_REV1): compare sets.
			if got := sortedSet(offered); !slices.Equal(got, sortedSet(want)) {
				t.Errorf("GetMigProfiles: got %v, want %v", got, sortedSet(want))
			}

			// One MIG device per profile, each on a freshly emptied GPU.
			gpu, ret := lib.DeviceGetHandleByIndex(0)
			if ret != nvml.SUCCESS {
				t.Fatal(ret)
			}
			var created []string
			for enum := range nvml.GPU_INSTANCE_PROFILE_COUNT {
				info, ret := gpu.GetGpuInstanceProfileInfo(enum)
				if ret == nvml.ERROR_NOT_SUPPORTED {
					continue
				}
				if ret != nvml.SUCCESS {
					t.Fatalf("profile %d: %v", enum, ret)
				}
				gi, ret := gpu.CreateGpuInstance(&info)
				if ret != nvml.SUCCESS {
					t.Fatalf("creating GPU instance of profile %d: %v", enum, ret)
				}
				ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciProfileFor(int(info.SliceCount)), nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
				if ret != nvml.SUCCESS {
					t.Fatalf("compute instance profile for %d slices: %v", info.SliceCount, ret)
				}
				ci, ret := gi.CreateComputeInstance(&ciInfo)
				if ret != nvml.SUCCESS {
					t.Fatalf("creating compute instance: %v", ret)
				}
				err := devlib.VisitMigDevices(func(_ int, _ device.Device, _ int, m device.MigDevice) error {
					p, err := m.GetProfile()
					if err != nil {
						return err
					}
					created = append(created, p.String())
					name, ret := m.GetName()
					if ret != nvml.SUCCESS || !strings.HasSuffix(name, " MIG "+p.String()) {
						t.Errorf("MIG device name %q (%v) does not end in the profile %s", name, ret, p)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if ret := ci.Destroy(); ret != nvml.SUCCESS {
					t.Fatal(ret)
				}
				if ret := gi.Destroy(); ret != nvml.SUCCESS {
					t.Fatal(ret)
				}
			}
			if len(created) != len(want) || !slices.Equal(sortedSet(created), sortedSet(want)) {
				t.Errorf("MIG device profiles: got %v, want %v", created, want)
			}
		})
	}
}

// sortedSet returns the distinct strings of s, sorted.
func sortedSet(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// ciProfileFor is the COMPUTE_INSTANCE_PROFILE_* value of a full-size
// compute instance of the given slices.
func ciProfileFor(slices int) int {
	return map[int]int{
		1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
		2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
		3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
		4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
		7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
	}[slices]
}

// TestPartialComputeInstanceNames checks the names go-nvlib gives compute
// instances smaller than their GPU instance.
func TestPartialComputeInstanceNames(t *testing.T) {
	n, err := fakenode.Load("testdata/compute-instances.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = device.New(n.NVML()).VisitMigDevices(func(_ int, _ device.Device, _ int, m device.MigDevice) error {
		p, err := m.GetProfile()
		if err != nil {
			return err
		}
		got = append(got, p.String())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"1c.3g.20gb", "2c.3g.20gb", "1c.4g.20gb", "1c.4g.20gb", "2c.4g.20gb"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
