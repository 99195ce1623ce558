package rules

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/rules/plan"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestWriteExplanation compares the explanation of the per-model rules on a
// mixed node with testdata/explain-per-model.txt (go test -update rewrites it).
func TestWriteExplanation(t *testing.T) {
	inv := modelNode()
	inv.GPUs = append(inv.GPUs, withMIG(testGPU(4, "NVIDIA A100-SXM4-80GB"), "3g.40gb", "1g.10gb+me"))
	rs, err := Load("per-model")
	if err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, rs, inv, nil)
	var b bytes.Buffer
	if err := WriteExplanation(&b, p); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "explain-per-model.txt")
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
		t.Errorf("explanation differs from %s:\n%s", golden, b.String())
	}
}

// TestWriteExplanationDRA compares the explanation with a DRA view (as
// `featureplug rules explain` makes it) with
// testdata/explain-per-model-dra.txt: per device the serve and the class,
// the SERVE column, and per resource its class, selector, fallback and
// node-selector note, or why it has none.
func TestWriteExplanationDRA(t *testing.T) {
	inv := modelNode()
	rs, err := Load("per-model")
	if err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, rs, inv, nil)
	p.Resources[0].Serve = plan.ServeDRA
	for i := range p.Decisions {
		if p.Decisions[i].Resource == p.Resources[0].Name {
			p.Decisions[i].Serve = plan.ServeDRA
		}
	}
	dra := map[string]DRAClass{
		"nvidia.com/a100-80gb": {Name: "a100-80gb.nvidia.com", Selector: `device.driver == "gpu.featureplug.io" && device.attributes["gpu.featureplug.io"].type == "gpu"`},
		"nvidia.com/h100.shared": {Name: "h100.shared.nvidia.com", Selector: `device.driver == "gpu.featureplug.io" && device.attributes["gpu.featureplug.io"].resource == "nvidia.com/h100.shared"`,
			Fallback: `rules[0] "h100-shared": nodeSelector: a DeviceClass cannot select nodes`, NodeSelectors: []string{"h100-shared: pool=a"}},
		"nvidia.com/a100-sxm4-40gb": {Missing: "every rule giving it says serve: device-plugin"},
	}
	var b bytes.Buffer
	if err := WriteExplanationWith(&b, p, ExplainOptions{DRA: dra}); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "explain-per-model-dra.txt")
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
		t.Errorf("explanation differs from %s:\n%s", golden, b.String())
	}
	// Without the DRA view the explanation is as before.
	var plain bytes.Buffer
	if err := WriteExplanation(&plain, p); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.String(), "serve") || strings.Contains(plain.String(), "DRA") {
		t.Errorf("explanation without a DRA view mentions it:\n%s", plain.String())
	}
}
