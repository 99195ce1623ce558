package fakenode_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/discovery/migplace"
)

// h100Profile returns the H100's profile of the given name.
func h100Profile(t *testing.T, name string) *migplace.Profile {
	t.Helper()
	geo := geometryOf(t, "H100-80GB-HBM3")
	for i := range geo.Profiles {
		if geo.Profiles[i].Name == name {
			return &geo.Profiles[i]
		}
	}
	t.Fatalf("H100 has no profile %s", name)
	return nil
}

// gpu0 initializes n's NVML and returns GPU 0.
func gpu0(t *testing.T, n *fakenode.Node) nvml.Device {
	t.Helper()
	lib := n.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	dev, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	return dev
}

// TestKeepMIGStateSurvivesANewProcess plays an agent killed after it
// created MIG devices: a node built again from the same file takes over
// the state file, so the MIG devices are there with their UUIDs, and one
// created afterwards gets a UUID of its own.
func TestKeepMIGStateSurvivesANewProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), fakenode.MIGStateFile)
	first := nodeWith(t, "H100-80GB-HBM3", "mig: []")
	if err := first.KeepMIGState(path); err != nil {
		t.Fatal(err)
	}
	dev := gpu0(t, first)
	p3g := h100Profile(t, "3g.40gb")
	if _, _, ret := createAt(t, dev, p3g, migplace.Placement{Start: 4, Size: 4}); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	p1g := h100Profile(t, "1g.10gb")
	info, _ := dev.GetGpuInstanceProfileInfo(p1g.Enum)
	pl := migplace.Placement{Start: 0, Size: 1}.NVML()
	if _, ret := dev.CreateGpuInstanceWithPlacement(&info, &pl); ret != nvml.SUCCESS { // no compute instance: a Prepare cut short
		t.Fatal(ret)
	}
	want, err := first.MIGInstances(0)
	if err != nil {
		t.Fatal(err)
	}

	second := nodeWith(t, "H100-80GB-HBM3", "mig: []")
	if got, _ := second.MIGInstances(0); len(got) != 0 {
		t.Fatalf("a node of the file holds %v before taking over the state", fakenode.LayoutString(got))
	}
	if err := second.KeepMIGState(path); err != nil {
		t.Fatal(err)
	}
	got, err := second.MIGInstances(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("after the restart: %v, want %v", fakenode.LayoutString(got), fakenode.LayoutString(want))
	}
	for i := range want {
		if got[i].String() != want[i].String() || len(got[i].MIGDevices) != len(want[i].MIGDevices) ||
			(len(want[i].MIGDevices) == 1 && got[i].MIGDevices[0] != want[i].MIGDevices[0]) {
			t.Errorf("instance %d: %s %v, want %s %v", i, got[i], got[i].MIGDevices, want[i], want[i].MIGDevices)
		}
	}

	// Destroyed and made again in the new process: a new UUID.
	dev2 := gpu0(t, second)
	gis, ret := dev2.GetGpuInstances(ptrTo(mustInfo(t, dev2, p3g.Enum)))
	if ret != nvml.SUCCESS || len(gis) != 1 {
		t.Fatalf("GetGpuInstances(3g.40gb) = %d, %v", len(gis), ret)
	}
	cis, _ := gis[0].GetComputeInstances(ptrTo(ciInfo(t, gis[0], p3g)))
	if len(cis) != 1 || cis[0].Destroy() != nvml.SUCCESS || gis[0].Destroy() != nvml.SUCCESS {
		t.Fatal("destroying the restored 3g.40gb")
	}
	if _, _, ret := createAt(t, dev2, p3g, migplace.Placement{Start: 4, Size: 4}); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	again, _ := second.MIGInstances(0)
	for _, m := range again {
		if m.Profile == "3g.40gb" && m.MIGDevices[0] == want[1].MIGDevices[0] {
			t.Errorf("the 3g.40gb made again has the UUID %s of the one destroyed", m.MIGDevices[0])
		}
	}
}

// TestKeepMIGStateIgnoresAnotherFile: a state file written for another
// node file (the machine was re-partitioned by editing it) is replaced.
func TestKeepMIGStateIgnoresAnotherFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	first := nodeWith(t, "H100-80GB-HBM3", "mig: []")
	if err := first.KeepMIGState(path); err != nil {
		t.Fatal(err)
	}
	if _, _, ret := createAt(t, gpu0(t, first), h100Profile(t, "7g.80gb"), migplace.Placement{Start: 0, Size: 8}); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	edited := nodeWith(t, "H100-80GB-HBM3", "mig: [{profile: 1g.10gb}]")
	if err := edited.KeepMIGState(path); err != nil {
		t.Fatal(err)
	}
	if got, _ := edited.MIGInstances(0); fakenode.LayoutString(got) != "1g.10gb {6}:1" && fakenode.LayoutString(got) != "1g.10gb {0}:1" {
		t.Errorf("edited node holds %s, want its own file's one 1g.10gb", fakenode.LayoutString(got))
	}
}

// TestKeepMIGStateRefusesAChangeItCannotKeep: when the state file cannot
// be written, the NVML call fails and changes nothing, as a driver call
// either happens or does not.
func TestKeepMIGStateRefusesAChangeItCannotKeep(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state", "mig.json")
	n := nodeWith(t, "H100-80GB-HBM3", "mig: []")
	if err := n.KeepMIGState(path); err != nil {
		t.Fatal(err)
	}
	// The state directory becomes a file: no write can succeed.
	if err := os.RemoveAll(filepath.Dir(path)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Dir(path), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dev := gpu0(t, n)
	p := h100Profile(t, "2g.20gb")
	if _, _, ret := createAt(t, dev, p, migplace.Placement{Start: 2, Size: 2}); ret != nvml.ERROR_UNKNOWN {
		t.Errorf("creating a GPU instance that cannot be kept: %v, want ERROR_UNKNOWN", ret)
	}
	if got, _ := n.MIGInstances(0); len(got) != 0 {
		t.Errorf("the node holds %s after a refused creation", fakenode.LayoutString(got))
	}
	if act, ret := dev.SetMigMode(nvml.DEVICE_MIG_DISABLE); ret != nvml.ERROR_UNKNOWN {
		t.Errorf("SetMigMode that cannot be kept: %v, %v; want ERROR_UNKNOWN", act, ret)
	}
	if cur, pending, _ := dev.GetMigMode(); cur != nvml.DEVICE_MIG_ENABLE || pending != nvml.DEVICE_MIG_ENABLE {
		t.Errorf("MIG mode %d (pending %d) after a refused change, want enabled", cur, pending)
	}
}

func ptrTo[T any](v T) *T { return &v }

func mustInfo(t *testing.T, dev nvml.Device, enum int) nvml.GpuInstanceProfileInfo {
	t.Helper()
	info, ret := dev.GetGpuInstanceProfileInfo(enum)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	return info
}

func ciInfo(t *testing.T, gi nvml.GpuInstance, p *migplace.Profile) nvml.ComputeInstanceProfileInfo {
	t.Helper()
	full, _ := p.FullComputeInstance()
	info, ret := gi.GetComputeInstanceProfileInfo(full, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	return info
}
