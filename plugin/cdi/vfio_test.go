package cdi

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// vfioTestPlan serves the first two VFIO GPUs of inv to VMs through DRA
// and the others through a device plugin, and inv's whole GPUs to
// containers through DRA.
func vfioTestPlan(inv *discovery.Inventory) *plan.Plan {
	p := cdiTestPlan(inv, -1)
	p.Resources[0].Serve = plan.ServeDRA
	dra := plan.Resource{Name: "nvidia.com/AD102GL_L40S", Serve: plan.ServeDRA}
	dp := plan.Resource{Name: "example.com/vm", Serve: plan.ServeDevicePlugin}
	for i, d := range inv.VFIO {
		pd := plan.Device{ID: d.PCIAddress, Kind: plan.DeviceVFIO, GPUUUID: d.PCIAddress, GPUIndex: -1, Rule: "vms",
			VFIO: &plan.VFIODevice{PCIAddress: d.PCIAddress, IOMMUGroup: d.IOMMUGroup, DevicePaths: d.DevicePaths()}}
		if i < 2 {
			dra.Devices = append(dra.Devices, pd)
		} else {
			dp.Devices = append(dp.Devices, pd)
		}
	}
	p.VFIO = []plan.Resource{dp, dra}
	return p
}

// TestVFIOSpec checks that the VFIO spec holds exactly the VFIO GPUs
// served through DRA, each with its own VFIO device nodes and nothing
// else (no driver libraries, no NVIDIA_VISIBLE_DEVICES, no common edits),
// that the container-GPU spec written beside it leaves it alone, and that
// it goes when no VFIO GPU is served through DRA.
func TestVFIOSpec(t *testing.T) {
	src, inv := openFakeInventory(t, "l40s-vfio")
	specDir := t.TempDir()
	p := vfioTestPlan(inv)
	ctx := context.Background()
	vs := NewVFIOSink(Writer{Dir: specDir}, nil)
	gs := newTestCDISink(t, fakeRoot(src, t.TempDir()), specDir)
	for _, s := range []interface {
		Check(*discovery.Inventory, *plan.Plan) error
		Apply(context.Context, *discovery.Inventory, *plan.Plan) error
	}{vs, gs} {
		if err := s.Check(inv, p); err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(ctx, inv, p); err != nil {
			t.Fatal(err)
		}
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(specDir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("CDI spec errors: %v", errs)
	}
	var vfio []string
	for _, name := range cache.ListDevices() {
		if strings.HasPrefix(name, VFIOKind+"=") {
			vfio = append(vfio, name)
		}
	}
	want := []string{"featureplug.io/vfio=0000:47:00.0", "featureplug.io/vfio=0000:57:00.0"}
	if !slices.Equal(vfio, want) {
		t.Fatalf("VFIO CDI devices %v, want %v (the container-GPU spec must not remove them)", vfio, want)
	}
	if got := VFIOQualifiedName(p.VFIO[1].Devices[0]); got != want[0] {
		t.Errorf("VFIOQualifiedName: %q, want %q", got, want[0])
	}
	spec := cache.GetVendorSpecs("featureplug.io")
	if len(spec) != 1 {
		t.Fatalf("%d featureplug.io specs, want 1", len(spec))
	}
	if e := spec[0].ContainerEdits; len(e.Env)+len(e.Mounts)+len(e.DeviceNodes)+len(e.Hooks) != 0 {
		t.Errorf("the VFIO spec has common edits %+v, want none", e)
	}
	for _, d := range spec[0].Devices {
		var nodes []string
		for _, n := range d.ContainerEdits.DeviceNodes {
			nodes = append(nodes, n.Path)
		}
		wantNodes := map[string][]string{"0000:47:00.0": {"/dev/vfio/vfio", "/dev/vfio/34"}, "0000:57:00.0": {"/dev/vfio/vfio", "/dev/vfio/35"}}[d.Name]
		e := d.ContainerEdits
		if !slices.Equal(nodes, wantNodes) || len(e.Env)+len(e.Mounts)+len(e.Hooks) != 0 {
			t.Errorf("device %s: nodes %v, env %v, mounts %v, hooks %v; want only the nodes %v", d.Name, nodes, e.Env, e.Mounts, e.Hooks, wantNodes)
		}
		if d.Annotations[AnnotationResource] != "nvidia.com/AD102GL_L40S" || d.Annotations[AnnotationRule] != "vms" {
			t.Errorf("device %s: annotations %v", d.Name, d.Annotations)
		}
	}

	// Removed behind the agent's back: written again.
	path := vs.OutputFiles()["cdi-vfio"]
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	vs.RestoreOutput()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the VFIO spec was not restored: %v", err)
	}

	// No VFIO GPU served through DRA: no file.
	p2 := vfioTestPlan(inv)
	p2.VFIO[1].Serve = plan.ServeDevicePlugin
	if err := vs.Check(inv, p2); err != nil {
		t.Fatal(err)
	}
	if err := vs.Apply(ctx, inv, p2); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("VFIO spec with no VFIO device served through DRA: %v, want it removed", err)
	}
}

// TestVFIOSpecRefusesDeviceWithoutNodes checks that a VFIO device the plan
// gives no device nodes refuses the plan, naming it.
func TestVFIOSpecRefusesDeviceWithoutNodes(t *testing.T) {
	p := &plan.Plan{VFIO: []plan.Resource{{Name: "example.com/vm", Serve: plan.ServeDRA, Devices: []plan.Device{
		{ID: "0000:47:00.0", Kind: plan.DeviceVFIO, Rule: "vms", VFIO: &plan.VFIODevice{PCIAddress: "0000:47:00.0"}}}}}}
	err := NewVFIOSink(Writer{Dir: t.TempDir()}, nil).Check(nil, p)
	want := "CDI device featureplug.io/vfio=0000:47:00.0 (resource example.com/vm, rule vms): a VFIO device without device nodes"
	if err == nil || err.Error() != want {
		t.Errorf("Check: %v, want %q", err, want)
	}
}
