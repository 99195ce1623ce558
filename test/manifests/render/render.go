// Package render renders featureplug's kustomize overlays and components
// and its Helm chart into objects, in process (no kustomize or helm binary
// needed). End-to-end tests use it to apply exactly what admins apply.
//
// A binary that links this package cannot also link go-nvml:
// kustomize's plugin loader imports Go's plugin package, which makes the
// linker bind every symbol at load time (BIND_NOW), while go-nvml relies on
// lazy binding for the NVML symbols that libnvidia-ml.so.1 provides at run
// time. Keep tests that use this package and tests that use the discovery
// packages in different packages.
package render

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/featureplug/featureplug/test/manifests"
)

// KubeVersion is the Kubernetes version the chart is rendered for.
const KubeVersion = "v1.37.2"

// Kustomize builds the kustomization in dir, as `kustomize build dir` does,
// and returns its objects in output order.
func Kustomize(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return manifests.Decode("kustomize build "+dir, out)
}

// KustomizeComposed builds a kustomization that has resources and
// components (directories) and nothing else, as a user's overlay
// that adds components to one of ours would. tmp is a scratch directory.
func KustomizeComposed(tmp string, resources, components []string) ([]*unstructured.Unstructured, error) {
	// kustomize accepts only relative directories.
	rel := func(dirs []string) ([]string, error) {
		out := make([]string, len(dirs))
		for i, d := range dirs {
			r, err := filepath.Rel(tmp, d)
			if err != nil {
				return nil, fmt.Errorf("composing a kustomization: %w", err)
			}
			out[i] = filepath.ToSlash(r)
		}
		return out, nil
	}
	res, err := rel(resources)
	if err != nil {
		return nil, err
	}
	comps, err := rel(components)
	if err != nil {
		return nil, err
	}
	k := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  res,
	}
	if len(comps) > 0 {
		k["components"] = comps
	}
	data, err := yaml.Marshal(k)
	if err != nil {
		return nil, fmt.Errorf("composing a kustomization: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), data, 0o644); err != nil {
		return nil, fmt.Errorf("composing a kustomization: %w", err)
	}
	return Kustomize(tmp)
}

// Helm renders the chart in chartDir, as `helm template release chartDir
// -n namespace` does, with values merged over the chart's values.yaml (and
// checked against its values.schema.json). NOTES.txt and templates that
// render to nothing are left out.
func Helm(chartDir, release, namespace string, values map[string]any) ([]*unstructured.Unstructured, error) {
	rendered, err := renderChart(chartDir, release, namespace, values)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(rendered))
	for name := range rendered {
		names = append(names, name)
	}
	sort.Strings(names)
	var objs []*unstructured.Unstructured
	for _, name := range names {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		o, err := manifests.Decode(name, []byte(rendered[name]))
		if err != nil {
			return nil, err
		}
		objs = append(objs, o...)
	}
	return objs, nil
}

// HelmNotes renders the chart's NOTES.txt as helm install prints it.
func HelmNotes(chartDir, release, namespace string, values map[string]any) (string, error) {
	rendered, err := renderChart(chartDir, release, namespace, values)
	if err != nil {
		return "", err
	}
	for name, text := range rendered {
		if strings.HasSuffix(name, "/NOTES.txt") {
			return text, nil
		}
	}
	return "", fmt.Errorf("chart %s has no NOTES.txt", chartDir)
}

// renderChart renders every template of the chart, by file name.
func renderChart(chartDir, release, namespace string, values map[string]any) (map[string]string, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", chartDir, err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = chartutil.KubeVersion{Version: KubeVersion, Major: "1", Minor: "37"}
	if values == nil {
		values = map[string]any{}
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{
		Name: release, Namespace: namespace, Revision: 1, IsInstall: true,
	}, caps)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", chartDir, err)
	}
	rendered, err := engine.Render(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("rendering chart %s: %w", chartDir, err)
	}
	return rendered, nil
}
