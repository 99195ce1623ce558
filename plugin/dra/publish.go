package dra

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// ResourceSlices reads, watches and writes ResourceSlices
// (resource.k8s.io/v1, cluster-scoped): the part of client-go's typed
// ResourceSliceInterface featureplug uses, which that interface and the
// agent's API client satisfy. The Publisher lists and watches with the
// field selectors spec.nodeName and spec.driver, so it sees only its own
// node's slices.
type ResourceSlices interface {
	List(ctx context.Context, opts metav1.ListOptions) (*resourceapi.ResourceSliceList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, slice *resourceapi.ResourceSlice, opts metav1.CreateOptions) (*resourceapi.ResourceSlice, error)
	Update(ctx context.Context, slice *resourceapi.ResourceSlice, opts metav1.UpdateOptions) (*resourceapi.ResourceSlice, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// DefaultPublishBackoff paces the Publisher's retries after an API error:
// 0.5 s, doubling to 20 s, each lengthened by up to half.
var DefaultPublishBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: math.MaxInt32, Cap: 20 * time.Second}

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// NodeName is the node: the slice's spec.nodeName and pool name, and
	// the owner of the slice.
	NodeName string
	// Slices is the API client of ResourceSlices.
	Slices ResourceSlices
	// Node reads the Node the slice belongs to (its UID for the owner
	// reference).
	Node func(ctx context.Context) (*corev1.Node, error)
	// WatchListClient, when set, is asked whether the client can stream
	// lists (client-go's fake clientset cannot); see
	// cache.ToListWatcherWithWatchListSemantics.
	WatchListClient any
	// Active makes the Publisher manage the node's slices from the first
	// offer on, even an empty one (removing slices an earlier run left).
	// Otherwise it stays away from the API server until a device is to be
	// published, and manages the slices from then on: an agent whose
	// rules serve nothing through DRA needs no ResourceSlice permissions
	// (and is not refused any). A slice left by an earlier run whose rules
	// served through DRA would then stay; the agent sets Active when its
	// state directory says an earlier run published one (its sliceMarker).
	Active bool
	// Backoff paces the retries after an API error (default
	// DefaultPublishBackoff).
	Backoff wait.Backoff
	// OnWrite is called after each write ("create", "update", "delete").
	OnWrite func(op string)
	// OnSync is called after each sync with its error (nil: the API
	// server holds what was last offered).
	OnSync func(err error)
	// Logger receives the Publisher's logs.
	Logger *slog.Logger
}

// Publisher keeps the node's ResourceSlice of driver gpu.featureplug.io
// equal to the devices last offered: one slice named SliceName(node),
// spec.nodeName and pool name the node, owned by the Node, created when
// absent, updated when its content differs (compared semantically, as the
// API server stores it), with the pool generation increased on each
// change; other slices of the driver on the node (left by an older
// version) are deleted. It watches the node's slices, so a slice deleted
// or edited behind its back is written again, and retries API errors with
// a jittered, capped backoff, keeping the last offered state. Offering
// devices equal to the published ones writes nothing.
type Publisher struct {
	cfg  PublisherConfig
	name string
	log  *slog.Logger
	kick chan struct{}

	mu sync.Mutex
	// desired is the devices last offered; nil before the first Offer.
	desired []resourceapi.Device
	offered bool
	active  bool

	// Sync goroutine only.
	nodeUID    string
	generation int64
	// lastSent and lastStored are the spec last written and the spec the
	// API server stored for it: a server that drops fields it does not
	// know (a feature gate off) stores less than was sent, and that
	// stored form must count as equal, or every sync would write again.
	lastSent, lastStored *resourceapi.ResourceSliceSpec
	warnedDrop           bool

	// onIdle, when set, is called each time Run passes over an offer it
	// need not publish (inactive, or nothing offered): a test hook.
	onIdle func()
}

// NewPublisher returns a Publisher; nothing happens until Run.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("DRA publisher: no node name")
	}
	if cfg.Slices == nil || cfg.Node == nil {
		return nil, errors.New("DRA publisher: no API client")
	}
	if cfg.Backoff.Duration <= 0 {
		cfg.Backoff = DefaultPublishBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Publisher{cfg: cfg, name: SliceName(cfg.NodeName), log: cfg.Logger, kick: make(chan struct{}, 1), active: cfg.Active}, nil
}

// SliceName is the name of the node's ResourceSlice:
// "<node>-gpu.featureplug.io", with the node name shortened and a hash
// added when that would be longer than a name may be.
func SliceName(node string) string {
	const suffix = "-" + DriverName
	const maxLen = 253
	if len(node)+len(suffix) <= maxLen {
		return node + suffix
	}
	sum := sha256.Sum256([]byte(node))
	h := hex.EncodeToString(sum[:4])
	keep := strings.TrimRight(node[:maxLen-len(suffix)-len(h)-1], ".-")
	return keep + "-" + h + suffix
}

// Name returns the name of the slice the Publisher writes.
func (p *Publisher) Name() string { return p.name }

// Offered returns how many devices the latest offer holds.
func (p *Publisher) Offered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.desired)
}

// Offer makes devs the devices to publish (nil or empty: no slice). It
// does not block; the latest offer wins.
func (p *Publisher) Offer(devs []resourceapi.Device) {
	p.mu.Lock()
	if p.offered && DevicesEqual(p.desired, devs) {
		// Published already, or being published; the watch restores
		// what others change.
		p.mu.Unlock()
		return
	}
	p.desired = devs
	p.offered = true
	if len(devs) > 0 {
		p.active = true
	}
	p.mu.Unlock()
	p.poke()
}

func (p *Publisher) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// state returns what to publish.
func (p *Publisher) state() (devs []resourceapi.Device, offered, active bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.desired, p.offered, p.active
}

// Run publishes until ctx ends. It returns nil when ctx ends: API errors
// are retried, never returned.
func (p *Publisher) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait() // the watch ends with ctx
	watching := false
	backoff := p.cfg.Backoff
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.kick:
		case <-retry:
		}
		retry = nil
		_, offered, active := p.state()
		if !active || !offered {
			if p.onIdle != nil {
				p.onIdle()
			}
			continue
		}
		if !watching {
			watching = true
			wg.Go(func() { p.watch(ctx) })
		}
		err := p.sync(ctx)
		if p.cfg.OnSync != nil {
			p.cfg.OnSync(err)
		}
		if err == nil {
			backoff = p.cfg.Backoff
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		delay := backoff.Step()
		p.log.Warn("publishing the ResourceSlice failed; keeping the last state and retrying", "slice", p.name, "retryIn", delay.Round(time.Millisecond), "err", err)
		retry = time.After(delay)
	}
}

// selector selects the node's slices of the driver.
func (p *Publisher) selector() string {
	return fields.Set{
		resourceapi.ResourceSliceSelectorNodeName: p.cfg.NodeName,
		resourceapi.ResourceSliceSelectorDriver:   DriverName,
	}.String()
}

// watch keeps an informer on the node's slices and pokes a sync on every
// change, so that a slice deleted or edited behind the Publisher's back
// is restored (and the echo of its own writes compares equal and writes
// nothing). One list and one watch with a field selector; no resync.
func (p *Publisher) watch(ctx context.Context) {
	sel := p.selector()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return p.cfg.Slices.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return p.cfg.Slices.Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, p.cfg.WatchListClient),
		&resourceapi.ResourceSlice{}, cache.SharedIndexInformerOptions{ResyncPeriod: 0})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.poke() },
		UpdateFunc: func(any, any) { p.poke() },
		DeleteFunc: func(any) { p.poke() },
	})
	inf.RunWithContext(ctx)
}

// sync makes the API server hold the desired state: it lists the node's
// slices (a fresh read, not a cache that may lag the Publisher's own
// writes) and writes only what differs.
func (p *Publisher) sync(ctx context.Context) error {
	devs, _, _ := p.state()
	list, err := p.cfg.Slices.List(ctx, metav1.ListOptions{FieldSelector: p.selector()})
	if err != nil {
		return fmt.Errorf("listing the ResourceSlices of node %s: %w", p.cfg.NodeName, err)
	}
	var ours *resourceapi.ResourceSlice
	var errs []error
	for i := range list.Items {
		s := &list.Items[i]
		// The field selector is the server's; check again (a fake
		// client ignores it).
		if s.Spec.Driver != DriverName || ptr.Deref(s.Spec.NodeName, "") != p.cfg.NodeName {
			continue
		}
		p.generation = max(p.generation, s.Spec.Pool.Generation)
		if s.Name == p.name && len(devs) > 0 {
			ours = s
			continue
		}
		if err := p.cfg.Slices.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting ResourceSlice %s: %w", s.Name, err))
			continue
		}
		p.wrote("delete")
		p.log.Info("deleted a ResourceSlice the node no longer needs", "slice", s.Name, "devices", len(s.Spec.Devices))
	}
	if len(devs) == 0 {
		return errors.Join(errs...)
	}
	want := p.desiredSpec(devs)
	// The Node's UID for the owner reference, read each sync (from the
	// agent's Node cache: no request in a steady state), so a Node
	// deleted and registered again owns the slice anew instead of the
	// garbage collector deleting it over and over.
	if err := p.readNodeUID(ctx); err != nil {
		return errors.Join(append(errs, err)...)
	}
	if ours != nil {
		if p.same(&ours.Spec, &want) && p.ownedByNode(ours) {
			return errors.Join(errs...)
		}
		next := ours.DeepCopy()
		p.generation++
		want.Pool.Generation = p.generation
		keepTaintTimes(want.Devices, ours.Spec.Devices)
		next.Spec = want
		next.OwnerReferences = p.ownerRefs()
		stored, err := p.cfg.Slices.Update(ctx, next, metav1.UpdateOptions{})
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("updating ResourceSlice %s: %w", p.name, err))...)
		}
		p.stored(&want, stored)
		p.wrote("update")
		p.log.Info("ResourceSlice updated", "slice", p.name, "devices", len(want.Devices), "generation", p.generation)
		return errors.Join(errs...)
	}
	p.generation++
	want.Pool.Generation = p.generation
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, OwnerReferences: p.ownerRefs()},
		Spec:       want,
	}
	stored, err := p.cfg.Slices.Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("creating ResourceSlice %s: %w", p.name, err))...)
	}
	p.stored(&want, stored)
	p.wrote("create")
	p.log.Info("ResourceSlice created", "slice", p.name, "devices", len(want.Devices), "generation", p.generation)
	return errors.Join(errs...)
}

func (p *Publisher) wrote(op string) {
	if p.cfg.OnWrite != nil {
		p.cfg.OnWrite(op)
	}
}

// desiredSpec is the slice's spec for devs, generation aside.
func (p *Publisher) desiredSpec(devs []resourceapi.Device) resourceapi.ResourceSliceSpec {
	node := p.cfg.NodeName
	out := make([]resourceapi.Device, len(devs))
	for i := range devs {
		devs[i].DeepCopyInto(&out[i])
	}
	return resourceapi.ResourceSliceSpec{
		Driver:   DriverName,
		Pool:     resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
		NodeName: &node,
		Devices:  out,
	}
}

// same reports whether the stored spec have already publishes want: equal
// devices (a taint's TimeAdded, which the server sets, aside), driver,
// node and pool (its generation aside), or exactly what the server stored
// the last time it was sent want.
func (p *Publisher) same(have, want *resourceapi.ResourceSliceSpec) bool {
	if have.Driver != want.Driver || ptr.Deref(have.NodeName, "") != ptr.Deref(want.NodeName, "") ||
		have.Pool.Name != want.Pool.Name || have.Pool.ResourceSliceCount != want.Pool.ResourceSliceCount ||
		have.NodeSelector != nil || ptr.Deref(have.AllNodes, false) || have.PerDeviceNodeSelection != nil ||
		len(have.SharedCounters) > 0 || have.PartitionTypeAttribute != nil || len(have.SkipNodeOperations) > 0 {
		return false
	}
	if DevicesEqual(have.Devices, want.Devices) {
		return true
	}
	return p.lastSent != nil && p.lastStored != nil &&
		DevicesEqual(p.lastSent.Devices, want.Devices) && DevicesEqual(p.lastStored.Devices, have.Devices)
}

// stored remembers what the server stored for sent, and warns once when
// it dropped fields (an API server with a DRA feature gate off).
func (p *Publisher) stored(sent *resourceapi.ResourceSliceSpec, got *resourceapi.ResourceSlice) {
	if got == nil {
		return
	}
	s := sent.DeepCopy()
	p.lastSent, p.lastStored = s, got.Spec.DeepCopy()
	if !DevicesEqual(s.Devices, got.Spec.Devices) && !p.warnedDrop {
		p.warnedDrop = true
		p.log.Warn("the API server stored the ResourceSlice without some of its fields (is a DRA feature gate such as DRADeviceTaints or DRAConsumableCapacity off?)", "slice", p.name)
	}
}

// ownedByNode reports whether s has the Node as its owner.
func (p *Publisher) ownedByNode(s *resourceapi.ResourceSlice) bool {
	for _, o := range s.OwnerReferences {
		if o.APIVersion == "v1" && o.Kind == "Node" && o.Name == p.cfg.NodeName && string(o.UID) == p.nodeUID {
			return true
		}
	}
	return false
}

// readNodeUID reads the Node's UID for the owner reference.
func (p *Publisher) readNodeUID(ctx context.Context) error {
	n, err := p.cfg.Node(ctx)
	if err != nil {
		return fmt.Errorf("reading Node %s for the ResourceSlice's owner: %w", p.cfg.NodeName, err)
	}
	if n.UID == "" {
		return fmt.Errorf("node %s has no UID yet", p.cfg.NodeName)
	}
	p.nodeUID = string(n.UID)
	return nil
}

func (p *Publisher) ownerRefs() []metav1.OwnerReference {
	return []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Node", Name: p.cfg.NodeName, UID: types.UID(p.nodeUID), Controller: ptr.To(true),
	}}
}

// keepTaintTimes copies the TimeAdded of a taint the stored device already
// has (same key, value and effect) into want, so an update does not move
// it.
func keepTaintTimes(want, have []resourceapi.Device) {
	byName := make(map[string]*resourceapi.Device, len(have))
	for i := range have {
		byName[have[i].Name] = &have[i]
	}
	for i := range want {
		h := byName[want[i].Name]
		if h == nil {
			continue
		}
		for j := range want[i].Taints {
			t := &want[i].Taints[j]
			if t.TimeAdded != nil {
				continue
			}
			k := slices.IndexFunc(h.Taints, func(o resourceapi.DeviceTaint) bool {
				return o.Key == t.Key && o.Value == t.Value && o.Effect == t.Effect
			})
			if k >= 0 && h.Taints[k].TimeAdded != nil {
				t.TimeAdded = h.Taints[k].TimeAdded.DeepCopy()
			}
		}
	}
}

// devicesSemantic is apimachinery's semantic equality (quantities by
// value) with one difference: a taint without TimeAdded equals the same
// taint with one, since the API server sets it.
var devicesSemantic = func() conversion.Equalities {
	e := equality.Semantic.Copy()
	if err := e.AddFunc(func(a, b resourceapi.DeviceTaint) bool {
		if a.TimeAdded != nil && b.TimeAdded != nil && !a.TimeAdded.Equal(b.TimeAdded) {
			return false
		}
		return a.Key == b.Key && a.Value == b.Value && a.Effect == b.Effect
	}); err != nil {
		panic(fmt.Sprintf("dra: taint equality: %v", err)) // static types: cannot fail
	}
	return e
}()

// DevicesEqual reports whether two device lists are the same as the API
// server stores them: semantically equal (quantities by value, a nil
// map or list equal to an empty one), a taint's TimeAdded ignored unless
// both have one.
func DevicesEqual(a, b []resourceapi.Device) bool {
	// reflect.DeepEqual first: two builds of the same plan are equal
	// field by field, and it is several times cheaper than the semantic
	// comparison (BenchmarkDevicesEqual).
	return reflect.DeepEqual(a, b) || devicesSemantic.DeepEqual(a, b)
}
