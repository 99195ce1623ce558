package dra

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/featureplug/featureplug/rules/plan"
)

const pubNode = "node-a"

// pubRecorder records the Publisher's writes and syncs and wakes waiters.
type pubRecorder struct {
	mu     sync.Mutex
	writes map[string]int
	syncs  int
	errs   int
	wake   chan struct{}
}

func (r *pubRecorder) onWrite(op string) {
	r.mu.Lock()
	r.writes[op]++
	r.mu.Unlock()
	r.notify()
}

func (r *pubRecorder) onSync(err error) {
	r.mu.Lock()
	if err != nil {
		r.errs++
	} else {
		r.syncs++
	}
	r.mu.Unlock()
	r.notify()
}

func (r *pubRecorder) notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// counts returns the writes by op and the successful syncs.
func (r *pubRecorder) counts() (map[string]int, int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := make(map[string]int, len(r.writes))
	for k, v := range r.writes {
		w[k] = v
	}
	return w, r.syncs, r.errs
}

// waitFor waits until cond holds; the timeout only bounds a broken test.
func (r *pubRecorder) waitFor(t *testing.T, what string, cond func(writes map[string]int, syncs, errs int) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if w, s, e := r.counts(); cond(w, s, e) {
			return
		}
		select {
		case <-r.wake:
		case <-deadline:
			w, s, e := r.counts()
			t.Fatalf("timed out waiting for %s (writes %v, syncs %d, errors %d)", what, w, s, e)
		}
	}
}

type pubHarness struct {
	cs  *fake.Clientset
	pub *Publisher
	rec *pubRecorder
	// watching is closed when the Publisher's watch of slices is open.
	watching chan struct{}
}

// startPublisher runs a Publisher for pubNode over a fake clientset that
// holds the Node and objs.
func startPublisher(t *testing.T, active bool, objs ...runtime.Object) *pubHarness {
	t.Helper()
	return startPublisherWith(t, active, nil, objs...)
}

// startPublisherWith is startPublisher with setup called on the Publisher
// before it runs.
func startPublisherWith(t *testing.T, active bool, setup func(*Publisher), objs ...runtime.Object) *pubHarness {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: pubNode, UID: "node-uid-1"}}
	cs := fake.NewClientset(append([]runtime.Object{node}, objs...)...)
	rec := &pubRecorder{writes: map[string]int{}, wake: make(chan struct{}, 1)}
	// The fake's watch does not replay what happened between the list and
	// the watch (a real API server does, from the list's resourceVersion):
	// tests change slices behind the Publisher's back only once it
	// watches.
	watching := make(chan struct{})
	var once sync.Once
	cs.PrependWatchReactor("resourceslices", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := cs.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		once.Do(func() { close(watching) })
		return true, w, nil
	})
	p, err := NewPublisher(PublisherConfig{
		NodeName: pubNode, Slices: cs.ResourceV1().ResourceSlices(), WatchListClient: cs,
		Node: func(ctx context.Context) (*corev1.Node, error) {
			return cs.CoreV1().Nodes().Get(ctx, pubNode, metav1.GetOptions{})
		},
		Active: active, Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 1 << 30, Cap: 5 * time.Millisecond},
		OnWrite: rec.onWrite, OnSync: rec.onSync,
	})
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return &pubHarness{cs: cs, pub: p, rec: rec, watching: watching}
}

// pubDevices are the devices of slicePlan served through DRA, unhealthy
// ones tainted.
func pubDevices(t *testing.T, bad Unhealthy) []resourceapi.Device {
	t.Helper()
	return mustBuild(t, sliceInventory(), slicePlan().WithServeDefault(plan.ServeDRA), withOpts(sliceOpts(sliceCDI), func(o *BuildOptions) { o.Unhealthy = bad })).Devices
}

func (h *pubHarness) slice(t *testing.T, name string) *resourceapi.ResourceSlice {
	t.Helper()
	s, err := h.cs.ResourceV1().ResourceSlices().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get slice %s: %v", name, err)
	}
	return s
}

// settle pokes a sync and waits for it: the positive marker after which a
// write that must not happen would have happened.
func (h *pubHarness) settle(t *testing.T) {
	t.Helper()
	_, before, _ := h.rec.counts()
	h.pub.poke()
	h.rec.waitFor(t, "a sync after the poke", func(_ map[string]int, syncs, _ int) bool { return syncs > before })
}

func TestPublisherCreatesOnceAndWritesNothingWhenUnchanged(t *testing.T) {
	h := startPublisher(t, true)
	devs := pubDevices(t, nil)
	h.pub.Offer(devs)
	h.rec.waitFor(t, "the slice created", func(w map[string]int, _, _ int) bool { return w["create"] == 1 })

	s := h.slice(t, "node-a-gpu.featureplug.io")
	want := resourceapi.ResourceSliceSpec{
		Driver:   "gpu.featureplug.io",
		Pool:     resourceapi.ResourcePool{Name: pubNode, Generation: 1, ResourceSliceCount: 1},
		NodeName: ptr.To(pubNode),
		Devices:  devs,
	}
	if !equality.Semantic.DeepEqual(s.Spec, want) {
		t.Errorf("spec:\n got %+v\nwant %+v", s.Spec, want)
	}
	wantOwner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: pubNode, UID: "node-uid-1", Controller: ptr.To(true)}}
	if !equality.Semantic.DeepEqual(s.OwnerReferences, wantOwner) {
		t.Errorf("owner references %+v, want %+v", s.OwnerReferences, wantOwner)
	}

	// The same devices again (a new plan, a resync): nothing written.
	h.pub.Offer(pubDevices(t, nil))
	h.settle(t)
	h.settle(t)
	if w, _, _ := h.rec.counts(); w["create"] != 1 || w["update"] != 0 || w["delete"] != 0 {
		t.Errorf("writes %v after offering the same devices, want the one create", w)
	}
}

func TestPublisherUpdatesOnChangeAndKeepsServerFields(t *testing.T) {
	h := startPublisher(t, true)
	h.pub.Offer(pubDevices(t, nil))
	h.rec.waitFor(t, "the slice created", func(w map[string]int, _, _ int) bool { return w["create"] == 1 })

	// A health change taints a device: one update, the next generation.
	tainted := pubDevices(t, Unhealthy{sliceGPU0: "xid-79"})
	h.pub.Offer(tainted)
	h.rec.waitFor(t, "the slice updated", func(w map[string]int, _, _ int) bool { return w["update"] == 1 })
	s := h.slice(t, "node-a-gpu.featureplug.io")
	if s.Spec.Pool.Generation != 2 || !DevicesEqual(s.Spec.Devices, tainted) {
		t.Fatalf("after the update: generation %d, devices %+v; want 2 and the tainted devices", s.Spec.Pool.Generation, s.Spec.Devices)
	}

	// The API server stamps the taint's TimeAdded: that is no difference.
	<-h.watching
	s.Spec.Devices[0].Taints[0].TimeAdded = &metav1.Time{Time: time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)}
	if _, err := h.cs.ResourceV1().ResourceSlices().Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.settle(t)
	if w, _, _ := h.rec.counts(); w["update"] != 1 {
		t.Errorf("writes %v after the server stamped TimeAdded, want no more updates", w)
	}

	// Recovery removes the taint; another change keeps the stamped time
	// of a taint that stays.
	bothBad := pubDevices(t, Unhealthy{sliceGPU0: "xid-79", sliceMIG: "xid-94"})
	h.pub.Offer(bothBad)
	h.rec.waitFor(t, "the second update", func(w map[string]int, _, _ int) bool { return w["update"] == 2 })
	s = h.slice(t, "node-a-gpu.featureplug.io")
	if got := s.Spec.Devices[0].Taints[0].TimeAdded; got == nil || !got.Equal(&metav1.Time{Time: time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)}) {
		t.Errorf("TimeAdded of the taint that stayed = %v, want the server's", got)
	}
	if s.Spec.Pool.Generation != 3 {
		t.Errorf("generation %d, want 3", s.Spec.Pool.Generation)
	}
}

func TestPublisherRestoresSliceDeletedOrEditedBehindItsBack(t *testing.T) {
	h := startPublisher(t, true)
	devs := pubDevices(t, nil)
	h.pub.Offer(devs)
	h.rec.waitFor(t, "the slice created", func(w map[string]int, _, _ int) bool { return w["create"] == 1 })
	<-h.watching

	if err := h.cs.ResourceV1().ResourceSlices().Delete(context.Background(), "node-a-gpu.featureplug.io", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.rec.waitFor(t, "the deleted slice created again", func(w map[string]int, _, _ int) bool { return w["create"] == 2 })
	s := h.slice(t, "node-a-gpu.featureplug.io")
	if !DevicesEqual(s.Spec.Devices, devs) || s.Spec.Pool.Generation != 2 {
		t.Errorf("restored slice: generation %d, devices %+v; want generation 2 and the devices", s.Spec.Pool.Generation, s.Spec.Devices)
	}

	s.Spec.Devices = s.Spec.Devices[:1]
	if _, err := h.cs.ResourceV1().ResourceSlices().Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.rec.waitFor(t, "the edited slice restored", func(w map[string]int, _, _ int) bool { return w["update"] == 1 })
	if s := h.slice(t, "node-a-gpu.featureplug.io"); !DevicesEqual(s.Spec.Devices, devs) {
		t.Errorf("restored devices %+v, want %+v", s.Spec.Devices, devs)
	}
}

func TestPublisherDeletesStaleSlicesOnly(t *testing.T) {
	mk := func(name, node, driver string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node),
				Pool: resourceapi.ResourcePool{Name: node, Generation: 7, ResourceSliceCount: 1}},
		}
	}
	h := startPublisher(t, true,
		mk("old-name-of-an-older-version", pubNode, DriverName),
		mk("node-b-gpu.featureplug.io", "node-b", DriverName),
		mk("node-a-other", pubNode, "other.example.com"),
	)
	h.pub.Offer(pubDevices(t, nil))
	h.rec.waitFor(t, "create and delete", func(w map[string]int, _, _ int) bool { return w["create"] == 1 && w["delete"] == 1 })
	list, err := h.cs.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range list.Items {
		names = append(names, s.Name)
	}
	want := []string{"node-a-gpu.featureplug.io", "node-a-other", "node-b-gpu.featureplug.io"}
	if !equality.Semantic.DeepEqual(names, want) {
		t.Errorf("slices %v, want %v", names, want)
	}
	// The pool's generation goes on from the stale slice's.
	if s := h.slice(t, "node-a-gpu.featureplug.io"); s.Spec.Pool.Generation != 8 {
		t.Errorf("generation %d, want 8 (after the stale slice's 7)", s.Spec.Pool.Generation)
	}

	// No device left: no slice.
	h.pub.Offer(nil)
	h.rec.waitFor(t, "the slice deleted", func(w map[string]int, _, _ int) bool { return w["delete"] == 2 })
	if _, err := h.cs.ResourceV1().ResourceSlices().Get(context.Background(), "node-a-gpu.featureplug.io", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("slice after offering no device: %v, want NotFound", err)
	}
}

func TestPublisherRetriesAPIErrors(t *testing.T) {
	h := startPublisher(t, true)
	var mu sync.Mutex
	fails := 3
	h.cs.PrependReactor("create", "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			return true, nil, apierrors.NewInternalError(errors.New("etcd is away"))
		}
		return false, nil, nil
	})
	h.pub.Offer(pubDevices(t, nil))
	h.rec.waitFor(t, "the slice created after the errors", func(w map[string]int, _, errs int) bool { return w["create"] == 1 && errs == 3 })
	h.slice(t, "node-a-gpu.featureplug.io")
}

func TestPublisherToleratesDroppedFields(t *testing.T) {
	h := startPublisher(t, true)
	// An API server with DRADeviceTaints off stores slices without taints.
	strip := func(a k8stesting.Action) (bool, runtime.Object, error) {
		// Create and update actions alike carry the slice written.
		s := a.(interface{ GetObject() runtime.Object }).GetObject().(*resourceapi.ResourceSlice)
		for i := range s.Spec.Devices {
			s.Spec.Devices[i].Taints = nil
		}
		return false, nil, nil
	}
	h.cs.PrependReactor("create", "resourceslices", strip)
	h.cs.PrependReactor("update", "resourceslices", strip)
	h.pub.Offer(pubDevices(t, Unhealthy{sliceGPU0: "xid-79"}))
	h.rec.waitFor(t, "the slice created", func(w map[string]int, _, _ int) bool { return w["create"] == 1 })
	h.settle(t)
	h.settle(t)
	if w, _, _ := h.rec.counts(); w["update"] != 0 {
		t.Errorf("writes %v: the publisher fights a server that drops taints", w)
	}
}

// sliceActions counts the requests about ResourceSlices.
func sliceActions(cs *fake.Clientset) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetResource() == (schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceslices"}) {
			n++
		}
	}
	return n
}

func TestPublisherInactiveStaysAwayUntilADeviceIsServed(t *testing.T) {
	left := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "old-name-of-an-older-version"},
		Spec: resourceapi.ResourceSliceSpec{Driver: DriverName, NodeName: ptr.To(pubNode),
			Pool: resourceapi.ResourcePool{Name: pubNode, Generation: 1, ResourceSliceCount: 1}},
	}
	idle := make(chan struct{}, 16)
	h := startPublisherWith(t, false, func(p *Publisher) { p.onIdle = func() { idle <- struct{}{} } }, left)
	h.pub.Offer(nil)
	select {
	case <-idle: // the loop passed over the offer
	case <-time.After(30 * time.Second):
		t.Fatal("the publisher never looked at the offer")
	}
	if n := sliceActions(h.cs); n != 0 {
		t.Fatalf("%d requests about ResourceSlices while nothing is served through DRA, want none", n)
	}
	// A device: the Publisher manages the node's slices from now on,
	// removing the leftover.
	h.pub.Offer(pubDevices(t, nil))
	h.rec.waitFor(t, "the slice created and the leftover deleted", func(w map[string]int, _, _ int) bool { return w["create"] == 1 && w["delete"] == 1 })
	// Nothing served through DRA again: the slice goes.
	h.pub.Offer(nil)
	h.rec.waitFor(t, "the slice deleted", func(w map[string]int, _, _ int) bool { return w["delete"] == 2 })
}

func TestPublisherActiveRemovesLeftovers(t *testing.T) {
	left := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a-gpu.featureplug.io"},
		Spec: resourceapi.ResourceSliceSpec{Driver: DriverName, NodeName: ptr.To(pubNode),
			Pool: resourceapi.ResourcePool{Name: pubNode, Generation: 1, ResourceSliceCount: 1}},
	}
	h := startPublisher(t, true, left)
	// --serve dra, but the first plan serves nothing through DRA: the
	// earlier run's slice must go, or its devices would be offered
	// through both APIs.
	h.pub.Offer(nil)
	h.rec.waitFor(t, "the leftover deleted", func(w map[string]int, _, _ int) bool { return w["delete"] == 1 })
}

func TestPublisherFollowsTheNodesUID(t *testing.T) {
	h := startPublisher(t, true)
	h.pub.Offer(pubDevices(t, nil))
	h.rec.waitFor(t, "the slice created", func(w map[string]int, _, _ int) bool { return w["create"] == 1 })
	// The Node registered again (deleted and re-created): a new UID. The
	// slice must be owned by the new Node, or the garbage collector
	// deletes it.
	n, err := h.cs.CoreV1().Nodes().Get(context.Background(), pubNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.UID = "node-uid-2"
	if _, err := h.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.pub.poke()
	h.rec.waitFor(t, "the owner updated", func(w map[string]int, _, _ int) bool { return w["update"] == 1 })
	s := h.slice(t, "node-a-gpu.featureplug.io")
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "node-uid-2" {
		t.Errorf("owner references %+v, want the Node's new UID", s.OwnerReferences)
	}
	h.settle(t)
	if w, _, _ := h.rec.counts(); w["update"] != 1 || w["create"] != 1 {
		t.Errorf("writes %v, want one create and one update", w)
	}
}

// A pool of several slices is written whole with one generation; when it
// shrinks, the slices it no longer has are deleted and the rest carry the
// new count; an unchanged pool writes nothing.
func TestPublisherPoolOfSlices(t *testing.T) {
	h := startPublisher(t, true)
	devs := pubDevices(t, nil)
	counters := []resourceapi.CounterSet{{Name: "gpu-0-counters", Counters: map[string]resourceapi.Counter{"compute-slices": {Value: resource.MustParse("7")}}}}
	h.pub.OfferSlices([]SliceContent{{Devices: devs}, {SharedCounters: counters}})
	h.rec.waitFor(t, "two slices created", func(w map[string]int, _, _ int) bool { return w["create"] == 2 })
	for _, name := range []string{SliceName(pubNode), SliceNameAt(pubNode, 1)} {
		s := h.slice(t, name)
		if s.Spec.Pool.ResourceSliceCount != 2 || s.Spec.Pool.Generation != 1 {
			t.Errorf("slice %s: pool %+v, want count 2, generation 1", name, s.Spec.Pool)
		}
	}
	if got := h.slice(t, SliceNameAt(pubNode, 1)).Spec.SharedCounters; !equality.Semantic.DeepEqual(got, counters) {
		t.Errorf("counter slice holds %+v, want %+v", got, counters)
	}
	h.settle(t)
	if w, _, _ := h.rec.counts(); w["update"] != 0 {
		t.Errorf("an unchanged pool was written again: %v", w)
	}

	h.pub.OfferSlices([]SliceContent{{Devices: devs}})
	h.rec.waitFor(t, "the second slice deleted", func(w map[string]int, _, _ int) bool { return w["delete"] == 1 && w["update"] == 1 })
	if s := h.slice(t, SliceName(pubNode)); s.Spec.Pool.ResourceSliceCount != 1 || s.Spec.Pool.Generation != 2 {
		t.Errorf("after the pool shrank: pool %+v, want count 1, generation 2", s.Spec.Pool)
	}
}
