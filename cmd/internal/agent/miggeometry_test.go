package agent

import (
	"os"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery/gpusource"
)

// TestNVIDIANamesReadMIGPlacements: rules with dra.compatibility: nvidia
// need the MIG placements NVIDIA's device names hold, which Discover does
// not read: the agent reads them (ReadMIGGeometry) for such rules, so the
// slice names MIG devices gpu-<minor>-mig-<profile>-<id>-<start> from the
// first plan on.
func TestNVIDIANamesReadMIGPlacements(t *testing.T) {
	e := newDRATestEnv(t)
	src, err := gpusource.OpenFake("a100-80gb-mixed")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	e.src = src
	if err := os.WriteFile(e.rules, []byte(`apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
dra:
  compatibility: nvidia
rules:
- name: mig
  devices: mig
  resource: example.com/mig
  serve: dra
- name: gpu
  devices: gpu
  resource: example.com/gpu
  serve: dra
`), 0o644); err != nil {
		t.Fatal(err)
	}
	records := make(kubeRecords, 4096)
	_, stop := e.start(t, records)
	defer stop()
	kubeWaitRecord(t, records, "ResourceSlice created", "devices=5")
	var names []string
	for _, d := range e.slice(t).Spec.Devices {
		names = append(names, d.Name)
	}
	got := strings.Join(names, " ")
	for _, want := range []string{"gpu-1", "gpu-0-mig-3g40gb-", "gpu-0-mig-1g10gb-"} {
		if !strings.Contains(got, want) {
			t.Errorf("slice devices %s: none named %s...", got, want)
		}
	}
}
