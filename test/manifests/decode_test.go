package manifests

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"
)

// manifestsDir returns the manifests directory or fails the test.
func manifestsDir(t *testing.T) string {
	t.Helper()
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestEveryManifestDecodes decodes every YAML file under manifests/ (but the
// Helm chart, whose templates are not YAML until rendered) and checks that
// each document is an object of a kind expected in its directory.
func TestEveryManifestDecodes(t *testing.T) {
	dir := manifestsDir(t)
	kinds := map[string]sets.Set[string]{
		"base": sets.New("Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole",
			"ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
			"DaemonSet", "Kustomization", "ResourceRules"),
		"overlays":   sets.New("Kustomization"),
		"components": sets.New("Component"),
		"examples":   sets.New("ResourceRules", "NodeFeatureRule", "ResourceClaimTemplate", "DeviceClass"),
	}
	seen := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		top, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
		if d.IsDir() {
			if top == "helm" {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := filepath.Ext(path); ext != ".yaml" && ext != ".yml" {
			return nil
		}
		allowed, ok := kinds[top]
		if !ok {
			t.Errorf("%s: a manifest outside base, overlays, components, examples and helm", rel)
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		objs, err := Decode(rel, data)
		if err != nil {
			t.Error(err)
			return nil
		}
		if len(objs) == 0 {
			t.Errorf("%s: no objects", rel)
		}
		for _, o := range objs {
			seen++
			if !allowed.Has(o.GetKind()) {
				t.Errorf("%s: kind %s, want one of %v", rel, o.GetKind(), sets.List(allowed))
			}
			if o.GetKind() != "Kustomization" && o.GetKind() != "Component" && o.GetKind() != "ResourceRules" && o.GetName() == "" {
				t.Errorf("%s: %s without metadata.name", rel, o.GetKind())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 10 {
		t.Errorf("decoded only %d objects under %s; is the directory complete?", seen, dir)
	}
}

// TestRulesFileCopies checks that the rules the base and the chart ship are
// the same file, and the builtin "mixed" rules when the rules package has it.
func TestRulesFileCopies(t *testing.T) {
	dir := manifestsDir(t)
	read := func(rel string) []byte {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	base := read("base/rules.yaml")
	if chart := read("helm/featureplug/files/rules.yaml"); !bytes.Equal(base, chart) {
		t.Errorf("manifests/base/rules.yaml and manifests/helm/featureplug/files/rules.yaml differ")
	}
	builtin, err := os.ReadFile(filepath.Join(dir, "..", "rules", "builtin", "mixed.yaml"))
	if err != nil {
		t.Skipf("no builtin mixed rules to compare with: %v", err)
	}
	if !bytes.Equal(base, builtin) {
		t.Errorf("manifests/base/rules.yaml differs from rules/builtin/mixed.yaml")
	}
}

// TestDecode checks document splitting and the errors for bad documents.
func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		wantKinds  []string
		wantErr    string
	}{
		{name: "two documents and empty ones", data: "---\napiVersion: v1\nkind: A\n---\n# only a comment\n---\napiVersion: v1\nkind: B\n",
			wantKinds: []string{"A", "B"}},
		{name: "no kind", data: "apiVersion: v1\nkind: A\n---\napiVersion: v1\nmetadata: {name: x}\n",
			wantErr: `src: document 1: apiVersion and kind are required (have apiVersion "v1", kind "")`},
		{name: "not YAML", data: "apiVersion: v1\nkind: [\n", wantErr: "src: document 0:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Decode("src", []byte(tc.data))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.GetKind())
			}
			if strings.Join(kinds, ",") != strings.Join(tc.wantKinds, ",") {
				t.Errorf("kinds %v, want %v", kinds, tc.wantKinds)
			}
		})
	}
}

// TestDiff checks that Diff reports missing, unexpected and changed objects
// with the path of the change, and treats equal numbers of different Go
// types as equal.
func TestDiff(t *testing.T) {
	decode := func(s string) []*unstructured.Unstructured {
		t.Helper()
		objs, err := Decode("test", []byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
	base := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: ns}\ndata: {k: v}\n---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: d, namespace: ns}\nspec: {x: [1, 2]}\n"
	for _, tc := range []struct {
		name string
		got  string
		want []string
	}{
		{name: "equal", got: base},
		{name: "missing and unexpected", got: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: ns}\ndata: {k: v}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: ns}\n",
			want: []string{"DaemonSet.apps ns/d: missing", "Secret ns/s: unexpected"}},
		{name: "changed field and list", got: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: ns}\ndata: {k: w, extra: e}\n---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: d, namespace: ns}\nspec: {x: [1, 3]}\n",
			want: []string{"ConfigMap ns/a: .data.extra: unexpected e", "ConfigMap ns/a: .data.k: want v, got w", "DaemonSet.apps ns/d: .spec.x[1]: want 2, got 3"}},
		{name: "numbers compare by value", got: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: ns}\ndata: {k: v}\n---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: d, namespace: ns}\nspec: {x: [1.0, 2]}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Diff(decode(base), decode(tc.got))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
	if _, err := Diff(decode(base+"---\n"+base), decode(base)); err == nil {
		t.Errorf("duplicate objects were not reported")
	}
}
