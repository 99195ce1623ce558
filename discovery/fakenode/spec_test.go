package fakenode_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/fakenode"
)

// TestBadFiles checks that every bad fake node file is rejected with an
// error naming the file, the field path and the offending value.
func TestBadFiles(t *testing.T) {
	tests := []struct {
		file string
		want string // the whole message, after "testdata/bad/<file>: "
	}{
		{"unknown-product.yaml", `gpus[2].product: "B300" is not a known product (known products: A100-SXM4-40GB, A100-SXM4-80GB, B200, H100-80GB-HBM3, H100-NVL, H200-141GB, L4, L40S)`},
		{"unknown-profile.yaml", `gpus[0].mig[1].profile: "2g.99gb" is not a MIG profile of A100-SXM4-40GB (have 1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb)`},
		{"too-many-instances.yaml", `gpus[0].mig[1]: GPU 0 (A100-SXM4-40GB): 8 instances of 1g.5gb, a GPU holds at most 7`},
		{"too-many-slices.yaml", `gpus[0].mig: GPUs 0-1 (H200-141GB): the layout needs 8 compute slices, a GPU has 7`},
		{"no-placement.yaml", `gpus[0].mig[2]: GPU 0 (A100-SXM4-40GB): no free placement for 1g.5gb (it starts at memory slice 0, 1, 2, 3, 4, 5 or 6) next to the rest of the layout`},
		{"bad-placement.yaml", `gpus[0].mig[0].placement: 3 is not a placement of 2g.10gb (it starts at memory slice 0, 2 or 4)`},
		{"overlapping-placement.yaml", `gpus[0].mig[1]: GPU 0 (A100-SXM4-40GB): 2g.10gb at memory slice 2 overlaps 3g.20gb at memory slice 0 (mig[0])`},
		{"bad-compute-instances.yaml", `gpus[0].mig[0].computeInstances[0]: 3 is not a compute instance size of 4g.20gb (have 1, 2 or 4)`},
		{"mig-not-capable.yaml", `gpus[0].mig: L4 does not support MIG; remove the mig key`},
		{"unknown-field.yaml", `gpus[0].mig[0].profil: unknown field (known: computeInstances, count, placement, profile)`},
		{"unknown-top-field.yaml", `gpu: unknown field (known: cudaVersion, driverVersion, gpus, name, nvlink, pcie, vfio)`},
		{"count-not-integer.yaml", `gpus[0].count: must be an integer, not "two"`},
		{"count-zero.yaml", `gpus[0].count: 0 is out of range (1-16)`},
		{"cuda-unquoted.yaml", `cudaVersion: must be a string, not the number 12.8`},
		{"mig-not-a-list.yaml", `gpus[0].mig: must be a list, not "3g.20gb"`},
		{"nvlink-bad-index.yaml", `nvlink[0].gpus[2]: GPU 9 does not exist (the node has 4 GPUs, 0-3)`},
		{"nvlink-duplicate.yaml", `nvlink[0].gpus[2]: GPU 1 is listed twice`},
		{"nvlink-too-many-lanes.yaml", `nvlink[0]: GPU 0 (A100-SXM4-40GB) would need 36 NVLink lanes, it has 12; set nvswitch: true for GPUs connected through NVSwitches`},
		{"nvlink-no-nvlink.yaml", "nvlink[0].gpus[0]: GPU 0 (L4) has no NVLink\n" +
			"testdata/bad/nvlink-no-nvlink.yaml: nvlink[0].gpus[1]: GPU 1 (L4) has no NVLink"},
		{"nvswitch-mixed-products.yaml", `nvlink[0].gpus[1]: GPU 1 (H200-141GB) differs from GPU 0 (H100-80GB-HBM3); an NVSwitch group needs one product`},
		{"nvswitch-two-fabrics.yaml", `nvlink[1].nvswitch: nvlink[0] already connects GPUs through NVSwitches; a node has one NVSwitch fabric (as every HGX/DGX baseboard): list all its GPUs in one group`},
		{"health-unknown-field.yaml", `gpus[0].health.rowRemapPendng: unknown field (known: recoveryAction, retiredPagesPending, rowRemapFailed, rowRemapPending, volatileDoubleBitErrors)`},
		{"health-retired-pages-on-hbm.yaml", `gpus[1].health.retiredPagesPending: H100-80GB-HBM3 retires no pages (it remaps rows); use rowRemapPending`},
		{"health-row-remap-on-gddr.yaml", `gpus[0].health.rowRemapPending: L40S remaps no rows (it retires pages); use retiredPagesPending`},
		{"health-negative-ecc.yaml", `gpus[0].health.volatileDoubleBitErrors: -2 is out of range (0-1048576)`},
		{"health-not-bool.yaml", `gpus[0].health.rowRemapFailed: must be true or false, not "yes"`},
		{"health-bad-recovery-action.yaml", `gpus[0].health.recoveryAction: "reboot" is not a recovery action (have none, gpu-reset, node-reboot, drain-p2p, drain-and-reset, recover-imex-domain, bus-reset, system-reboot)`},
		{"pcie-bad-level.yaml", `pcie[0].level: "PCIE" is not a PCIe level (have PIX, PXB, PHB, NODE, SYS)`},
		{"bad-name.yaml", `name: "DGX_A100" is not a valid node name: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		{"missing-fields.yaml", "name: is required\n" +
			"testdata/bad/missing-fields.yaml: driverVersion: is required, e.g. \"570.86.15\"\n" +
			"testdata/bad/missing-fields.yaml: cudaVersion: is required, e.g. \"12.8\"\n" +
			"testdata/bad/missing-fields.yaml: gpus: at least one GPU is required"},
		{"not-yaml.yaml", `not valid YAML: yaml: line 3: did not find expected '-' indicator`},
		{"empty.yaml", `the file is empty`},
		{"mode-unknown.yaml", `gpus[0].mode: "display" is not a mode (use compute or graphics)`},
		{"fabric-bad-uuid.yaml", `gpus[0].fabric.clusterUUID: "not-a-uuid" is not a UUID (8-4-4-4-12 hex digits)`},
		{"fabric-zero-uuid.yaml", "gpus[0].fabric.clusterUUID: the zero UUID means not attached; remove the fabric key instead\n" +
			"testdata/bad/fabric-zero-uuid.yaml: gpus[0].fabric.cliqueID: -1 is out of range (0-4294967295)"},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.file] = true
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", "bad", tt.file)
			n, err := fakenode.Load(path)
			if err == nil {
				t.Fatalf("Load(%s) = node %q, want an error", path, n.Name())
			}
			if got, want := err.Error(), path+": "+tt.want; got != want {
				t.Errorf("error:\n got: %s\nwant: %s", got, want)
			}
			var se *fakenode.SpecError
			if !errors.As(err, &se) || se.Source != path {
				t.Errorf("error %v is not a *SpecError for %s", err, path)
			}
		})
	}
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !covered[filepath.Base(f)] {
			t.Errorf("%s has no expected error in the table", f)
		}
	}
}

// TestParseSourceName checks that Parse names the source it is given.
func TestParseSourceName(t *testing.T) {
	_, err := fakenode.Parse("inline.yaml", []byte("name: x\ndriverVersion: \"1.2\"\ncudaVersion: \"12.8\"\ngpus:\n  - product: B300\n"))
	want := `inline.yaml: gpus[0].product: "B300" is not a known product (known products: A100-SXM4-40GB, A100-SXM4-80GB, B200, H100-80GB-HBM3, H100-NVL, H200-141GB, L4, L40S)`
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

// TestLoadMissingFile checks that a missing file is an fs.ErrNotExist error
// naming it.
func TestLoadMissingFile(t *testing.T) {
	_, err := fakenode.Load("testdata/no-such-node.yaml")
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v, want a not-exist error", err)
	}
	_, err = fakenode.Open("no-such-node")
	want := `fake node "no-such-node" is neither a bundled node (a100-80gb-mixed, dgx-a100, dgx-h100, h100-nvl, h200-mig, hgx-b200, l40s-pcie, l40s-vfio, workstation) nor a file: reading fake node file: open no-such-node: no such file or directory`
	if err == nil || err.Error() != want {
		t.Errorf("Open: got %v, want %s", err, want)
	}
}

// TestSpecDefaults checks the defaults a minimal file gets and that the
// parsed Spec is kept.
func TestSpecDefaults(t *testing.T) {
	n, err := fakenode.Parse("min.yaml", []byte("name: min\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n  - product: H100-80GB-HBM3\n    mig:\n"))
	if err != nil {
		t.Fatal(err)
	}
	spec := n.Spec()
	if len(spec.GPUs) != 1 || spec.GPUs[0].Count != nil || !spec.GPUs[0].MIGEnabled {
		t.Errorf("spec = %+v, want one GPU entry without count and with MIG enabled by the bare mig key", spec)
	}
	dev, _ := n.NVML().DeviceGetHandleByIndex(0)
	if numa, ret := dev.GetNumaNodeId(); numa != 0 || ret != nvml.SUCCESS {
		t.Errorf("NUMA node = %d, %v; want 0 by default", numa, ret)
	}
	if count, _ := n.NVML().DeviceGetCount(); count != 1 {
		t.Errorf("device count = %d, want 1", count)
	}
}
