package render

import (
	"reflect"
	"slices"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// draClusterRules are the ClusterRole rules the DRA option adds, after the
// default ones: the node's ResourceSlice, the claims to prepare and their
// status.devices.
var draClusterRules = []map[string]any{
	{"apiGroups": []any{"resource.k8s.io"}, "resources": []any{"resourceslices"},
		"verbs": []any{"list", "watch", "create", "update", "delete"}},
	{"apiGroups": []any{"resource.k8s.io"}, "resources": []any{"resourceclaims"}, "verbs": []any{"get"}},
	{"apiGroups": []any{"resource.k8s.io"}, "resources": []any{"resourceclaims/status"}, "verbs": []any{"patch"}},
	{"apiGroups": []any{"resource.k8s.io"}, "resources": []any{"resourceclaims/driver"}, "resourceNames": []any{"gpu.featureplug.io"},
		"verbs": []any{"associated-node:patch"}},
}

// TestDRAAddsItsRBAC: components/dra and the chart's dra.enabled add
// exactly the resource.k8s.io rules of the DRA contract to the agent's
// ClusterRole, and nothing else to any role.
func TestDRAAddsItsRBAC(t *testing.T) {
	for label, tc := range map[string]struct {
		base, dra []*unstructured.Unstructured
		role      string
	}{
		"kustomize": {kustomize(t, "overlays/nodefeature"), composed(t, "overlays/nodefeature", "components/dra"), name},
		"helm":      {helm(t, nil), helm(t, map[string]any{"dra": map[string]any{"enabled": true}}), name},
	} {
		t.Run(label, func(t *testing.T) {
			rules := func(objs []*unstructured.Unstructured, kind string) []any {
				r, _, _ := unstructured.NestedSlice(find(t, objs, kind, tc.role).Object, "rules")
				return r
			}
			want := rules(tc.base, "ClusterRole")
			for _, r := range draClusterRules {
				want = append(want, r)
			}
			if got := rules(tc.dra, "ClusterRole"); !reflect.DeepEqual(got, want) {
				t.Errorf("ClusterRole rules:\n got %v\nwant %v", got, want)
			}
			if got, base := rules(tc.dra, "Role"), rules(tc.base, "Role"); !reflect.DeepEqual(got, base) {
				t.Errorf("the Role changed with DRA:\n got %v\nwant %v", got, base)
			}
		})
	}
}

// TestHelmDeviceClasses: dra.deviceClasses holds DeviceClasses as
// `featureplug dra classes -o yaml` prints them; the chart renders each
// unchanged but for its labels (Helm's win: Helm manages the object), only
// with dra.enabled.
func TestHelmDeviceClasses(t *testing.T) {
	// One class as `featureplug dra classes --rules FILE -o yaml` prints it.
	class := map[string]any{
		"apiVersion": "resource.k8s.io/v1",
		"kind":       "DeviceClass",
		"metadata": map[string]any{
			"name":        "a100-80gb.example.com",
			"labels":      map[string]any{"app.kubernetes.io/managed-by": "featureplug", "example.com/team": "ml"},
			"annotations": map[string]any{"featureplug.io/rules": "a100-80gb"},
		},
		"spec": map[string]any{
			"extendedResourceName": "example.com/a100-80gb",
			"selectors": []any{map[string]any{"cel": map[string]any{
				"expression": `device.driver == "gpu.featureplug.io" && device.attributes["gpu.featureplug.io"].resource == "example.com/a100-80gb"`,
			}}},
		},
	}
	objs := helm(t, map[string]any{"dra": map[string]any{"enabled": true, "deviceClasses": []any{class}}})
	got := find(t, objs, "DeviceClass", "a100-80gb.example.com")
	var dc resourcev1.DeviceClass
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(got.Object, &dc, true); err != nil {
		t.Fatalf("the rendered DeviceClass is not one: %v", err)
	}
	if dc.Spec.ExtendedResourceName == nil || *dc.Spec.ExtendedResourceName != "example.com/a100-80gb" || len(dc.Spec.Selectors) != 1 ||
		dc.Spec.Selectors[0].CEL == nil || dc.Spec.Selectors[0].CEL.Expression != class["spec"].(map[string]any)["selectors"].([]any)[0].(map[string]any)["cel"].(map[string]any)["expression"] {
		t.Errorf("spec %+v, want the value's", dc.Spec)
	}
	if !reflect.DeepEqual(got.Object["spec"], class["spec"]) {
		t.Errorf("spec changed:\n got %v\nwant %v", got.Object["spec"], class["spec"])
	}
	if dc.Annotations["featureplug.io/rules"] != "a100-80gb" {
		t.Errorf("annotations %v, want the value's", dc.Annotations)
	}
	ds := find(t, objs, "DaemonSet", name)
	for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart"} {
		if v := dc.Labels[k]; v == "" || v != ds.GetLabels()[k] {
			t.Errorf("label %s=%q, want the chart's %q", k, v, ds.GetLabels()[k])
		}
	}
	if dc.Labels["example.com/team"] != "ml" {
		t.Errorf("labels %v: the class's own label example.com/team=ml is gone", dc.Labels)
	}
	if l := class["metadata"].(map[string]any)["labels"].(map[string]any); len(l) != 2 {
		t.Errorf("rendering changed the value itself: labels %v", l)
	}

	// Without dra.enabled there is no DRA, and no class.
	for _, o := range helm(t, map[string]any{"dra": map[string]any{"deviceClasses": []any{class}}}) {
		if o.GetKind() == "DeviceClass" {
			t.Errorf("DeviceClass %s rendered without dra.enabled", o.GetName())
		}
	}
	// kustomize renders no class: they come from the rules file.
	for _, o := range composed(t, "overlays/nodefeature", "components/dra") {
		if slices.Contains([]string{"DeviceClass"}, o.GetKind()) {
			t.Errorf("components/dra renders DeviceClass %s", o.GetName())
		}
	}
}
