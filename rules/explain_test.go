package rules

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
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
