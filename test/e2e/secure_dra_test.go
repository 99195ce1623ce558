package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/featureplug/featureplug/test/harness"
	"github.com/featureplug/featureplug/test/manifests/render"
)

// TestSecureDRAManifestsOnAPIServer applies the DRA option's objects to a
// real kube-apiserver with server-side apply: kustomize's overlays/nodefeature
// with components/dra (the ClusterRole's resource.k8s.io rules), and the
// chart with dra.enabled and, as dra.deviceClasses, the DeviceClasses that
// `featureplug dra classes -o json` prints for a bundled example rules
// file (the conversion docs/deployment.md shows). Each class is then on
// the API server with its extended resource name.
func TestSecureDRAManifestsOnAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	api := harness.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitTimeout)
	defer cancel()
	dir := filepath.Join(build.root, "manifests")
	secureApplyDRA(ctx, t, api)

	rulesFile := filepath.Join(dir, "examples", "rules", "per-model-time-slicing.yaml")
	out, err := exec.CommandContext(ctx, build.agent, "dra", "classes", "--rules", rulesFile, "-o", "json").Output()
	if err != nil {
		t.Fatalf("featureplug dra classes --rules %s: %v", rulesFile, err)
	}
	var list struct {
		Items []map[string]any `json:"items"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("featureplug dra classes -o json: %v\n%s", err, out)
	}
	if len(list.Items) == 0 {
		t.Fatalf("featureplug dra classes --rules %s printed no class", rulesFile)
	}
	classes := make([]any, len(list.Items))
	for i, c := range list.Items {
		classes[i] = c
	}
	// Another release, in its own namespace: the kustomize objects stay.
	hobjs, err := render.Helm(filepath.Join(dir, "helm", "featureplug"), "gpu", "gpu",
		map[string]any{"createNamespace": true, "dra": map[string]any{"enabled": true, "deviceClasses": classes}})
	if err != nil {
		t.Fatal(err)
	}
	secureApply(ctx, t, api, "helm dra.enabled with the classes", hobjs)
	for _, c := range list.Items {
		meta, _ := c["metadata"].(map[string]any)
		spec, _ := c["spec"].(map[string]any)
		name, _ := meta["name"].(string)
		dc, err := api.Client.ResourceV1().DeviceClasses().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("DeviceClass %s: %v", name, err)
			continue
		}
		if want, _ := spec["extendedResourceName"].(string); dc.Spec.ExtendedResourceName == nil || *dc.Spec.ExtendedResourceName != want {
			t.Errorf("DeviceClass %s: extendedResourceName %v, want %s", name, dc.Spec.ExtendedResourceName, want)
		}
		if dc.Labels["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("DeviceClass %s: labels %v, want the chart's", name, dc.Labels)
		}
	}
}

// secureApplyDRA applies kustomize's overlays/nodefeature with
// components/dra to the API server with server-side apply and returns
// the objects.
func secureApplyDRA(ctx context.Context, t *testing.T, api *harness.APIServer) []*unstructured.Unstructured {
	t.Helper()
	dir := filepath.Join(build.root, "manifests")
	objs, err := render.KustomizeComposed(t.TempDir(), []string{filepath.Join(dir, "overlays", "nodefeature")},
		[]string{filepath.Join(dir, "components", "dra")})
	if err != nil {
		t.Fatal(err)
	}
	secureApply(ctx, t, api, "overlays/nodefeature + components/dra", objs)
	return objs
}
