package cdi

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"
)

func testSpec(kind, dev string) *specs.Spec {
	return &specs.Spec{Version: "0.5.0", Kind: kind, Devices: []specs.Device{{
		Name:           dev,
		ContainerEdits: specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{{Path: "/dev/nvidia0"}}},
	}}}
}

func TestWriterWritesOnlyChanges(t *testing.T) {
	w := Writer{Dir: filepath.Join(t.TempDir(), "cdi")} // created on demand
	kind := "nvidia.com/gpu"
	for i, tt := range []struct {
		spec *specs.Spec
		want bool
	}{
		{testSpec(kind, "a"), true},
		{testSpec(kind, "a"), false},
		{testSpec(kind, "b"), true},
		{nil, true},
		{nil, false},
	} {
		changed, err := w.Write(kind, tt.spec)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if changed != tt.want {
			t.Errorf("step %d: changed = %v, want %v", i, changed, tt.want)
		}
		_, err = os.Stat(w.Path(kind))
		if exists := err == nil; exists != (tt.spec != nil) {
			t.Errorf("step %d: spec file exists = %v", i, exists)
		}
	}
	entries, _ := os.ReadDir(w.Dir)
	if len(entries) != 0 {
		t.Errorf("directory holds %v after the spec was removed; want nothing (no temporary files)", entries)
	}
}

func TestWriterRefusesInvalidSpec(t *testing.T) {
	w := Writer{Dir: t.TempDir()}
	kind := "nvidia.com/gpu"
	if _, err := w.Write(kind, testSpec(kind, "good")); err != nil {
		t.Fatal(err)
	}
	bad := testSpec(kind, "bad name!")
	if _, err := w.Write(kind, bad); err == nil {
		t.Fatal("an invalid spec was written")
	}
	if _, err := loadCache(t, w.Dir).GetDevice(kind+"=good"), error(nil); err != nil || loadCache(t, w.Dir).GetDevice(kind+"=good") == nil {
		t.Error("the last good spec was lost")
	}
	entries, _ := os.ReadDir(w.Dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d files, want the one spec", len(entries))
	}
}

func TestWriterRemoveStale(t *testing.T) {
	dir := t.TempDir()
	w := Writer{Dir: dir}
	for _, f := range []string{
		"featureplug-nvidia.com_gpu.yaml",       // kept: current kind
		"featureplug-example.com_accel.yaml",    // stale: older kind
		"featureplug-old.json",                  // stale
		".featureplug-123.tmp",                  // stale: crash leftover
		"nvidia.yaml",                           // foreign: nvidia-ctk's
		"featureplugged.yaml",                   // foreign
		"k8s-device-plugin-nvidia.com_gpu.yaml", // foreign
	} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := w.RemoveStale("nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{".featureplug-123.tmp", "featureplug-example.com_accel.yaml", "featureplug-old.json"}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{"featureplug-nvidia.com_gpu.yaml", "featureplugged.yaml", "k8s-device-plugin-nvidia.com_gpu.yaml", "nvidia.yaml"}; !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
	if removed, err := (Writer{Dir: filepath.Join(dir, "missing")}).RemoveStale(); err != nil || removed != nil {
		t.Errorf("missing directory: RemoveStale = %v, %v", removed, err)
	}
}
