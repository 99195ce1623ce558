package plan_test

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines bounds a function of the product (tests and generated code
// aside): one that does more should be split into what it does.
const maxFuncLines = 100

// longFuncs are the functions allowed past maxFuncLines, with why: tables
// of data, whose length is their rows.
var longFuncs = map[string]string{
	"cmd/featureplug-bench/report.go figureDefs": "the table of the bench's figures",
	"rules/draclass/draclass.go Compile":         "to be split with the expression tree that replaces its string building",
}

// TestNoFunctionOverMaxLines walks the product module and fails for every
// function longer than maxFuncLines, naming it.
func TestNoFunctionOverMaxLines(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	stillLong := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "test" && filepath.Dir(path) == root || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir // the end-to-end module, hidden directories
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || generated(t, path) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			rel, _ := filepath.Rel(root, path)
			if key := filepath.ToSlash(rel) + " " + fn.Name.Name; longFuncs[key] != "" {
				stillLong[key] = lines > maxFuncLines
				continue
			}
			if lines > maxFuncLines {
				t.Errorf("%s: %s is %d lines long, more than %d", fset.Position(fn.Pos()), fn.Name.Name, lines, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for key := range longFuncs {
		if !stillLong[key] {
			t.Errorf("%s is allowed past %d lines but is not (or is gone): remove it from longFuncs", key, maxFuncLines)
		}
	}
}

// generated reports whether the Go file at path says it is generated
// ("// Code generated ... DO NOT EDIT." before the package clause).
func generated(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "package ") {
			return false
		}
		if strings.HasPrefix(line, "// Code generated ") && strings.HasSuffix(line, " DO NOT EDIT.") {
			return true
		}
	}
	return false
}
