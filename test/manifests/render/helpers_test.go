package render

import (
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/featureplug/featureplug/test/manifests"
)

// Names the manifests use; the tests fail when the manifests drift from them.
const (
	namespace      = "featureplug"
	name           = "featureplug"
	rulesConfigMap = "featureplug-rules"
	policyName     = "featureplug-own-nodefeature"
)

// gpuNodeTerms are the required node affinity terms (ORed) that select
// nodes with an NVIDIA PCI device by NFD's labels: by vendor (GPU Operator's
// NFD configuration) or by class and vendor (NFD's default; 3D and VGA
// controllers), or, as NVIDIA's chart accepts it, nvidia.com/gpu.present.
var gpuNodeTerms = []string{
	"feature.node.kubernetes.io/pci-10de.present In true",
	"feature.node.kubernetes.io/pci-0302_10de.present In true",
	"feature.node.kubernetes.io/pci-0300_10de.present In true",
	"nvidia.com/gpu.present In true",
}

// manifestsDir returns the manifests directory or fails the test.
func manifestsDir(t *testing.T) string {
	t.Helper()
	dir, err := manifests.Dir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// kustomize builds manifests/<rel> or fails the test.
func kustomize(t *testing.T, rel string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := Kustomize(filepath.Join(manifestsDir(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// composed builds our overlay plus components, as a user's kustomization.
func composed(t *testing.T, overlay string, components ...string) []*unstructured.Unstructured {
	t.Helper()
	dir := manifestsDir(t)
	var comps []string
	for _, c := range components {
		comps = append(comps, filepath.Join(dir, c))
	}
	objs, err := KustomizeComposed(t.TempDir(), []string{filepath.Join(dir, overlay)}, comps)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// helm renders the chart as release featureplug in namespace featureplug.
func helm(t *testing.T, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, err := Helm(filepath.Join(manifestsDir(t), "helm", "featureplug"), name, namespace, values)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// find returns the object with the given kind and name, or fails the test.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, objName string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == objName {
			return o
		}
	}
	t.Fatalf("no %s %s among %d objects", kind, objName, len(objs))
	return nil
}

// has reports whether an object with the given kind and name is present.
func has(objs []*unstructured.Unstructured, kind, objName string) bool {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == objName {
			return true
		}
	}
	return false
}

// daemonSet converts the agent's DaemonSet into its typed form.
func daemonSet(t *testing.T, objs []*unstructured.Unstructured) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(
		find(t, objs, "DaemonSet", name).Object, &ds, true); err != nil {
		t.Fatalf("DaemonSet %s: %v", name, err)
	}
	return &ds
}

// agent returns the agent's container.
func agent(t *testing.T, ds *appsv1.DaemonSet) *corev1.Container {
	t.Helper()
	for i := range ds.Spec.Template.Spec.Containers {
		if c := &ds.Spec.Template.Spec.Containers[i]; c.Name == "featureplug" {
			return c
		}
	}
	t.Fatalf("DaemonSet %s has no container named featureplug", ds.Name)
	return nil
}

// flagValue returns the value of --name=value in args and whether it is there.
func flagValue(args []string, flag string) (string, bool) {
	prefix := "--" + flag + "="
	for _, a := range args {
		if len(a) >= len(prefix) && a[:len(prefix)] == prefix {
			return a[len(prefix):], true
		}
	}
	return "", false
}

// volume returns the pod volume with the given name, or nil.
func volume(ds *appsv1.DaemonSet, volName string) *corev1.Volume {
	for i := range ds.Spec.Template.Spec.Volumes {
		if v := &ds.Spec.Template.Spec.Volumes[i]; v.Name == volName {
			return v
		}
	}
	return nil
}

// mountAt returns the container's volume mount at path, or nil.
func mountAt(c *corev1.Container, path string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if m := &c.VolumeMounts[i]; m.MountPath == path {
			return m
		}
	}
	return nil
}

// withoutNamespace drops Namespace objects (Helm leaves the release
// namespace to `helm install --create-namespace`).
func withoutNamespace(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() != "Namespace" {
			out = append(out, o)
		}
	}
	return out
}

// helmOnlyLabels are the labels Helm's conventions add that the kustomize
// manifests do not carry.
var helmOnlyLabels = []string{"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by"}

// withoutHelmLabels drops helmOnlyLabels from every object's labels and,
// for a DaemonSet, from its selector and pod template.
func withoutHelmLabels(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		o = o.DeepCopy()
		for _, path := range [][]string{
			{"metadata", "labels"}, {"spec", "selector", "matchLabels"}, {"spec", "template", "metadata", "labels"},
		} {
			m, found, _ := unstructured.NestedStringMap(o.Object, path...)
			if !found || (len(path) > 2 && o.GetKind() != "DaemonSet") {
				continue
			}
			for _, l := range helmOnlyLabels {
				delete(m, l)
			}
			_ = unstructured.SetNestedStringMap(o.Object, m, path...)
		}
		out[i] = o
	}
	return out
}
