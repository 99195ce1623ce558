// Package manifests finds, decodes and compares featureplug's deployment
// manifests (manifests/ at the repository root). Its tests check that every
// manifest decodes and that the shipped rules files and the example
// NodeFeatureRule do what their comments say on the bundled fake nodes;
// package render renders the kustomize overlays and the Helm chart and
// checks their contracts.
package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Dir returns the repository's manifests directory, found by walking up
// from the working directory (a test's working directory is its package's).
func Dir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the manifests directory: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		candidate := filepath.Join(d, "manifests", "base", "kustomization.yaml")
		if _, err := os.Stat(candidate); err == nil {
			return filepath.Join(d, "manifests"), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no manifests/base/kustomization.yaml above %s", wd)
		}
	}
}

// Decode splits a multi-document YAML stream into objects. Empty documents
// are skipped; a document without apiVersion or kind is an error naming
// source and the document's index.
func Decode(source string, data []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []*unstructured.Unstructured
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, i, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, i, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" {
			return nil, fmt.Errorf("%s: document %d: apiVersion and kind are required (have apiVersion %q, kind %q)",
				source, i, u.GetAPIVersion(), u.GetKind())
		}
		objs = append(objs, u)
	}
}

// Key identifies an object in a set: API group, kind, namespace and name.
type Key struct {
	Group, Kind, Namespace, Name string
}

// KeyOf returns the Key of an object.
func KeyOf(u *unstructured.Unstructured) Key {
	gvk := u.GroupVersionKind()
	return Key{Group: gvk.Group, Kind: gvk.Kind, Namespace: u.GetNamespace(), Name: u.GetName()}
}

// String formats a Key as kind.group namespace/name.
func (k Key) String() string {
	kind := k.Kind
	if k.Group != "" {
		kind += "." + k.Group
	}
	if k.Namespace == "" {
		return kind + " " + k.Name
	}
	return kind + " " + k.Namespace + "/" + k.Name
}

// Index maps objects by Key; a Key seen twice is an error.
func Index(objs []*unstructured.Unstructured) (map[Key]*unstructured.Unstructured, error) {
	m := make(map[Key]*unstructured.Unstructured, len(objs))
	for _, o := range objs {
		k := KeyOf(o)
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("%s appears twice", k)
		}
		m[k] = o
	}
	return m, nil
}

// Diff compares two object sets by Key and content and returns one line per
// difference, sorted: an object only in want or only in got, or the first
// differing field path of an object in both. It returns nil when the sets
// are equal.
func Diff(want, got []*unstructured.Unstructured) ([]string, error) {
	w, err := Index(want)
	if err != nil {
		return nil, fmt.Errorf("want: %w", err)
	}
	g, err := Index(got)
	if err != nil {
		return nil, fmt.Errorf("got: %w", err)
	}
	var diffs []string
	for k, wo := range w {
		gotObj, ok := g[k]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("%s: missing", k))
			continue
		}
		for _, d := range diffValues("", wo.Object, gotObj.Object) {
			diffs = append(diffs, fmt.Sprintf("%s: %s", k, d))
		}
	}
	for k := range g {
		if _, ok := w[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: unexpected", k))
		}
	}
	sort.Strings(diffs)
	return diffs, nil
}

// diffValues returns the paths at which want and got differ, each with both
// values; lists are compared element by element.
func diffValues(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{mismatch(path, want, got)}
		}
		keys := make(map[string]bool, len(w)+len(g))
		for k := range w {
			keys[k] = true
		}
		for k := range g {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		var out []string
		for _, k := range sorted {
			wv, wok := w[k]
			gv, gok := g[k]
			switch {
			case !wok:
				out = append(out, fmt.Sprintf("%s.%s: unexpected %s", path, k, compact(gv)))
			case !gok:
				out = append(out, fmt.Sprintf("%s.%s: missing (want %s)", path, k, compact(wv)))
			default:
				out = append(out, diffValues(path+"."+k, wv, gv)...)
			}
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{mismatch(path, want, got)}
		}
		var out []string
		for i := range w {
			out = append(out, diffValues(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return out
	default:
		if !scalarEqual(want, got) {
			return []string{mismatch(path, want, got)}
		}
		return nil
	}
}

// scalarEqual compares decoded YAML scalars; numbers compare by value
// whatever their Go type.
func scalarEqual(a, b any) bool {
	if af, ok := number(a); ok {
		bf, ok := number(b)
		return ok && af == bf
	}
	return a == b
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, true
	case int:
		return float64(n), true
	}
	return 0, false
}

func mismatch(path string, want, got any) string {
	return fmt.Sprintf("%s: want %s, got %s", path, compact(want), compact(got))
}

func compact(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := strings.TrimSpace(string(b))
	if strings.Contains(s, "\n") {
		j, err := yaml.YAMLToJSON(b)
		if err == nil {
			return string(j)
		}
	}
	return s
}
