package labeler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
)

// Labels featureplug puts on its NodeFeature objects.
const (
	// ManagedByLabel with value ManagedByValue marks a NodeFeature as
	// featureplug's; one without it is never overwritten.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of ManagedByLabel.
	ManagedByValue = "featureplug"
	// NodeNameLabel names the node a NodeFeature describes; nfd-master
	// ignores NodeFeatures without it.
	NodeNameLabel = nfdv1alpha1.NodeFeatureObjNodeNameLabel
)

// NodeFeaturePrefix starts the name of every NodeFeature featureplug writes.
const NodeFeaturePrefix = "featureplug-"

// maxObjectNameLength keeps NodeFeature names short enough to also be DNS
// labels and label values, so they fit anywhere an object name is quoted.
const maxObjectNameLength = 63

// ErrCRDMissing is wrapped by publish errors that come from an API server
// that does not serve NFD's NodeFeature API.
var ErrCRDMissing = errors.New("NFD's CRDs are not installed")

// ErrNotOurs is wrapped by publish errors about a NodeFeature with
// featureplug's name that featureplug did not write.
var ErrNotOurs = errors.New("NodeFeature is not managed by featureplug")

// NodeFeatureName returns the name of the NodeFeature featureplug writes for
// a node: featureplug-<node>, or, when that exceeds 63 characters, a
// truncated prefix and a hash of the node name (featureplug-<start>-<hash>),
// which stays unique and valid.
func NodeFeatureName(node string) string {
	name := NodeFeaturePrefix + node
	if len(name) <= maxObjectNameLength {
		return name
	}
	sum := sha256.Sum256([]byte(node))
	hash := hex.EncodeToString(sum[:])[:10]
	keep := strings.TrimRight(name[:maxObjectNameLength-len(hash)-1], "-.")
	return keep + "-" + hash
}

// NodeFeatureConfig configures a NodeFeaturePublisher.
type NodeFeatureConfig struct {
	// NodeName is the Kubernetes Node the features describe.
	NodeName string
	// Namespace is where the NodeFeature lives (the agent's namespace).
	Namespace string
	// NFD is the NFD API client (see NFDClientOf).
	NFD NFDClient
	// Node reads the Node, whose UID the owner reference names (the
	// agent reads it from its Node watch's cache).
	Node func(ctx context.Context) (*corev1.Node, error)
	// Owners, when set, returns the NodeFeature's owner references
	// instead of the Node: the agent's Pod and DaemonSet, as nfd-worker
	// owns its NodeFeature, so that deleting the DaemonSet (uninstalling)
	// garbage-collects the object and nfd-master removes the labels. It is
	// called on every create and when none are cached.
	Owners func(ctx context.Context) ([]metav1.OwnerReference, error)
	// Logger receives create and update messages; nil uses slog.Default().
	Logger *slog.Logger
}

// WriteStats counts what a publisher did with each Publish.
type WriteStats struct {
	// Creates and Updates are writes to the API server. Updates include
	// the patch that removes the managed fields right after a create.
	Creates, Updates uint64
	// Unchanged counts publishes that found the content already there.
	Unchanged uint64
}

// Writes returns the number of writes (creates and updates).
func (s WriteStats) Writes() uint64 { return s.Creates + s.Updates }

// NodeFeaturePublisher publishes a node's Content as one
// nfd.k8s-sigs.io/v1alpha1 NodeFeature object, named NodeFeatureName(node),
// labelled with NodeNameLabel and ManagedByLabel, and owned by the Node
// object (it goes when the node goes and survives agent restarts and
// uninstalls) or by what NodeFeatureConfig.Owners returns (the agent's Pod
// and DaemonSet: it also goes when featureplug is uninstalled).
//
// Publish writes only when the content differs from what it last wrote or
// found in place, and never deletes the object. It creates the object with
// a server-side apply (field manager FieldManager, forced) and changes it
// with JSON merge patches of the difference from the object it last saw,
// conditional on that object's resourceVersion; it keeps the object free
// of managed fields (see update), which would be 18-42 % of its size
// (docs/scale.md).
// Resync (called by the Loop at each resync) checks the object from the
// API server's cache and repairs it. An existing object that is not
// featureplug's is an error wrapping ErrNotOurs; an API server without
// NFD's CRDs gives an error wrapping ErrCRDMissing.
type NodeFeaturePublisher struct {
	node, namespace, name string
	nfd                   NFDClient
	readNode              func(ctx context.Context) (*corev1.Node, error)
	ownersFn              func(ctx context.Context) ([]metav1.OwnerReference, error)
	log                   *slog.Logger

	mu sync.Mutex // serializes Publish; guards owners, applied, cur
	// owners are the owner references applied (the Node, or Config.Owners).
	owners []metav1.OwnerReference
	// cur is the object as last read or written: what the next change
	// is a patch of.
	cur *nfdv1alpha1.NodeFeature
	// applied identifies the content last applied or found in place (see
	// key); "" after a failure, which makes the next Publish read first.
	applied string
	// annotations are the Content's annotations being published.
	annotations map[string]string

	creates, updates, unchanged atomic.Uint64
}

var _ Publisher = (*NodeFeaturePublisher)(nil)

// NewNodeFeaturePublisher checks cfg and returns a publisher. It does not
// talk to the API server.
func NewNodeFeaturePublisher(cfg NodeFeatureConfig) (*NodeFeaturePublisher, error) {
	switch {
	case cfg.NFD == nil:
		return nil, errors.New("NodeFeature publisher: NFD client is nil")
	case cfg.Node == nil:
		return nil, errors.New("NodeFeature publisher: no reader of the Node (Kubernetes client)")
	}
	if errs := content.IsDNS1123Subdomain(cfg.NodeName); len(errs) > 0 {
		return nil, fmt.Errorf("NodeFeature publisher: node name %q: %s", cfg.NodeName, strings.Join(errs, "; "))
	}
	if errs := content.IsLabelValue(cfg.NodeName); len(errs) > 0 {
		return nil, fmt.Errorf("NodeFeature publisher: node name %q cannot be the value of label %s, which nfd-master requires: %s",
			cfg.NodeName, NodeNameLabel, strings.Join(errs, "; "))
	}
	if errs := content.IsDNS1123Label(cfg.Namespace); len(errs) > 0 {
		return nil, fmt.Errorf("NodeFeature publisher: namespace %q: %s", cfg.Namespace, strings.Join(errs, "; "))
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	name := NodeFeatureName(cfg.NodeName)
	return &NodeFeaturePublisher{
		node:      cfg.NodeName,
		namespace: cfg.Namespace,
		name:      name,
		nfd:       cfg.NFD,
		readNode:  cfg.Node,
		ownersFn:  cfg.Owners,
		log:       log.With("nodefeature", cfg.Namespace+"/"+name),
	}, nil
}

// Name returns the NodeFeature's object name.
func (p *NodeFeaturePublisher) Name() string { return p.name }

// Namespace returns the NodeFeature's namespace.
func (p *NodeFeaturePublisher) Namespace() string { return p.namespace }

// Stats returns how many creates, updates and no-op publishes happened.
func (p *NodeFeaturePublisher) Stats() WriteStats {
	return WriteStats{Creates: p.creates.Load(), Updates: p.updates.Load(), Unchanged: p.unchanged.Load()}
}

// FieldManager is the server-side apply field manager of the NodeFeature
// featureplug writes.
const FieldManager = "featureplug"

// Publish makes the NodeFeature hold c, sending nothing when c is what it
// last wrote, and otherwise one merge patch of the difference. The first
// publish, and the first after a failure, reads the object first: to
// refuse one that is not ours, and to write nothing when it already holds
// c (an agent restart writes nothing).
func (p *NodeFeaturePublisher) Publish(ctx context.Context, c Content) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	spec := specOf(c)
	p.annotations = c.Annotations
	if p.applied != "" && p.owners != nil && p.cur != nil {
		if p.key(spec) == p.applied {
			p.unchanged.Add(1)
			return nil
		}
		return p.update(ctx, p.cur, spec)
	}
	return p.verify(ctx, spec, metav1.GetOptions{})
}

// Resync checks the NodeFeature against c and repairs it when it differs
// (edited or deleted behind featureplug's back). It reads the object from
// the API server's watch cache (resourceVersion "0"): no etcd read.
func (p *NodeFeaturePublisher) Resync(ctx context.Context, c Content) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.annotations = c.Annotations
	return p.verify(ctx, specOf(c), metav1.GetOptions{ResourceVersion: "0"})
}

var _ Resyncer = (*NodeFeaturePublisher)(nil)

func specOf(c Content) *nfdv1alpha1.NodeFeatureSpec {
	spec := &nfdv1alpha1.NodeFeatureSpec{Labels: maps.Clone(c.Labels)}
	if c.Features != nil {
		spec.Features = *c.Features.DeepCopy()
	} else {
		spec.Features = *nfdv1alpha1.NewFeatures()
	}
	return spec
}

// verify reads the object, refuses one that is not ours, and applies spec
// unless the object already holds it.
func (p *NodeFeaturePublisher) verify(ctx context.Context, spec *nfdv1alpha1.NodeFeatureSpec, opts metav1.GetOptions) error {
	cur, err := p.nfd(p.namespace).Get(ctx, p.name, opts)
	switch {
	case err == nil:
	case isCRDMissing(err):
		p.applied = ""
		return p.crdMissing(err)
	case apierrors.IsNotFound(err):
		// Read the Node again on every create: a missing object may have
		// been garbage-collected because the Node was re-created with a
		// new UID.
		if _, err := p.ownerRef(ctx, true); err != nil {
			p.applied = ""
			return err
		}
		return p.create(ctx, spec)
	default:
		p.applied = ""
		return p.apiError("get", err)
	}
	if err := p.checkOurs(cur); err != nil {
		p.applied = ""
		return err
	}
	if _, err := p.ownerRef(ctx, false); err != nil {
		p.applied = ""
		return err
	}
	return p.update(ctx, cur, spec)
}

// desired returns cur as featureplug wants it: spec, the two labels, the
// owner references and featureplug's annotations set (others' labels and
// annotations kept), and no managed fields.
func (p *NodeFeaturePublisher) desired(cur *nfdv1alpha1.NodeFeature, spec *nfdv1alpha1.NodeFeatureSpec) *nfdv1alpha1.NodeFeature {
	want := cur.DeepCopy()
	want.Labels = p.objectLabels(want.Labels)
	want.OwnerReferences = p.owners
	want.Spec = *spec
	want.Annotations = withAnnotations(want.Annotations, p.annotations)
	want.ManagedFields = nil
	return want
}

// update makes cur, the object as last read or written, hold spec: nothing
// when it does, else a JSON merge patch of the difference (labels and
// features that went are set to null; instance lists are replaced whole),
// conditional on cur's resourceVersion. Someone else's write in between
// makes the API server answer Conflict: update then reads the object again
// and patches the difference from it, once.
//
// Why a merge patch and not a server-side apply: an apply records every
// field it sets in metadata.managedFields, every spec.labels key once more
// (3.4 KB of the dgx-a100's 18.5 KB, docs/scale.md), stored in etcd, in
// every watch event and in nfd-master's cache. The patch sets
// metadata.managedFields to [{}], which clears them, and an update of an
// object without managed fields records none (k8s.io/apimachinery's
// skipNonAppliedManager), so the object stays without them. The object is
// featureplug's alone (checkOurs), so no other manager's fields are lost.
func (p *NodeFeaturePublisher) update(ctx context.Context, cur *nfdv1alpha1.NodeFeature, spec *nfdv1alpha1.NodeFeatureSpec) error {
	p.applied = ""
	for attempt := 1; ; attempt++ {
		want := p.desired(cur, spec)
		if equality.Semantic.DeepEqual(cur, want) {
			p.cur = cur
			p.applied = p.key(spec)
			p.unchanged.Add(1)
			p.log.Debug("NodeFeature unchanged")
			return nil
		}
		body, err := mergePatch(cur, want)
		if err != nil {
			return fmt.Errorf("update NodeFeature %s/%s: %w", p.namespace, p.name, err)
		}
		obj, err := p.nfd(p.namespace).Patch(ctx, p.name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager})
		switch {
		case err == nil:
		case apierrors.IsConflict(err) && attempt == 1:
			fresh, gerr := p.nfd(p.namespace).Get(ctx, p.name, metav1.GetOptions{})
			if gerr != nil {
				return p.apiError("get", gerr)
			}
			if err := p.checkOurs(fresh); err != nil {
				return err
			}
			p.log.Debug("NodeFeature changed since it was read; patching the difference from what is there now")
			cur = fresh
			continue
		case isCRDMissing(err):
			return p.crdMissing(err)
		default:
			return p.apiError("patch", err)
		}
		p.cur = obj
		p.applied = p.key(spec)
		if obj.ResourceVersion != "" && obj.ResourceVersion == cur.ResourceVersion {
			p.unchanged.Add(1)
			p.log.Debug("NodeFeature unchanged (no-op patch)")
			return nil
		}
		p.updates.Add(1)
		p.log.Info("updated NodeFeature", "labels", len(spec.Labels))
		return nil
	}
}

// mergePatch returns the JSON merge patch (RFC 7386) that turns cur into
// want, conditional on cur's resourceVersion, and clearing the managed
// fields when cur has any.
func mergePatch(cur, want *nfdv1alpha1.NodeFeature) ([]byte, error) {
	from, err := json.Marshal(cur)
	if err != nil {
		return nil, fmt.Errorf("encoding the object: %w", err)
	}
	to, err := json.Marshal(want)
	if err != nil {
		return nil, fmt.Errorf("encoding the object: %w", err)
	}
	diff, err := jsonpatch.CreateMergePatch(from, to)
	if err != nil {
		return nil, fmt.Errorf("computing the merge patch: %w", err)
	}
	var patch map[string]any
	if err := json.Unmarshal(diff, &patch); err != nil {
		return nil, fmt.Errorf("decoding the merge patch: %w", err)
	}
	meta, _ := patch["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	if cur.ResourceVersion != "" {
		meta["resourceVersion"] = cur.ResourceVersion
	}
	if len(cur.ManagedFields) > 0 {
		// [{}] resets them; null or [] would keep the stored ones.
		meta["managedFields"] = []any{map[string]any{}}
	}
	if len(meta) > 0 {
		patch["metadata"] = meta
	}
	return json.Marshal(patch)
}

// create makes the object with a forced server-side apply of spec, the
// two labels, the owner references and the annotations (the NodeFeatures
// client has no create), then clears the managed fields the apply
// recorded: the only time a publish writes twice. When the clearing fails
// it returns an error, so that the publish is retried.
func (p *NodeFeaturePublisher) create(ctx context.Context, spec *nfdv1alpha1.NodeFeatureSpec) error {
	p.applied = ""
	body, err := p.applyBody(spec)
	if err != nil {
		return err
	}
	force := true
	obj, err := p.nfd(p.namespace).Patch(ctx, p.name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
	switch {
	case err == nil:
	case isCRDMissing(err) || (apierrors.IsNotFound(err) && !isNamespaceNotFound(err)):
		return p.crdMissing(err)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("apply NodeFeature %s/%s: namespace %q does not exist: %w", p.namespace, p.name, p.namespace, err)
	default:
		return p.apiError("apply", err)
	}
	p.creates.Add(1)
	p.log.Info("created NodeFeature", "labels", len(spec.Labels))
	p.cur = obj
	p.applied = p.key(spec)
	if len(obj.ManagedFields) == 0 {
		return nil
	}
	body, err = json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": obj.ResourceVersion,
		"managedFields":   []any{map[string]any{}},
	}})
	if err != nil {
		return fmt.Errorf("NodeFeature %s/%s: clearing its managed fields: %w", p.namespace, p.name, err)
	}
	stripped, err := p.nfd(p.namespace).Patch(ctx, p.name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		// The content is published, but the object carries its managed
		// fields (seen at the start of a 1,000-node run, whose API
		// server was too busy for some patches). Failing makes the
		// loop retry soon: the retry reads the object and its merge
		// patch clears them, rather than leaving them for the hourly
		// resync or the next change.
		p.applied = ""
		return fmt.Errorf("NodeFeature %s/%s created, but clearing its managed fields failed: %w", p.namespace, p.name, err)
	}
	p.updates.Add(1)
	p.cur = stripped
	return nil
}

// applyBody is the object featureplug applies, as JSON: the API type with
// its kind, name, namespace, the two labels, the owner reference and spec.
//
// Why not NFD's generated apply configurations (applyconfiguration/nfd/
// v1alpha1): their InstanceFeatureSet drops an empty elements list
// (omitempty), which the CRD requires, so the API server rejects a node
// without MIG devices ("spec.features.instances.nvidia.mig.elements:
// Required value", seen in TestCluster/PublishWithoutMIG). The API type
// sends "elements": [].
func (p *NodeFeaturePublisher) applyBody(spec *nfdv1alpha1.NodeFeatureSpec) ([]byte, error) {
	obj := &nfdv1alpha1.NodeFeature{
		TypeMeta: metav1.TypeMeta{APIVersion: nfdv1alpha1.SchemeGroupVersion.String(), Kind: "NodeFeature"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            p.name,
			Namespace:       p.namespace,
			Labels:          p.objectLabels(nil),
			Annotations:     p.annotations,
			OwnerReferences: p.owners,
		},
		Spec: *spec,
	}
	body, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("apply NodeFeature %s/%s: encoding it: %w", p.namespace, p.name, err)
	}
	return body, nil
}

// key identifies what publishing spec writes (the owner UID and the
// annotations included).
func (p *NodeFeaturePublisher) key(spec *nfdv1alpha1.NodeFeatureSpec) string {
	data, err := json.Marshal(spec) // map keys sorted: deterministic
	if err != nil {
		return ""
	}
	sum := sha256.New()
	sum.Write(data)
	for _, o := range p.owners {
		sum.Write([]byte(o.UID))
	}
	if len(p.annotations) > 0 {
		ann, _ := json.Marshal(p.annotations) // sorted keys
		sum.Write(ann)
	}
	return hex.EncodeToString(sum.Sum(nil))
}

// withAnnotations returns existing with featureplug's annotations (keys
// under featureplug.io/) replaced by ours; others' annotations are kept.
// An apply that no longer carries one of ours removes it, as this does.
func withAnnotations(existing, ours map[string]string) map[string]string {
	out := maps.Clone(existing)
	maps.DeleteFunc(out, func(k, _ string) bool { return strings.HasPrefix(k, "featureplug.io/") })
	if len(ours) > 0 && out == nil {
		out = make(map[string]string, len(ours))
	}
	maps.Copy(out, ours)
	if len(out) == 0 {
		return nil
	}
	return out
}

// checkOurs refuses objects featureplug did not write: without the
// managed-by marker, for another node, or owned by anything but this Node
// or the agent's Pod and DaemonSet (any --owner featureplug can be run
// with; switching between them fixes the references). An owner reference
// with a stale UID is ours and gets fixed.
func (p *NodeFeaturePublisher) checkOurs(obj *nfdv1alpha1.NodeFeature) error {
	if v := obj.Labels[ManagedByLabel]; v != ManagedByValue {
		return fmt.Errorf("NodeFeature %s/%s exists but has label %s=%q, not %q: refusing to overwrite it: %w",
			p.namespace, p.name, ManagedByLabel, v, ManagedByValue, ErrNotOurs)
	}
	if v := obj.Labels[NodeNameLabel]; v != p.node {
		return fmt.Errorf("NodeFeature %s/%s exists but has label %s=%q, not %q: refusing to overwrite it: %w",
			p.namespace, p.name, NodeNameLabel, v, p.node, ErrNotOurs)
	}
	for _, ref := range obj.OwnerReferences {
		if !ownerKinds[ref.APIVersion+" "+ref.Kind] || (ref.Kind == "Node" && ref.Name != p.node) {
			return fmt.Errorf("NodeFeature %s/%s exists but is owned by %s %s %q, not by Node %q: refusing to overwrite it: %w",
				p.namespace, p.name, ref.APIVersion, ref.Kind, ref.Name, p.node, ErrNotOurs)
		}
	}
	return nil
}

// objectLabels returns existing with featureplug's two labels set; other
// labels are kept.
func (p *NodeFeaturePublisher) objectLabels(existing map[string]string) map[string]string {
	l := maps.Clone(existing)
	if l == nil {
		l = make(map[string]string, 2)
	}
	l[NodeNameLabel] = p.node
	l[ManagedByLabel] = ManagedByValue
	return l
}

// ownerKinds are the owners featureplug gives its NodeFeature
// ("apiVersion kind"): the Node, the agent's Pod, its DaemonSet.
var ownerKinds = map[string]bool{"v1 Node": true, "v1 Pod": true, "apps/v1 DaemonSet": true}

// ownerRef returns the owner references: Config.Owners', or the Node's,
// reading the Node when refresh is set or nothing is cached.
func (p *NodeFeaturePublisher) ownerRef(ctx context.Context, refresh bool) ([]metav1.OwnerReference, error) {
	if p.owners != nil && !refresh {
		return p.owners, nil
	}
	if p.ownersFn != nil {
		owners, err := p.ownersFn(ctx)
		switch {
		case err == nil && len(owners) > 0:
			p.owners = owners
			return p.owners, nil
		case apierrors.IsForbidden(err) || apierrors.IsNotFound(err):
			// A configuration the agent cannot fix (no RBAC to read its
			// Pod, a Pod name that does not exist): publishing matters
			// more than who owns the object, so the Node owns it until
			// the agent restarts.
			p.log.Warn("cannot read the NodeFeature's owners; the Node owns it instead (uninstalling featureplug will not remove it)",
				"nodefeature", p.namespace+"/"+p.name, "err", err)
		case err != nil:
			return nil, fmt.Errorf("owner references of NodeFeature %s/%s: %w", p.namespace, p.name, err)
		}
	}
	node, err := p.readNode(ctx)
	if err != nil {
		return nil, fmt.Errorf("get Node %q for the owner reference of NodeFeature %s/%s: %w", p.node, p.namespace, p.name, err)
	}
	if node.UID == "" {
		return nil, fmt.Errorf("get Node %q for the owner reference of NodeFeature %s/%s: the Node has no UID", p.node, p.namespace, p.name)
	}
	blockOwnerDeletion := false
	p.owners = []metav1.OwnerReference{{
		APIVersion:         "v1",
		Kind:               "Node",
		Name:               node.Name,
		UID:                node.UID,
		BlockOwnerDeletion: &blockOwnerDeletion,
	}}
	return p.owners, nil
}

func (p *NodeFeaturePublisher) crdMissing(err error) error {
	return fmt.Errorf("publish NodeFeature %s/%s: %w: the API server does not serve nodefeatures.%s/%s; install node-feature-discovery or apply its nfd-api-crds.yaml (%v)",
		p.namespace, p.name, ErrCRDMissing, nfdv1alpha1.SchemeGroupVersion.Group, nfdv1alpha1.SchemeGroupVersion.Version, err)
}

func (p *NodeFeaturePublisher) apiError(verb string, err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("%s NodeFeature %s/%s: %w (featureplug's RBAC must allow get and patch on nodefeatures.nfd.k8s-sigs.io in namespace %q)",
			verb, p.namespace, p.name, err, p.namespace)
	}
	return fmt.Errorf("%s NodeFeature %s/%s: %w", verb, p.namespace, p.name, err)
}

// isCRDMissing recognizes the API server's answer for a resource it does
// not serve: a RESTMapper "no matches for kind", or a 404 whose body is not
// a Status object (the plain "404 page not found" of an unknown path), which
// client-go reports as NotFound with an UnexpectedServerResponse cause. A
// missing object, by contrast, is a NotFound Status without that cause.
func isCRDMissing(err error) bool {
	if meta.IsNoMatchError(err) {
		return true
	}
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	details := status.Status().Details
	if details == nil {
		return false
	}
	for _, cause := range details.Causes {
		if cause.Type == metav1.CauseTypeUnexpectedServerResponse {
			return true
		}
	}
	return false
}

// isNamespaceNotFound reports a NotFound about the namespace itself.
func isNamespaceNotFound(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	details := status.Status().Details
	return details != nil && details.Kind == "namespaces"
}
