package realgpu

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// migReport is the part of migcheck's report (test/realgpu/mig.sh) these
// tests read.
type migReport struct {
	GPUs []struct {
		Index          int    `json:"index"`
		Product        string `json:"product"`
		Skipped        string `json:"skipped"`
		CatalogDiffers string `json:"catalogDiffers"`
		Placements     []struct {
			Profile    string `json:"profile"`
			Discovered bool   `json:"discovered"`
			Placement  struct {
				Start int `json:"start"`
			} `json:"placement"`
		} `json:"placements"`
		Probes []struct {
			What string `json:"what"`
			Got  string `json:"got"`
		} `json:"probes"`
		Failures []string `json:"failures"`
	} `json:"gpus"`
}

// fakeAnswers are what the fake node answers to migcheck's probes
// (test/realgpu/migcheck's TestCheckOnFakeNode), which a real GPU must
// answer too for the fake's tests to mean what they say.
var fakeAnswers = map[string]nvml.Return{
	"a 2g instance over a 3g's placement":                   nvml.ERROR_INSUFFICIENT_RESOURCES,
	"a 3g instance at memory slice 2":                       nvml.ERROR_INVALID_ARGUMENT,
	"a second +me instance":                                 nvml.ERROR_INSUFFICIENT_RESOURCES,
	"destroying a GPU instance before its compute instance": nvml.ERROR_IN_USE,
}

// TestMIGCheckReport reads what mig.sh recorded on a real GPU and checks
// it against the fake node: the geometry NVML lists is the catalog's,
// every placement was created, discovered at its placement and destroyed,
// and NVML refuses what the fake refuses with the same errors.
func TestMIGCheckReport(t *testing.T) {
	path := filepath.Join(outputsDir(), "mig.json")
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		t.Skipf("no dynamic MIG report (%s is missing): run `bash test/realgpu/mig.sh` from the repository root on a machine with a MIG-capable GPU, then run this test again", path)
	}
	if err != nil {
		t.Fatal(err)
	}
	var rep migReport
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	checked := 0
	for _, g := range rep.GPUs {
		if g.Skipped != "" {
			t.Logf("GPU %d (%s) skipped: %s", g.Index, g.Product, g.Skipped)
			continue
		}
		checked++
		for _, f := range g.Failures {
			t.Errorf("GPU %d: %s", g.Index, f)
		}
		if _, ok := productKey(g.Product); ok && g.CatalogDiffers != "" {
			t.Errorf("GPU %d (%s): %s", g.Index, g.Product, g.CatalogDiffers)
		}
		for _, p := range g.Placements {
			if !p.Discovered {
				t.Errorf("GPU %d: %s at %d was not discovered at its placement", g.Index, p.Profile, p.Placement.Start)
			}
		}
		for _, p := range g.Probes {
			if want, ok := fakeAnswers[p.What]; ok && p.Got != want.Error() {
				t.Errorf("GPU %d: %s: NVML answers %s, the fake node %s", g.Index, p.What, p.Got, want.Error())
			}
		}
	}
	if checked == 0 {
		t.Skipf("%s checked no GPU", path)
	}
}
