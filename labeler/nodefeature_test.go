package labeler

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	nfdfake "sigs.k8s.io/node-feature-discovery/api/generated/clientset/versioned/fake"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

const (
	testNode      = "gpu-node-1"
	testNodeUID   = "0b8a1a9e-5d7c-4a55-9c4e-1f0a1c2d3e4f"
	testNamespace = "featureplug"
)

var nodeFeatureResource = schema.GroupResource{Group: "nfd.k8s-sigs.io", Resource: "nodefeatures"}

// newNFDFake returns NFD's fake clientset. It is the deprecated
// NewSimpleClientset because NewClientset fails on Create for NFD's types
// ("no type found"); NFD's own tests do the same.
func newNFDFake(objects ...runtime.Object) *nfdfake.Clientset {
	return nfdfake.NewSimpleClientset(objects...) //nolint:staticcheck // NewClientset cannot create NodeFeatures
}

type nfHarness struct {
	nfd  *nfdfake.Clientset
	kube *kubefake.Clientset
	pub  *NodeFeaturePublisher
}

var nodeFeatureGVR = schema.GroupVersionResource{Group: "nfd.k8s-sigs.io", Version: "v1alpha1", Resource: "nodefeatures"}

// serveApply makes the fake clientset answer server-side applies of
// NodeFeatures, which NFD's fake clientsets cannot (NewClientset has no
// schema for NFD's types, NewSimpleClientset no apply): the applied labels
// are merged into the object's, its owner references and spec replaced, and
// its resourceVersion moves only when something changed, as on an API
// server. Tests that inject apply errors prepend their reactors later, so
// those run first.
func serveApply(cs *nfdfake.Clientset) {
	cs.PrependReactor("patch", "nodefeatures", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		if pa.GetPatchType() != types.ApplyPatchType {
			return false, nil, nil
		}
		var in nfdv1alpha1.NodeFeature
		if err := json.Unmarshal(pa.GetPatch(), &in); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		cur, err := cs.Tracker().Get(nodeFeatureGVR, pa.GetNamespace(), pa.GetName())
		if apierrors.IsNotFound(err) {
			in.ResourceVersion = "1"
			if err := cs.Tracker().Create(nodeFeatureGVR, &in, pa.GetNamespace()); err != nil {
				return true, nil, err
			}
			return true, &in, nil
		}
		if err != nil {
			return true, nil, err
		}
		old := cur.(*nfdv1alpha1.NodeFeature)
		want := old.DeepCopy()
		if want.Labels == nil {
			want.Labels = map[string]string{}
		}
		maps.Copy(want.Labels, in.Labels)
		want.OwnerReferences = in.OwnerReferences
		want.Spec = in.Spec
		if equality.Semantic.DeepEqual(old, want) {
			return true, old, nil
		}
		rv, _ := strconv.Atoi(old.ResourceVersion)
		want.ResourceVersion = strconv.Itoa(rv + 1)
		if err := cs.Tracker().Update(nodeFeatureGVR, want, pa.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, want, nil
	})
}

// serveMergePatch makes the fake clientset answer JSON merge patches of
// NodeFeatures as an API server does where the tracker does not: a
// resourceVersion in the patch is a precondition (Conflict when the object
// moved on), managedFields [{}] clears the managed fields, and the
// resourceVersion moves only when something changed.
func serveMergePatch(cs *nfdfake.Clientset) {
	cs.PrependReactor("patch", "nodefeatures", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		if pa.GetPatchType() != types.MergePatchType {
			return false, nil, nil
		}
		cur, err := cs.Tracker().Get(nodeFeatureGVR, pa.GetNamespace(), pa.GetName())
		if err != nil {
			return true, nil, err
		}
		old := cur.(*nfdv1alpha1.NodeFeature)
		var pre struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(pa.GetPatch(), &pre); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		if rv := pre.Metadata.ResourceVersion; rv != "" && rv != old.ResourceVersion {
			return true, nil, apierrors.NewConflict(nodeFeatureResource, pa.GetName(), errors.New("the object has been modified"))
		}
		from, err := json.Marshal(old)
		if err != nil {
			return true, nil, err
		}
		to, err := jsonpatch.MergePatch(from, pa.GetPatch())
		if err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		var want nfdv1alpha1.NodeFeature
		if err := json.Unmarshal(to, &want); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		if len(want.ManagedFields) == 1 && equality.Semantic.DeepEqual(want.ManagedFields[0], metav1.ManagedFieldsEntry{}) {
			want.ManagedFields = nil
		}
		if equality.Semantic.DeepEqual(old, &want) {
			return true, old, nil
		}
		rv, _ := strconv.Atoi(old.ResourceVersion)
		want.ResourceVersion = strconv.Itoa(rv + 1)
		if err := cs.Tracker().Update(nodeFeatureGVR, &want, pa.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, &want, nil
	})
}

func newNFHarness(t *testing.T, objects ...runtime.Object) *nfHarness {
	t.Helper()
	h := &nfHarness{
		nfd:  newNFDFake(objects...),
		kube: kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: testNodeUID}}),
	}
	serveApply(h.nfd)
	serveMergePatch(h.nfd)
	pub, err := NewNodeFeaturePublisher(NodeFeatureConfig{NodeName: testNode, Namespace: testNamespace, NFD: nfdOf(h.nfd), Node: nodesOf(h.kube, testNode)})
	if err != nil {
		t.Fatal(err)
	}
	h.pub = pub
	return h
}

func (h *nfHarness) get(t *testing.T) *nfdv1alpha1.NodeFeature {
	t.Helper()
	obj, err := h.nfd.NfdV1alpha1().NodeFeatures(testNamespace).Get(context.Background(), h.pub.Name(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// writes counts write requests (create, update, patch: applies are
// patches) on NodeFeatures, no-op applies included.
func (h *nfHarness) writes() int { return h.count("create", "update", "patch") }

// count counts requests on NodeFeatures with the given verbs.
func (h *nfHarness) count(verbs ...string) int {
	n := 0
	for _, a := range h.nfd.Actions() {
		if a.GetResource().Resource == "nodefeatures" && slices.Contains(verbs, a.GetVerb()) {
			n++
		}
	}
	return n
}

func testContent() Content {
	inv := h100()
	return NewContent(inv, mixedPlan(inv), LabelOptions{})
}

func TestNodeFeatureCreate(t *testing.T) {
	h := newNFHarness(t)
	c := testContent()
	if err := h.pub.Publish(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	obj := h.get(t)
	if obj.Name != "featureplug-"+testNode || obj.Namespace != testNamespace {
		t.Errorf("object %s/%s, want %s/featureplug-%s", obj.Namespace, obj.Name, testNamespace, testNode)
	}
	if obj.Labels[NodeNameLabel] != testNode || obj.Labels[ManagedByLabel] != ManagedByValue {
		t.Errorf("object labels %v, want %s=%s and %s=%s", obj.Labels, NodeNameLabel, testNode, ManagedByLabel, ManagedByValue)
	}
	if len(obj.OwnerReferences) != 1 {
		t.Fatalf("owner references %v, want one to the Node", obj.OwnerReferences)
	}
	ref := obj.OwnerReferences[0]
	if ref.APIVersion != "v1" || ref.Kind != "Node" || ref.Name != testNode || ref.UID != testNodeUID {
		t.Errorf("owner reference %+v, want v1 Node %s uid %s", ref, testNode, testNodeUID)
	}
	if obj.Spec.Labels["nvidia.com/gpu.product"] != "NVIDIA-H100-80GB-HBM3" {
		t.Errorf("spec.labels = %v, want the GPU labels", obj.Spec.Labels)
	}
	if got := len(obj.Spec.Features.Instances["nvidia.gpu"].Elements); got != 8 {
		t.Errorf("spec.features has %d nvidia.gpu instances, want 8", got)
	}
	if s := h.pub.Stats(); s != (WriteStats{Creates: 1}) {
		t.Errorf("stats %+v, want one create", s)
	}
}

// TestNodeFeatureNoOp publishes the same content again, also after the
// stored object went through JSON as it does on a real API server: nothing
// is written.
func TestNodeFeatureNoOp(t *testing.T) {
	h := newNFHarness(t)
	ctx := context.Background()
	c := testContent()
	if err := h.pub.Publish(ctx, c); err != nil {
		t.Fatal(err)
	}
	// Replace the stored object by its JSON round trip (nil and empty maps
	// and slices collapse as on a real API server).
	obj := h.get(t)
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var round nfdv1alpha1.NodeFeature
	if err := json.Unmarshal(data, &round); err != nil {
		t.Fatal(err)
	}
	if err := h.nfd.Tracker().Update(nodeFeatureGVR, &round, testNamespace); err != nil {
		t.Fatal(err)
	}
	before := len(h.nfd.Actions())
	for range 10 {
		if err := h.pub.Publish(ctx, testContent()); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.nfd.Actions()[before:]; len(got) != 0 {
		t.Errorf("%d requests for unchanged content (%v), want none", len(got), got)
	}
	if s := h.pub.Stats(); s != (WriteStats{Creates: 1, Unchanged: 10}) {
		t.Errorf("stats %+v, want 1 create and 10 unchanged", s)
	}
}

func TestNodeFeatureUpdate(t *testing.T) {
	h := newNFHarness(t)
	ctx := context.Background()
	if err := h.pub.Publish(ctx, testContent()); err != nil {
		t.Fatal(err)
	}
	inv := a100MixedMIG()
	changed := NewContent(inv, mixedPlan(inv), LabelOptions{})
	if err := h.pub.Publish(ctx, changed); err != nil {
		t.Fatal(err)
	}
	obj := h.get(t)
	if got := obj.Spec.Labels["nvidia.com/mig.strategy"]; got != "mixed" {
		t.Errorf("after update mig.strategy=%q, want mixed", got)
	}
	if got := len(obj.Spec.Features.Instances["nvidia.mig"].Elements); got != 16 {
		t.Errorf("after update %d nvidia.mig instances, want 16", got)
	}
	if s := h.pub.Stats(); s != (WriteStats{Creates: 1, Updates: 1}) {
		t.Errorf("stats %+v, want 1 create and 1 update", s)
	}
}

// TestNodeFeaturePatchesTheDifference: a change is one JSON merge patch,
// with no read before it, that carries only what changed (a label that
// went is set to null) and the resourceVersion of the object it changes.
func TestNodeFeaturePatchesTheDifference(t *testing.T) {
	h := newNFHarness(t)
	ctx := context.Background()
	if err := h.pub.Publish(ctx, testContent()); err != nil {
		t.Fatal(err)
	}
	rv := h.get(t).ResourceVersion
	before := len(h.nfd.Actions())
	c := testContent()
	c.Labels["nvidia.com/gpu.product"] = "changed"
	delete(c.Labels, "nvidia.com/gpu.family")
	if err := h.pub.Publish(ctx, c); err != nil {
		t.Fatal(err)
	}
	acts := h.nfd.Actions()[before:]
	if len(acts) != 1 {
		t.Fatalf("requests for a change: %v, want one patch", acts)
	}
	pa, ok := acts[0].(k8stesting.PatchActionImpl)
	if !ok || pa.GetPatchType() != types.MergePatchType {
		t.Fatalf("request %v, want a JSON merge patch", acts[0])
	}
	want := `{"metadata":{"resourceVersion":"` + rv + `"},"spec":{"labels":{"nvidia.com/gpu.family":null,"nvidia.com/gpu.product":"changed"}}}`
	if got := string(pa.GetPatch()); got != want {
		t.Errorf("patch\n%s\nwant\n%s", got, want)
	}
	obj := h.get(t)
	if _, ok := obj.Spec.Labels["nvidia.com/gpu.family"]; ok || obj.Spec.Labels["nvidia.com/gpu.product"] != "changed" {
		t.Errorf("spec.labels after the patch: %v", obj.Spec.Labels)
	}
}

// TestNodeFeatureConflictRereads: when the object changed behind the
// publisher's back, its patch meets a Conflict; it reads the object again
// and patches the difference from what is there, so the other writer's
// edit does not survive.
func TestNodeFeatureConflictRereads(t *testing.T) {
	h := newNFHarness(t)
	ctx := context.Background()
	if err := h.pub.Publish(ctx, testContent()); err != nil {
		t.Fatal(err)
	}
	edited := h.get(t)
	edited.Spec.Labels["example.com/edited"] = "yes"
	edited.ResourceVersion = "100"
	if err := h.nfd.Tracker().Update(nodeFeatureGVR, edited, testNamespace); err != nil {
		t.Fatal(err)
	}
	inv := a100MixedMIG()
	if err := h.pub.Publish(ctx, NewContent(inv, mixedPlan(inv), LabelOptions{})); err != nil {
		t.Fatal(err)
	}
	obj := h.get(t)
	if _, ok := obj.Spec.Labels["example.com/edited"]; ok {
		t.Errorf("the other writer's label survived: %v", obj.Spec.Labels)
	}
	if got := obj.Spec.Labels["nvidia.com/mig.strategy"]; got != "mixed" {
		t.Errorf("mig.strategy=%q, want mixed", got)
	}
	if got := h.count("patch"); got != 3 {
		t.Errorf("%d patches, want 3 (the create, the conflicting patch, the one after the read)", got)
	}
}

// TestNodeFeatureApplyKeepsEmptyElements: a node without MIG devices
// applies "elements": [] for nvidia.mig; the CRD requires the list, and an
// apply that drops it is rejected by the API server.
func TestNodeFeatureApplyKeepsEmptyElements(t *testing.T) {
	h := newNFHarness(t)
	c := testContent()
	if set, ok := c.Features.Instances["nvidia.mig"]; !ok || len(set.Elements) != 0 {
		t.Fatalf("test content has nvidia.mig %+v (present %v), want an empty set", set, ok)
	}
	if err := h.pub.Publish(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	for _, a := range h.nfd.Actions() {
		if pa, ok := a.(k8stesting.PatchActionImpl); ok && pa.GetPatchType() == types.ApplyPatchType {
			if !strings.Contains(string(pa.GetPatch()), `"nvidia.mig":{"elements":[]}`) {
				t.Errorf("apply body %s does not carry nvidia.mig with an empty elements list", pa.GetPatch())
			}
			return
		}
	}
	t.Fatal("no apply")
}

// TestNodeFeatureRestartWritesNothing: a new publisher (an agent restart)
// finding its content in place reads once and writes nothing.
func TestNodeFeatureRestartWritesNothing(t *testing.T) {
	h := newNFHarness(t)
	ctx := context.Background()
	if err := h.pub.Publish(ctx, testContent()); err != nil {
		t.Fatal(err)
	}
	again, err := NewNodeFeaturePublisher(NodeFeatureConfig{NodeName: testNode, Namespace: testNamespace, NFD: nfdOf(h.nfd), Node: nodesOf(h.kube, testNode)})
	if err != nil {
		t.Fatal(err)
	}
	before := h.writes()
	for range 3 {
		if err := again.Publish(ctx, testContent()); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.writes() - before; got != 0 {
		t.Errorf("%d writes after a restart with unchanged content, want 0", got)
	}
	if s := again.Stats(); s != (WriteStats{Unchanged: 3}) {
		t.Errorf("stats %+v, want 3 unchanged", s)
	}
}

// TestNodeFeatureResync: a resync reads the object from the API server's
// cache (resourceVersion "0") and writes only to repair it: after it was
// edited, and after it was deleted.
func TestNodeFeatureResync(t *testing.T) {
	h := newNFHarness(t)
	ctx := context.Background()
	c := testContent()
	if err := h.pub.Publish(ctx, c); err != nil {
		t.Fatal(err)
	}
	before := len(h.nfd.Actions())
	if err := h.pub.Resync(ctx, c); err != nil {
		t.Fatal(err)
	}
	acts := h.nfd.Actions()[before:]
	if len(acts) != 1 || acts[0].GetVerb() != "get" {
		t.Fatalf("requests of an unchanged resync: %v, want one get", acts)
	}
	if rv := acts[0].(k8stesting.GetActionImpl).GetOptions.ResourceVersion; rv != "0" {
		t.Errorf("resync read with resourceVersion %q, want \"0\" (the watch cache)", rv)
	}

	edited := h.get(t)
	edited.Spec.Labels["nvidia.com/gpu.product"] = "edited"
	if err := h.nfd.Tracker().Update(nodeFeatureGVR, edited, testNamespace); err != nil {
		t.Fatal(err)
	}
	if err := h.pub.Resync(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got := h.get(t).Spec.Labels["nvidia.com/gpu.product"]; got != "NVIDIA-H100-80GB-HBM3" {
		t.Errorf("after a resync the edited label is %q, want it repaired", got)
	}

	if err := h.nfd.Tracker().Delete(nodeFeatureGVR, testNamespace, h.pub.Name()); err != nil {
		t.Fatal(err)
	}
	if err := h.pub.Resync(ctx, c); err != nil {
		t.Fatal(err)
	}
	h.get(t)
	if s := h.pub.Stats(); s != (WriteStats{Creates: 2, Updates: 1, Unchanged: 1}) {
		t.Errorf("stats %+v, want 2 creates (start, after the delete), 1 update (the repair), 1 unchanged", s)
	}
}

// TestNodeFeatureApplyFailureRereads: after a failed apply the next publish
// reads the object again before applying.
func TestNodeFeatureApplyFailureRereads(t *testing.T) {
	h := newNFHarness(t)
	ctx := context.Background()
	if err := h.pub.Publish(ctx, testContent()); err != nil {
		t.Fatal(err)
	}
	failing := true
	h.nfd.PrependReactor("patch", "nodefeatures", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing {
			failing = false
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		}
		return false, nil, nil
	})
	inv := a100MixedMIG()
	changed := NewContent(inv, mixedPlan(inv), LabelOptions{})
	if err := h.pub.Publish(ctx, changed); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("Publish = %v, want the injected ServiceUnavailable", err)
	}
	gets := h.count("get")
	if err := h.pub.Publish(ctx, changed); err != nil {
		t.Fatal(err)
	}
	if got := h.count("get") - gets; got != 1 {
		t.Errorf("%d reads before the retry, want 1", got)
	}
	if got := h.get(t).Spec.Labels["nvidia.com/mig.strategy"]; got != "mixed" {
		t.Errorf("mig.strategy=%q after the retry, want mixed", got)
	}
}

func TestNodeFeatureNotOurs(t *testing.T) {
	existing := func(labels map[string]string, owners ...metav1.OwnerReference) *nfdv1alpha1.NodeFeature {
		return &nfdv1alpha1.NodeFeature{ObjectMeta: metav1.ObjectMeta{
			Name: NodeFeatureName(testNode), Namespace: testNamespace, Labels: labels, OwnerReferences: owners,
		}}
	}
	ours := map[string]string{NodeNameLabel: testNode, ManagedByLabel: ManagedByValue}
	tests := []struct {
		name     string
		obj      *nfdv1alpha1.NodeFeature
		wantText string
	}{
		{"no marker", existing(map[string]string{NodeNameLabel: testNode}), ManagedByLabel},
		{"other manager", existing(map[string]string{NodeNameLabel: testNode, ManagedByLabel: "gpu-feature-discovery"}), `"gpu-feature-discovery"`},
		{"other node", existing(map[string]string{NodeNameLabel: "other", ManagedByLabel: ManagedByValue}), `"other"`},
		{"owned by a replica set", existing(ours, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "nfd-x", UID: "u"}), `ReplicaSet "nfd-x"`},
		{"owned by another node", existing(ours, metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "other", UID: "u"}), `Node "other"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newNFHarness(t, tt.obj)
			err := h.pub.Publish(context.Background(), testContent())
			if !errors.Is(err, ErrNotOurs) {
				t.Fatalf("Publish error = %v, want ErrNotOurs", err)
			}
			for _, want := range []string{testNamespace + "/" + h.pub.Name(), tt.wantText} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}
			if h.writes() != 0 {
				t.Errorf("%d writes to a NodeFeature that is not ours", h.writes())
			}
		})
	}
}

// TestNodeFeatureStaleOwner: an object of ours owned by an earlier Node of
// the same name (re-created, new UID) is taken over, not refused.
func TestNodeFeatureStaleOwner(t *testing.T) {
	old := &nfdv1alpha1.NodeFeature{ObjectMeta: metav1.ObjectMeta{
		Name: NodeFeatureName(testNode), Namespace: testNamespace,
		Labels:          map[string]string{NodeNameLabel: testNode, ManagedByLabel: ManagedByValue},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: testNode, UID: "old-uid"}},
	}}
	h := newNFHarness(t, old)
	if err := h.pub.Publish(context.Background(), testContent()); err != nil {
		t.Fatal(err)
	}
	if got := h.get(t).OwnerReferences[0].UID; got != testNodeUID {
		t.Errorf("owner UID %s, want %s", got, testNodeUID)
	}
}

func TestNodeFeatureCRDMissing(t *testing.T) {
	pageNotFound := apierrors.NewGenericServerResponse(http.StatusNotFound, "GET", nodeFeatureResource, NodeFeatureName(testNode), "404 page not found", 0, true)
	tests := []struct {
		name      string
		getErr    error
		createErr error
		wantCRD   bool
		wantText  string
	}{
		{name: "get answers 404 page not found", getErr: pageNotFound, wantCRD: true},
		{name: "apply answers NotFound for the resource", createErr: apierrors.NewNotFound(nodeFeatureResource, NodeFeatureName(testNode)), wantCRD: true},
		{name: "namespace missing", createErr: apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, testNamespace), wantText: "namespace \"featureplug\" does not exist"},
		{name: "forbidden", getErr: apierrors.NewForbidden(nodeFeatureResource, NodeFeatureName(testNode), errors.New("no")), wantText: "RBAC"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newNFHarness(t)
			if tt.getErr != nil {
				h.nfd.PrependReactor("get", "nodefeatures", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tt.getErr })
			}
			if tt.createErr != nil {
				h.nfd.PrependReactor("patch", "nodefeatures", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tt.createErr })
			}
			err := h.pub.Publish(context.Background(), testContent())
			if err == nil {
				t.Fatal("Publish succeeded")
			}
			if got := errors.Is(err, ErrCRDMissing); got != tt.wantCRD {
				t.Errorf("errors.Is(%v, ErrCRDMissing) = %v, want %v", err, got, tt.wantCRD)
			}
			if tt.wantCRD && !strings.Contains(err.Error(), "CRDs are not installed") {
				t.Errorf("error %q does not say the CRDs are missing", err)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("error %q does not contain %q", err, tt.wantText)
			}
		})
	}
}

func TestNodeFeatureNodeMissing(t *testing.T) {
	nfd := newNFDFake()
	pub, err := NewNodeFeaturePublisher(NodeFeatureConfig{NodeName: "ghost", Namespace: testNamespace, NFD: nfdOf(nfd), Node: nodesOf(kubefake.NewClientset(), "ghost")})
	if err != nil {
		t.Fatal(err)
	}
	err = pub.Publish(context.Background(), testContent())
	if err == nil || !strings.Contains(err.Error(), `Node "ghost"`) {
		t.Fatalf("Publish error = %v, want one naming Node \"ghost\"", err)
	}
}

func TestNodeFeatureName(t *testing.T) {
	long := strings.Repeat("a", 40) + "." + strings.Repeat("b", 30) + ".example.com"
	tests := []struct {
		node string
		want string // empty: only check validity
	}{
		{node: "gpu-node-1", want: "featureplug-gpu-node-1"},
		{node: "ip-10-0-0-1.ec2.internal", want: "featureplug-ip-10-0-0-1.ec2.internal"},
		{node: strings.Repeat("n", 51), want: "featureplug-" + strings.Repeat("n", 51)},
		{node: strings.Repeat("n", 52)},
		{node: long},
		{node: strings.Repeat("x", 250)},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		got := NodeFeatureName(tt.node)
		if tt.want != "" && got != tt.want {
			t.Errorf("NodeFeatureName(%q) = %q, want %q", tt.node, got, tt.want)
		}
		if errs := content.IsDNS1123Subdomain(got); len(errs) > 0 || len(got) > 63 {
			t.Errorf("NodeFeatureName(%q) = %q (%d chars) is not a valid short object name: %v", tt.node, got, len(got), errs)
		}
		if prev, ok := seen[got]; ok {
			t.Errorf("NodeFeatureName(%q) = NodeFeatureName(%q) = %q", tt.node, prev, got)
		}
		seen[got] = tt.node
	}
	// Same 63-character prefix, different nodes: different names.
	a, b := NodeFeatureName(strings.Repeat("z", 60)+"-a"), NodeFeatureName(strings.Repeat("z", 60)+"-b")
	if a == b {
		t.Errorf("two long node names share the object name %q", a)
	}
}

func TestNewNodeFeaturePublisherErrors(t *testing.T) {
	nfd, kube := newNFDFake(), kubefake.NewClientset()
	tests := []struct {
		name string
		cfg  NodeFeatureConfig
		want string
	}{
		{"no NFD client", NodeFeatureConfig{NodeName: "n", Namespace: "ns", Node: nodesOf(kube, testNode)}, "NFD client"},
		{"no kube client", NodeFeatureConfig{NodeName: "n", Namespace: "ns", NFD: nfdOf(nfd)}, "Kubernetes client"},
		{"bad node name", NodeFeatureConfig{NodeName: "Node_1", Namespace: "ns", NFD: nfdOf(nfd), Node: nodesOf(kube, testNode)}, `node name "Node_1"`},
		{"node name too long for a label", NodeFeatureConfig{NodeName: strings.Repeat("a", 64), Namespace: "ns", NFD: nfdOf(nfd), Node: nodesOf(kube, testNode)}, NodeNameLabel},
		{"bad namespace", NodeFeatureConfig{NodeName: "n", Namespace: "", NFD: nfdOf(nfd), Node: nodesOf(kube, testNode)}, `namespace ""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewNodeFeaturePublisher(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func BenchmarkNodeFeaturePublishUnchanged(b *testing.B) {
	nfd := newNFDFake()
	serveApply(nfd)
	serveMergePatch(nfd)
	kube := kubefake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: testNodeUID}})
	pub, err := NewNodeFeaturePublisher(NodeFeatureConfig{NodeName: testNode, Namespace: testNamespace, NFD: nfdOf(nfd), Node: nodesOf(kube, testNode)})
	if err != nil {
		b.Fatal(err)
	}
	inv := a100MixedMIG()
	c := NewContent(inv, mixedPlan(inv), LabelOptions{})
	ctx := context.Background()
	if err := pub.Publish(ctx, c); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := pub.Publish(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
}

// recordFieldsOnApply makes h's API create an object with managed fields
// (entry) when it is applied, as an API server does.
func recordFieldsOnApply(h *nfHarness, entry metav1.ManagedFieldsEntry) {
	h.nfd.PrependReactor("patch", "nodefeatures", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		if pa.GetPatchType() != types.ApplyPatchType {
			return false, nil, nil
		}
		var in nfdv1alpha1.NodeFeature
		if err := json.Unmarshal(pa.GetPatch(), &in); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		in.ResourceVersion, in.ManagedFields = "1", []metav1.ManagedFieldsEntry{entry}
		return true, &in, h.nfd.Tracker().Create(nodeFeatureGVR, &in, pa.GetNamespace())
	})
}

// TestNodeFeatureClearsManagedFields: the managed fields an apply
// records (at a create, or written by an earlier featureplug) are cleared
// with managedFields [{}], right after the create and at the first read
// of an existing object, and the content still gets published.
func TestNodeFeatureClearsManagedFields(t *testing.T) {
	entry := metav1.ManagedFieldsEntry{
		Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply, APIVersion: "nfd.k8s-sigs.io/v1alpha1",
		FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:labels":{"f:stale":{}}}}`),
	}
	check := func(t *testing.T, h *nfHarness) {
		t.Helper()
		var cleared bool
		for _, a := range h.nfd.Actions() {
			if pa, ok := a.(k8stesting.PatchActionImpl); ok && pa.GetPatchType() == types.MergePatchType &&
				strings.Contains(string(pa.GetPatch()), `"managedFields":[{}]`) {
				cleared = true
			}
		}
		if !cleared {
			t.Error("no merge patch cleared the managed fields")
		}
		obj := h.get(t)
		if len(obj.ManagedFields) != 0 {
			t.Errorf("managed fields %+v, want none", obj.ManagedFields)
		}
		if obj.Spec.Labels["nvidia.com/gpu.product"] != "NVIDIA-H100-80GB-HBM3" {
			t.Errorf("spec.labels = %v, want the content", obj.Spec.Labels)
		}
	}
	t.Run("create", func(t *testing.T) {
		h := newNFHarness(t)
		recordFieldsOnApply(h, entry)
		if err := h.pub.Publish(context.Background(), testContent()); err != nil {
			t.Fatal(err)
		}
		check(t, h)
		if s := h.pub.Stats(); s != (WriteStats{Creates: 1, Updates: 1}) {
			t.Errorf("stats %+v, want the create and the patch that clears its managed fields", s)
		}
	})
	t.Run("clearing fails once", func(t *testing.T) {
		// A busy API server times out the patch that clears the managed
		// fields: the publish fails, so the loop retries, and the retry
		// clears them.
		h := newNFHarness(t)
		recordFieldsOnApply(h, entry)
		failed := false
		h.nfd.PrependReactor("patch", "nodefeatures", func(a k8stesting.Action) (bool, runtime.Object, error) {
			pa := a.(k8stesting.PatchAction)
			if failed || pa.GetPatchType() != types.MergePatchType {
				return false, nil, nil
			}
			failed = true
			return true, nil, apierrors.NewTimeoutError("request timed out", 1)
		})
		err := h.pub.Publish(context.Background(), testContent())
		if err == nil || !strings.Contains(err.Error(), "clearing its managed fields failed") {
			t.Fatalf("Publish = %v, want the failed clearing reported", err)
		}
		if err := h.pub.Publish(context.Background(), testContent()); err != nil {
			t.Fatal(err)
		}
		check(t, h)
	})
	t.Run("existing", func(t *testing.T) {
		old := &nfdv1alpha1.NodeFeature{ObjectMeta: metav1.ObjectMeta{
			Name: NodeFeatureName(testNode), Namespace: testNamespace, ResourceVersion: "7",
			Labels:          map[string]string{NodeNameLabel: testNode, ManagedByLabel: ManagedByValue},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: testNode, UID: testNodeUID}},
			ManagedFields:   []metav1.ManagedFieldsEntry{entry},
		}}
		h := newNFHarness(t, old)
		if err := h.pub.Publish(context.Background(), testContent()); err != nil {
			t.Fatal(err)
		}
		check(t, h)
		if got := h.count("patch"); got != 1 {
			t.Errorf("%d patches, want 1 (content and managed fields together)", got)
		}
	})
}

// TestNodeFeatureOwners: with Config.Owners (run --owner pod or
// daemonset) the NodeFeature is owned by what it returns, the agent's Pod
// and DaemonSet as nfd-worker does it; an object an earlier run owned by
// the Node is taken over, and back.
func TestNodeFeatureOwners(t *testing.T) {
	podAndDS := []metav1.OwnerReference{
		{APIVersion: "v1", Kind: "Pod", Name: "featureplug-abcde", UID: "pod-uid"},
		{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "featureplug", UID: "ds-uid"},
	}
	h := newNFHarness(t)
	calls := 0
	pub, err := NewNodeFeaturePublisher(NodeFeatureConfig{NodeName: testNode, Namespace: testNamespace, NFD: nfdOf(h.nfd), Node: nodesOf(h.kube, testNode),
		Owners: func(context.Context) ([]metav1.OwnerReference, error) { calls++; return podAndDS, nil }})
	if err != nil {
		t.Fatal(err)
	}
	// An object the Node owns, from an earlier --owner node.
	if err := h.pub.Publish(context.Background(), testContent()); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(context.Background(), testContent()); err != nil {
		t.Fatal(err)
	}
	if got := h.get(t).OwnerReferences; !equality.Semantic.DeepEqual(got, podAndDS) {
		t.Errorf("owner references %+v, want the Pod and the DaemonSet %+v", got, podAndDS)
	}
	writes := h.writes()
	if err := pub.Publish(context.Background(), testContent()); err != nil {
		t.Fatal(err)
	}
	if h.writes() != writes || calls != 1 {
		t.Errorf("unchanged content: %d writes, %d owner lookups; want none and 1 in all", h.writes()-writes, calls)
	}
	// Back to the Node (a fresh publisher, as after a restart with --owner node).
	back, err := NewNodeFeaturePublisher(NodeFeatureConfig{NodeName: testNode, Namespace: testNamespace, NFD: nfdOf(h.nfd), Node: nodesOf(h.kube, testNode)})
	if err != nil {
		t.Fatal(err)
	}
	if err := back.Publish(context.Background(), testContent()); err != nil {
		t.Fatal(err)
	}
	if got := h.get(t).OwnerReferences; len(got) != 1 || got[0].Kind != "Node" || got[0].UID != testNodeUID {
		t.Errorf("owner references %+v, want the Node's", got)
	}
}

// TestNodeFeatureOwnersForbidden: without the right to read its Pod (an
// RBAC from before owner references), the agent still publishes, owned by
// the Node, rather than never publishing.
func TestNodeFeatureOwnersForbidden(t *testing.T) {
	h := newNFHarness(t)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "featureplug-abcde", errors.New("RBAC: get pods is not allowed"))
	pub, err := NewNodeFeaturePublisher(NodeFeatureConfig{NodeName: testNode, Namespace: testNamespace, NFD: nfdOf(h.nfd), Node: nodesOf(h.kube, testNode),
		Owners: func(context.Context) ([]metav1.OwnerReference, error) { return nil, forbidden }})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(context.Background(), testContent()); err != nil {
		t.Fatalf("publish with the Pod unreadable: %v", err)
	}
	if got := h.get(t).OwnerReferences; len(got) != 1 || got[0].Kind != "Node" || got[0].UID != testNodeUID {
		t.Errorf("owner references %+v, want the Node's", got)
	}
	// A transient failure is an error to retry, not a reason to change owners.
	unavailable := apierrors.NewServiceUnavailable("apiserver restarting")
	pub, err = NewNodeFeaturePublisher(NodeFeatureConfig{NodeName: testNode, Namespace: testNamespace, NFD: nfdOf(h.nfd), Node: nodesOf(h.kube, testNode),
		Owners: func(context.Context) ([]metav1.OwnerReference, error) { return nil, unavailable }})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.nfd.NfdV1alpha1().NodeFeatures(testNamespace).Delete(context.Background(), h.pub.Name(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(context.Background(), testContent()); err == nil {
		t.Error("publish with the Pod read failing transiently succeeded; want an error to retry")
	}
}
