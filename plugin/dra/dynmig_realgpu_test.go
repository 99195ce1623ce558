package dra

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/gpusource"
	"github.com/featureplug/featureplug/discovery/migctl"
	"github.com/featureplug/featureplug/discovery/migplace"
	"github.com/featureplug/featureplug/plugin/cdi"
	"github.com/featureplug/featureplug/rules/plan"
)

// dynCheckEnv selects TestDynamicPrepareOnGPU's GPU source: "real" (the
// node's NVML) or "fake:<bundled node>" (a dry run). test/realgpu/dynmig.sh
// sets it.
const dynCheckEnv = "FEATUREPLUG_DYNMIG_CHECK"

// dynSource is a GPU source of the check.
type dynSource interface {
	Discover() (*discovery.Inventory, nvml.Interface, error)
	Close()
}

// TestDynamicPrepareOnGPU runs dynamic MIG's prepare and unprepare, as
// the kubelet drives them, on one GPU of this machine (or of a fake node):
// for every profile, at its lowest and highest placement, a claim is
// prepared (MIG device created, CDI spec written by the node's real CDI
// generator, checkpointed), the GPU must hold exactly that MIG device, and
// the unprepare must leave none; it logs each step's time. It touches only
// a GPU without MIG devices; MIG mode is turned on (and off at the end) only
// with MIG_ALLOW_MODE=1. Run by test/realgpu/dynmig.sh.
func TestDynamicPrepareOnGPU(t *testing.T) {
	mode := os.Getenv(dynCheckEnv)
	if mode == "" {
		t.Skip("run by test/realgpu/dynmig.sh (" + dynCheckEnv + "=real or fake:<node>)")
	}
	var (
		src dynSource
		err error
	)
	if name, ok := strings.CutPrefix(mode, "fake:"); ok {
		src, err = gpusource.OpenFake(name)
	} else {
		src, err = gpusource.OpenReal(discovery.NVMLOptions{}, "/")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	inv, lib, err := src.Discover()
	if err != nil {
		t.Fatal(err)
	}
	if err := discovery.ReadMIGGeometry(lib, inv); err != nil {
		t.Fatal(err)
	}
	g := dynCheckGPU(t, inv)
	if g.MIGGeometry.ModeChangeNeedsReset && !g.MIGEnabled {
		t.Skipf("GPU %d (%s) needs a reset to enable MIG mode: enable it first", g.Index, g.Product)
	}
	wasOff := !g.MIGEnabled
	if wasOff && os.Getenv("MIG_ALLOW_MODE") != "1" {
		t.Skipf("GPU %d has MIG mode off: set MIG_ALLOW_MODE=1 to let the prepare turn it on (and off again at the end)", g.Index)
	}
	if wasOff {
		defer func() {
			if err := migctl.SetMode(lib, g.UUID, false); err != nil {
				t.Errorf("turning MIG mode off again on GPU %d: %v", g.Index, err)
			}
		}()
	}
	dg := plan.DynamicGPU{UUID: g.UUID, Index: g.Index, Product: g.Product, MemoryMiB: g.MemoryMiB, Rule: "check",
		Capacity: migplace.Capacity(g.MIGGeometry.Profiles)}
	for _, p := range g.MIGGeometry.Profiles {
		if ci, ok := p.FullComputeInstance(); ok {
			dg.Profiles = append(dg.Profiles, plan.DynamicProfile{Profile: p, Resource: "example.com/mig-" + strings.ReplaceAll(p.Name, "+", "."), ComputeInstanceProfile: ci})
		}
	}
	b, err := BuildSlice(inv, &plan.Plan{DynamicMIG: []plan.DynamicGPU{dg}}, BuildOptions{CDIKind: "example.com/gpu"})
	if err != nil {
		t.Fatal(err)
	}
	gen, cleanup, err := cdi.NewGenerator(src, cdi.DriverConfig{DriverRoot: os.Getenv("DRIVER_ROOT")}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	specs := cdi.ClaimSpecs{Options: cdi.Options{Kind: "example.com/gpu"}, Writer: cdi.Writer{Dir: t.TempDir()}, Generator: gen,
		Discover: src.Discover}
	claims := &nodeClaims{}
	node, err := NewNode(NodeOptions{NodeName: nodeTestNode, StateDir: t.TempDir(), Claims: claims.in, Table: func() *Table { return b.Table },
		Partition: Partitioner{NVML: func() nvml.Interface { return lib }, WriteCDI: specs.Write, RemoveCDI: specs.Remove}})
	if err != nil {
		t.Fatal(err)
	}
	d := &dynNode{node: node, svc: &draService{n: node}, lib: lib, gpu: g.UUID, claims: claims, table: b.Table}
	n := 0
	for _, p := range dg.Profiles {
		ends := []migplace.Placement{p.Placements[0]}
		if len(p.Placements) > 1 {
			ends = append(ends, p.Placements[len(p.Placements)-1])
		}
		for _, pl := range ends {
			n++
			c := d.claim(strconv.Itoa(n), p.Name, p.ID, pl.Start)
			began := time.Now()
			r := d.prepare(t, c)
			took := time.Since(began)
			if r.Error != "" {
				t.Errorf("%s %s: prepare: %s", p.Name, pl, r.Error)
				continue
			}
			devs := d.list(t)
			if len(devs) != 1 || devs[0].Placement != pl || devs[0].ProfileID != p.ID || "example.com/gpu="+devs[0].UUID != r.Devices[0].CdiDeviceIds[0] {
				t.Errorf("%s %s: the GPU holds %+v, the answer %v", p.Name, pl, devs, r.Devices[0].CdiDeviceIds)
			}
			began = time.Now()
			if e := d.unprepare(t, c); e != "" {
				t.Errorf("%s %s: unprepare: %s", p.Name, pl, e)
			}
			t.Logf("%-10s %-8s prepare %8v  unprepare %8v", p.Name, pl, took.Round(time.Microsecond), time.Since(began).Round(time.Microsecond))
			if devs := d.list(t); len(devs) != 0 {
				t.Fatalf("%s %s: after unprepare the GPU holds %+v", p.Name, pl, devs)
			}
		}
	}
}

// dynCheckGPU picks the GPU of the check: FEATUREPLUG_DYNMIG_GPU (an
// index), else the first MIG-capable GPU without MIG devices.
func dynCheckGPU(t *testing.T, inv *discovery.Inventory) *discovery.GPU {
	t.Helper()
	want := os.Getenv("FEATUREPLUG_DYNMIG_GPU")
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		if want != "" && strconv.Itoa(g.Index) != want {
			continue
		}
		if !g.MIGCapable || g.MIGGeometry == nil {
			continue
		}
		if len(g.MIGDevices) > 0 {
			t.Skipf("GPU %d holds MIG devices; the check touches only a GPU without any", g.Index)
		}
		return g
	}
	t.Skip("no MIG-capable GPU to check")
	return nil
}
