package labeler

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// checkGolden compares labels with testdata/golden/<name>.labels, or
// rewrites that file with -update.
func checkGolden(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	var got bytes.Buffer
	if err := WriteLabels(&got, labels); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "golden", name+".labels")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./labeler -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("labels differ from %s (run with -update after checking the change)\n--- got\n%s--- want\n%s", path, got.Bytes(), want)
	}
}

// TestGoldenLabels pins the labels of hand-built nodes. The files under
// testdata/golden were checked by hand against gpu-feature-discovery's
// names and formats (see README.md).
func TestGoldenLabels(t *testing.T) {
	tests := []struct {
		name string
		inv  *discovery.Inventory
		plan func(*discovery.Inventory) *plan.Plan
		opts LabelOptions
	}{
		{name: "a100-mixed-mig-norules", inv: a100MixedMIG()},
		{name: "a100-mixed-mig", inv: a100MixedMIG(), plan: mixedPlan},
		{name: "a100-single", inv: a100AllMIG(), plan: singlePlan},
		{name: "h100", inv: h100(), plan: mixedPlan, opts: LabelOptions{Machine: "DGX H100"}},
		{name: "h100-time-slicing", inv: h100(), plan: func(inv *discovery.Inventory) *plan.Plan {
			return sharedPlan(inv, plan.SharingTimeSlicing, 4)
		}},
		{name: "h100-mps", inv: h100(), plan: func(inv *discovery.Inventory) *plan.Plan {
			return sharedPlan(inv, plan.SharingMPS, 2)
		}, opts: LabelOptions{OmitDeprecated: true, Timestamp: time.Unix(1700000000, 0)}},
		{name: "heterogeneous", inv: heterogeneous(), plan: perModelPlan},
		{name: "heterogeneous-norules", inv: heterogeneous()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var plan *plan.Plan
			if tt.plan != nil {
				plan = tt.plan(tt.inv)
			}
			checkGolden(t, tt.name, Labels(tt.inv, plan, tt.opts))
		})
	}
}
