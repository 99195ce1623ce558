package cdi

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/rules/plan"
)

// fakeInventory opens a bundled fake node and discovers it.
func fakeInventory(t *testing.T, name string) (*fakenode.Node, *discovery.Inventory) {
	t.Helper()
	n, err := fakenode.Named(name)
	if err != nil {
		t.Fatal(err)
	}
	if ret := n.NVML().Init(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	inv, err := discovery.Discover(n.NVML())
	if err != nil {
		t.Fatal(err)
	}
	return n, inv
}

// planAll advertises every whole GPU as "example.com/gpu" and every MIG
// device as "example.com/mig".
func planAll(inv *discovery.Inventory) *plan.Plan {
	gpus := plan.Resource{Name: "example.com/gpu"}
	migs := plan.Resource{Name: "example.com/mig"}
	for _, g := range inv.GPUs {
		if !g.MIGEnabled {
			gpus.Devices = append(gpus.Devices, plan.Device{ID: g.UUID, Kind: plan.DeviceGPU, GPUUUID: g.UUID, GPUIndex: g.Index, Index: fmt.Sprint(g.Index), Rule: "gpus"})
		}
		for _, m := range g.MIGDevices {
			migs.Devices = append(migs.Devices, plan.Device{ID: m.UUID, Kind: plan.DeviceMIG, GPUUUID: g.UUID, GPUIndex: g.Index, Index: fmt.Sprintf("%d:%d", g.Index, m.Index), Rule: "migs"})
		}
	}
	p := &plan.Plan{}
	for _, r := range []plan.Resource{gpus, migs} {
		if len(r.Devices) > 0 {
			p.Resources = append(p.Resources, r)
		}
	}
	return p
}

// wantNodes returns the device nodes a device of inv must get from a
// fake driver root: its GPU's and, for a MIG device, its capabilities'.
func wantNodes(t *testing.T, inv *discovery.Inventory, d plan.Device) []string {
	t.Helper()
	g, ok := inv.GPUByUUID(d.GPUUUID)
	if !ok {
		t.Fatalf("GPU %s not found", d.GPUUUID)
	}
	out := []string{fmt.Sprintf("/dev/nvidia%d", g.Minor)}
	if d.Kind == plan.DeviceMIG {
		m, _ := findMIG(g, d.ID)
		out = append(out,
			fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", fakenode.MIGCapMinor(g.Minor, m.GPUInstanceID, -1)),
			fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", fakenode.MIGCapMinor(g.Minor, m.GPUInstanceID, m.ComputeInstanceID)))
	}
	return out
}

// resolve loads dir with the CDI library's cache, fails on any spec
// error, and returns the container paths of the device nodes the
// qualified name resolves to.
func resolve(t *testing.T, cache *cdiapi.Cache, name string) []string {
	t.Helper()
	d := cache.GetDevice(name)
	if d == nil {
		t.Fatalf("CDI name %s does not resolve (have %v)", name, cache.ListDevices())
	}
	var out []string
	for _, n := range d.ContainerEdits.DeviceNodes {
		out = append(out, n.Path)
	}
	return out
}

func loadCache(t *testing.T, dir string) *cdiapi.Cache {
	t.Helper()
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("CDI cache errors: %v", errs)
	}
	return cache
}

func TestBuildFromFakeDriverRoot(t *testing.T) {
	for _, tt := range []struct {
		node    string
		byIndex bool
		kind    string
	}{
		{"h200-mig", false, "nvidia.com/gpu"},
		{"a100-80gb-mixed", true, "example.com/accel"},
		{"workstation", false, "nvidia.com/gpu"},
	} {
		t.Run(tt.node, func(t *testing.T) {
			n, inv := fakeInventory(t, tt.node)
			root := t.TempDir()
			if err := n.WriteDriverRoot(root); err != nil {
				t.Fatal(err)
			}
			p := planAll(inv)
			o := Options{Kind: tt.kind, ByIndex: tt.byIndex}
			spec, err := Build(o, Root{Dir: root}, inv, p)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			w := Writer{Dir: dir}
			if changed, err := w.Write(tt.kind, spec); err != nil || !changed {
				t.Fatalf("Write = %v, %v; want true, nil", changed, err)
			}
			cache := loadCache(t, dir)
			n0 := 0
			for _, r := range p.Resources {
				for _, d := range r.Devices {
					n0++
					name := tt.kind + "=" + o.DeviceName(d)
					if got, want := resolve(t, cache, name), wantNodes(t, inv, d); !slices.Equal(got, want) {
						t.Errorf("%s: device nodes %v, want %v", name, got, want)
					}
					if got := cache.GetDevice(name).Annotations[AnnotationResource]; got != r.Name {
						t.Errorf("%s: resource annotation %q, want %q", name, got, r.Name)
					}
				}
			}
			if got := len(cache.ListDevices()); got != n0 {
				t.Errorf("spec has %d devices, plan %d", got, n0)
			}
			common := cache.GetDevice(cache.ListDevices()[0]).GetSpec().ContainerEdits
			var mounts []string
			for _, m := range common.Mounts {
				mounts = append(mounts, m.ContainerPath)
				if !strings.HasPrefix(m.HostPath, root) {
					t.Errorf("mount %s: host path %s is not under the driver root", m.ContainerPath, m.HostPath)
				}
			}
			if want := "/usr/lib/x86_64-linux-gnu/libcuda.so." + inv.DriverVersion; !slices.Contains(mounts, want) {
				t.Errorf("common mounts %v lack %s", mounts, want)
			}
			if !slices.ContainsFunc(common.DeviceNodes, func(d *specs.DeviceNode) bool { return d.Path == "/dev/nvidiactl" }) {
				t.Errorf("common device nodes lack /dev/nvidiactl")
			}
		})
	}
}

func TestBuildFailsOnMissingDeviceNode(t *testing.T) {
	n, inv := fakeInventory(t, "h200-mig")
	root := t.TempDir()
	if err := n.WriteDriverRoot(root); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "dev/nvidia1")); err != nil {
		t.Fatal(err)
	}
	_, err := Build(Options{Kind: "nvidia.com/gpu"}, Root{Dir: root}, inv, planAll(inv))
	if err == nil || !strings.Contains(err.Error(), "dev/nvidia1 is missing") {
		t.Fatalf("Build = %v, want an error naming the missing dev/nvidia1", err)
	}
}

func TestBuildEmptyAndBadKind(t *testing.T) {
	_, inv := fakeInventory(t, "workstation")
	if s, err := Build(Options{Kind: "nvidia.com/gpu"}, Root{Dir: "unused"}, inv, &plan.Plan{}); s != nil || err != nil {
		t.Errorf("empty plan: Build = %v, %v; want nil, nil", s, err)
	}
	if _, err := Build(Options{Kind: "nvidia.com"}, Root{Dir: "unused"}, inv, planAll(inv)); err == nil {
		t.Error("kind without class: Build succeeded")
	}
}

func TestFileName(t *testing.T) {
	if got, want := FileName("nvidia.com/gpu"), "featureplug-nvidia.com_gpu.yaml"; got != want {
		t.Errorf("FileName = %q, want %q", got, want)
	}
}

// TestBuildDeviceEdits: the edits Options.DeviceEdits gives a device go
// into that device's entry only, on top of its device nodes, and the CDI
// cache resolves the device's name to all of them; the common edits and
// the other resource's devices are untouched.
func TestBuildDeviceEdits(t *testing.T) {
	n, inv := fakeInventory(t, "a100-80gb-mixed")
	root := t.TempDir()
	if err := n.WriteDriverRoot(root); err != nil {
		t.Fatal(err)
	}
	p := planAll(inv)
	if len(p.Resources) != 2 {
		t.Fatalf("plan has %d resources, want whole GPUs and MIG devices", len(p.Resources))
	}
	var asked []string
	o := Options{Kind: "nvidia.com/gpu", DeviceEdits: func(r *plan.Resource, d plan.Device) plan.ContainerEdits {
		asked = append(asked, d.ID)
		if r.Name != "example.com/gpu" {
			return plan.ContainerEdits{}
		}
		return plan.ContainerEdits{
			Env: map[string]string{"B_VAR": "2", "A_VAR": d.ID},
			Mounts: []plan.Mount{
				{ContainerPath: "/run/pipe", HostPath: "/host/pipe"},
				{ContainerPath: "/dev/shm", HostPath: "/host/shm", ReadOnly: true},
			},
		}
	}}
	spec, err := Build(o, Root{Dir: root}, inv, p)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Build(Options{Kind: o.Kind}, Root{Dir: root}, inv, p)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := (Writer{Dir: dir}).Write(o.Kind, spec); err != nil {
		t.Fatal(err)
	}
	cache := loadCache(t, dir)
	if got, want := len(asked), len(p.Resources[0].Devices)+len(p.Resources[1].Devices); got != want {
		t.Errorf("DeviceEdits asked about %d devices, want %d", got, want)
	}
	for _, r := range p.Resources {
		for _, d := range r.Devices {
			name := o.Kind + "=" + o.DeviceName(d)
			if got, want := resolve(t, cache, name), wantNodes(t, inv, d); !slices.Equal(got, want) {
				t.Errorf("%s: device nodes %v, want %v", name, got, want)
			}
			edits := cache.GetDevice(name).ContainerEdits
			var mounts []string
			for _, m := range edits.Mounts {
				mounts = append(mounts, m.HostPath+":"+m.ContainerPath+":"+strings.Join(m.Options, ","))
			}
			var wantEnv, wantMounts []string
			if r.Name == "example.com/gpu" {
				wantEnv = []string{"A_VAR=" + d.ID, "B_VAR=2"}
				wantMounts = []string{"/host/pipe:/run/pipe:rbind,rw", "/host/shm:/dev/shm:rbind,ro"}
			}
			if !slices.Equal(edits.Env, wantEnv) || !slices.Equal(mounts, wantMounts) {
				t.Errorf("%s: env %v mounts %v, want env %v mounts %v", name, edits.Env, mounts, wantEnv, wantMounts)
			}
		}
	}
	common := cache.GetDevice(cache.ListDevices()[0]).GetSpec().ContainerEdits
	if len(common.Env) != len(plain.ContainerEdits.Env) || len(common.Mounts) != len(plain.ContainerEdits.Mounts) {
		t.Errorf("common edits changed: %d env %d mounts, want %d and %d", len(common.Env), len(common.Mounts),
			len(plain.ContainerEdits.Env), len(plain.ContainerEdits.Mounts))
	}
	for i := range plain.Devices {
		if d := plain.Devices[i]; len(d.ContainerEdits.Env) != 0 || len(d.ContainerEdits.Mounts) != 0 {
			t.Errorf("without DeviceEdits, %s has env %v mounts %v", d.Name, d.ContainerEdits.Env, d.ContainerEdits.Mounts)
		}
	}
}
