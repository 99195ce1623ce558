package rules

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/featureplug/featureplug/discovery"
)

// FuzzParse feeds the loader arbitrary files, seeded with the builtin files
// and the fixtures. Parse must never panic; every error it returns must be
// an *Error naming the file; a file that loads must plan any node without
// panicking.
func FuzzParse(f *testing.F) {
	for _, name := range BuiltinNames() {
		data, err := builtinFS.ReadFile("builtin/" + name + ".yaml")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	fixtures, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range fixtures {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	nodes := []func() *discovery.Inventory{a100Node, modelNode}
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := Parse("fuzz.yaml", data)
		if err != nil {
			if rs != nil {
				t.Fatalf("Parse returned rules and an error: %v", err)
			}
			for _, e := range splitErrors(err) {
				var pe *Error
				if !errors.As(e, &pe) || pe.Source != "fuzz.yaml" || pe.Msg == "" {
					t.Fatalf("error %q (%T) is not an *Error naming fuzz.yaml", e, e)
				}
			}
			return
		}
		for _, node := range nodes {
			p, err := rs.Plan(node(), map[string]string{"pool": "inference"})
			if err == nil && len(p.Decisions) != node().MIGDeviceCount()+len(node().GPUs) {
				t.Fatalf("plan decides %d devices", len(p.Decisions))
			}
		}
	})
}
