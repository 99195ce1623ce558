package kube

import (
	"context"
	"net/http"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// TestResourceClaimsGet: Get is the request client-go's typed client
// makes (GET on the namespaced resource.k8s.io/v1 path), decodes the
// claim with its allocation, and a missing claim reads as NotFound.
func TestResourceClaimsGet(t *testing.T) {
	c, seen := kubeFakeServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/resource.k8s.io/v1/namespaces/ns1/resourceclaims/c1" {
			st := apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, "gone").ErrStatus
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			kubeWriteJSON(w, st)
			return
		}
		kubeWriteJSON(w, resourcev1.ResourceClaim{
			TypeMeta:   metav1.TypeMeta{Kind: "ResourceClaim", APIVersion: "resource.k8s.io/v1"},
			ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: "ns1", UID: "uid-1"},
			Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
				Results: []resourcev1.DeviceRequestAllocationResult{{Request: "gpu", Driver: "gpu.featureplug.io", Pool: "n1", Device: "gpu-0"}},
			}}},
		})
	})
	ctx := context.Background()
	cl, err := c.ResourceClaims("ns1").Get(ctx, "c1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cl.UID != "uid-1" || cl.Status.Allocation == nil || cl.Status.Allocation.Devices.Results[0].Device != "gpu-0" {
		t.Errorf("claim = %+v", cl)
	}
	if _, err := c.ResourceClaims("ns1").Get(ctx, "gone", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("missing claim: %v, want NotFound", err)
	}
	reqs := seen()
	if len(reqs) != 2 || reqs[0].method != http.MethodGet || reqs[0].path != "/apis/resource.k8s.io/v1/namespaces/ns1/resourceclaims/c1" {
		t.Errorf("requests = %+v", reqs)
	}
}

// TestResourceClaimsPatchStatus: Patch with subresource status is the
// request client-go's typed client makes for a server-side apply of a
// claim's status (PATCH on .../resourceclaims/NAME/status, the apply
// content type, field manager and force in the query).
func TestResourceClaimsPatchStatus(t *testing.T) {
	c, seen := kubeFakeServer(t, func(w http.ResponseWriter, _ *http.Request) {
		kubeWriteJSON(w, resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: "ns1", UID: "uid-1"}})
	})
	body := `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim"}`
	force := true
	cl, err := c.ResourceClaims("ns1").Patch(context.Background(), "c1", types.ApplyPatchType, []byte(body),
		metav1.PatchOptions{FieldManager: "gpu.featureplug.io", Force: &force}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if cl.UID != "uid-1" {
		t.Errorf("claim = %+v", cl)
	}
	reqs := seen()
	if len(reqs) != 1 || reqs[0].method != http.MethodPatch || reqs[0].path != "/apis/resource.k8s.io/v1/namespaces/ns1/resourceclaims/c1/status" ||
		reqs[0].contentType != string(types.ApplyPatchType) || reqs[0].body != body ||
		!strings.Contains(reqs[0].query, "fieldManager=gpu.featureplug.io") || !strings.Contains(reqs[0].query, "force=true") {
		t.Errorf("requests = %+v", reqs)
	}
}
