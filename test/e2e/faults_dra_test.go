package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/featureplug/featureplug/test/harness"
)

// TestFault19DRASliceDeleted: the node's ResourceSlice deleted or edited
// behind the agent's back (an admin's kubectl delete, a cleanup script, a
// controller that garbage-collects slices) is written again at once from
// the agent's watch of its slices: without it the node's DRA devices would
// be unallocatable until the next plan change. Operators see
// featureplug_dra_slice_writes_total{op="create"|"update"} count the
// restores and an INFO "ResourceSlice created" / "ResourceSlice updated"
// log line with the slice and its generation.
func TestFault19DRASliceDeleted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and featureplug")
	}
	api := harness.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitTimeout)
	defer cancel()
	n, err := api.CreateNode(ctx, "fault19-dra")
	if err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(draSliceRules("dra")), 0o644); err != nil {
		t.Fatal(err)
	}
	a := draSliceAgent(t, api, n.Name, rules)
	s := draSliceWait(t, api, n.Name, map[string]int{"example.com/a": 4})
	a.waitMetric(t, "featureplug_dra_slice_writes_total", func(v float64) bool { return v == 1 }, `op="create"`)

	slices := api.Client.ResourceV1().ResourceSlices()
	if err := slices.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the node's ResourceSlice: %v", err)
	}
	a.waitMetric(t, "featureplug_dra_slice_writes_total", func(v float64) bool { return v == 2 }, `op="create"`)
	back := draSliceWait(t, api, n.Name, map[string]int{"example.com/a": 4})
	if back.UID == s.UID {
		t.Fatalf("slice UID %s unchanged: it was never deleted", back.UID)
	}
	if back.Spec.Pool.Generation <= s.Spec.Pool.Generation {
		t.Errorf("restored slice has pool generation %d, want more than the deleted one's %d", back.Spec.Pool.Generation, s.Spec.Pool.Generation)
	}

	// Edited: a device removed, another's attribute changed.
	edited := back.DeepCopy()
	edited.Spec.Devices = edited.Spec.Devices[1:]
	bogus := "example.com/bogus"
	attr := edited.Spec.Devices[0].Attributes["resource"]
	attr.StringValue = &bogus
	edited.Spec.Devices[0].Attributes["resource"] = attr
	if _, err := slices.Update(ctx, edited, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("editing the node's ResourceSlice: %v", err)
	}
	a.waitMetric(t, "featureplug_dra_slice_writes_total", func(v float64) bool { return v == 1 }, `op="update"`)
	restored := draSliceWait(t, api, n.Name, map[string]int{"example.com/a": 4})
	if !equality.Semantic.DeepEqual(restored.Spec.Devices, back.Spec.Devices) {
		t.Errorf("restored devices differ from the published ones:\n got %+v\nwant %+v", restored.Spec.Devices, back.Spec.Devices)
	}
	if w := a.metric(t, "featureplug_dra_slice_writes_total", `op="delete"`); w != 0 {
		t.Errorf("the agent deleted slices %v times; it had nothing stale to delete", w)
	}
}
