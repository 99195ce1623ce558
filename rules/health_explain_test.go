package rules

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestHealthView compares the effective health policy of a node whose pool
// has an entry with testdata/health-view.txt (go test -update rewrites it),
// and checks the view of a node no entry selects.
func TestHealthView(t *testing.T) {
	rs, err := Parse("r.yaml", []byte(healthFile+`- name: inference
  nodeSelector: {matchLabels: {pool: inference}}
  xids: {94: until-quiet, 13: none}
  resolutions: {RESTART_VM: until-quiet}
  events: {ecc-volatile-double-bit: none}
  quietPeriod: 10m
  quietPeriods: {nvlink-errors: 1h}
  fenceOnNVMLFailure: false
`))
	if err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, rs, h100Node(), map[string]string{"pool": "inference"})
	var b bytes.Buffer
	if err := WriteHealthView(&b, p); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "health-view.txt")
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("health view differs from %s:\n%s", golden, b.String())
	}

	v := NewHealthView(mustPlan(t, rs, h100Node(), nil))
	if v.Source != "defaults: no health entry selects this node" || v.QuietPeriod != "5m0s" || !v.FenceOnNVMLFailure || len(v.XIDs) != 0 {
		t.Errorf("default view = %+v", v)
	}
	for _, r := range v.Resolutions {
		if r.From != "catalog" && r.Resolution != "" {
			t.Errorf("default view: %s from %s", r.Resolution, r.From)
		}
	}
}
