package agent

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// constructionFile is the one file of the loop's package that knows the
// concrete sinks and GPU sources.
const constructionFile = "sinks.go"

// concretePackages are what only the construction file may import: the
// packages of the sinks and of the GPU sources.
var concretePackages = []string{
	"github.com/featureplug/featureplug/labeler",
	"github.com/featureplug/featureplug/plugin/",
	"github.com/featureplug/featureplug/discovery/gpusource",
}

// TestLoopKnowsNoConcreteSink: the loop sees its sinks only through the
// Sink contract (sink.go); only the construction file imports the
// packages of the concrete sinks.
func TestLoopKnowsNoConcreteSink(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || name == constructionFile {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, c := range concretePackages {
				if path == strings.TrimSuffix(c, "/") || strings.HasPrefix(path, c) {
					t.Errorf("%s imports %s: only %s may know the concrete sinks", name, path, constructionFile)
				}
			}
		}
	}
}
