// Package kube is featureplug's Kubernetes API client: REST clients for the
// few resources featureplug reads and writes (core/v1 Nodes, Events,
// ConfigMaps and Pods, NFD's nfd.k8s-sigs.io/v1alpha1 NodeFeatures, and
// resource.k8s.io/v1 ResourceSlices, ResourceClaims and DeviceClasses) over
// one HTTP client, with a scheme that holds only those API groups.
//
// Why by hand rather than client-go's clientsets (a measured reason, see
// docs/performance.md): k8s.io/client-go/kubernetes links a typed client and
// apply configurations for every built-in API group, and its scheme package
// registers all of them when the process starts (the costliest package
// initializer of the agent: ~670 kB and ~5,700 allocations before main).
// NFD's generated clientset, and even its typed NodeFeature client, import
// client-go's discovery package through its apply configurations, which
// imports that scheme again. The requests themselves are the ones client-go's
// generated clients make (gentype): the same REST client, parameter codec
// and error handling, so errors (NotFound, a missing CRD) read the same.
//
// Interface is what the agent and the commands use; *Client implements it
// and package kube/kubeclientset adapts client-go's clientsets (and so their
// fakes) to it for tests and tools. Each client interface is declared once,
// by the package that uses it: labeler.NodeFeatures, dra.ResourceSlices and
// dra.ResourceClaims there, events.Events in the Event recorder's
// package, the others (Nodes, ConfigMaps, Pods, DeviceClasses) here.
// Beside the client is what the daemon builds on it: the watch of its own
// Node (NodeWatch) and the owner references of its NodeFeature
// (OwnerResolver).
package kube

import (
	"context"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/cmd/internal/events"
	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/plugin/dra"
)

// Interface is the API server as featureplug uses it.
type Interface interface {
	// Nodes reads and watches Nodes.
	Nodes() Nodes
	// Events creates and patches core/v1 Events in a namespace (the
	// agent's Event recorder, cmd/internal/events).
	Events(namespace string) events.Events
	// NodeFeatures reads, lists and patches NFD NodeFeatures in a
	// namespace ("" lists every namespace).
	NodeFeatures(namespace string) labeler.NodeFeatures
	// ConfigMaps reads ConfigMaps in a namespace.
	ConfigMaps(namespace string) ConfigMaps
	// Pods reads Pods in a namespace (the agent's own, for the
	// NodeFeature's owner references).
	Pods(namespace string) Pods
	// ResourceSlices reads, watches and writes resource.k8s.io/v1
	// ResourceSlices (the DRA sink's; resourceslices.go).
	ResourceSlices() dra.ResourceSlices
	// ResourceClaims reads resource.k8s.io/v1 ResourceClaims in a
	// namespace (the DRA driver's kubelet side; resourceclaims.go).
	ResourceClaims(namespace string) dra.ResourceClaims
	// DeviceClasses lists resource.k8s.io/v1 DeviceClasses (`rules diff`;
	// deviceclasses.go).
	DeviceClasses() DeviceClasses
}

// Nodes is the part of client-go's typed NodeInterface featureplug uses;
// that interface satisfies it.
type Nodes interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// ConfigMaps is the part of client-go's typed ConfigMapInterface
// featureplug uses; that interface satisfies it.
type ConfigMaps interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.ConfigMap, error)
}

// Pods is the part of client-go's typed PodInterface featureplug uses;
// that interface satisfies it.
type Pods interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error)
}

// Scheme holds the types of the API groups the Client speaks: core/v1,
// nfd.k8s-sigs.io/v1alpha1 and resource.k8s.io/v1 (with the meta/v1
// options of each). It is built on first use, not at package
// initialization.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	// Both AddToScheme register meta/v1's options for their group version.
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, nfdv1alpha1.AddToScheme, resourcev1.AddToScheme} {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("kube: building the scheme: %v", err)) // static types: cannot fail
		}
	}
	return s
}

// Client is an Interface over the API server a rest.Config names.
type Client struct {
	core, nfd rest.Interface
	// resource speaks resource.k8s.io/v1 (DRA: ResourceSlices,
	// ResourceClaims, DeviceClasses).
	resource rest.Interface
	params   runtime.ParameterCodec
}

var _ Interface = (*Client)(nil)

// New returns a Client for cfg, with an HTTP client of its own (shared by
// both API groups).
func New(cfg *rest.Config) (*Client, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	return NewForConfigAndClient(cfg, hc)
}

// NewForConfigAndClient returns a Client for cfg over hc.
func NewForConfigAndClient(cfg *rest.Config, hc *http.Client) (*Client, error) {
	scheme := Scheme()
	codecs := serializer.NewCodecFactory(scheme)
	core, err := restClient(cfg, hc, codecs, corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, fmt.Errorf("core/v1 API client: %w", err)
	}
	nfd, err := restClient(cfg, hc, codecs, nfdv1alpha1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, fmt.Errorf("%s API client: %w", nfdv1alpha1.SchemeGroupVersion, err)
	}
	resource, err := restClient(cfg, hc, codecs, resourcev1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, fmt.Errorf("%s API client: %w", resourcev1.SchemeGroupVersion, err)
	}
	return &Client{core: core, nfd: nfd, resource: resource, params: runtime.NewParameterCodec(scheme)}, nil
}

// restClient is a REST client of one group version, as client-go's
// generated clients configure theirs (JSON on the wire).
func restClient(cfg *rest.Config, hc *http.Client, codecs serializer.CodecFactory, gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = apiPath
	c.NegotiatedSerializer = codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientForConfigAndClient(c, hc)
}

// timeout is a list or watch request's own timeout (TimeoutSeconds).
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

// Nodes implements Interface.
func (c *Client) Nodes() Nodes { return nodes{c} }

type nodes struct{ c *Client }

func (n nodes) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error) {
	out := &corev1.Node{}
	err := n.c.core.Get().Resource("nodes").Name(name).VersionedParams(&opts, n.c.params).Do(ctx).Into(out)
	return out, err
}

func (n nodes) List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	out := &corev1.NodeList{}
	err := n.c.core.Get().Resource("nodes").VersionedParams(&opts, n.c.params).Timeout(timeout(opts)).Do(ctx).Into(out)
	return out, err
}

func (n nodes) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return n.c.core.Get().Resource("nodes").VersionedParams(&opts, n.c.params).Timeout(timeout(opts)).Watch(ctx)
}

// Events implements Interface.
func (c *Client) Events(namespace string) events.Events { return eventClient{c, namespace} }

type eventClient struct {
	c  *Client
	ns string
}

func (e eventClient) Create(ctx context.Context, ev *corev1.Event, opts metav1.CreateOptions) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := e.c.core.Post().Namespace(e.ns).Resource("events").
		VersionedParams(&opts, e.c.params).Body(ev).Do(ctx).Into(out)
	return out, err
}

func (e eventClient) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := e.c.core.Patch(pt).Namespace(e.ns).Resource("events").Name(name).
		SubResource(subresources...).VersionedParams(&opts, e.c.params).Body(data).Do(ctx).Into(out)
	return out, err
}

// NodeFeatures implements Interface.
func (c *Client) NodeFeatures(namespace string) labeler.NodeFeatures {
	return nodeFeatures{c, namespace}
}

type nodeFeatures struct {
	c  *Client
	ns string
}

func (n nodeFeatures) Get(ctx context.Context, name string, opts metav1.GetOptions) (*nfdv1alpha1.NodeFeature, error) {
	out := &nfdv1alpha1.NodeFeature{}
	err := n.c.nfd.Get().NamespaceIfScoped(n.ns, n.ns != "").Resource("nodefeatures").Name(name).
		VersionedParams(&opts, n.c.params).Do(ctx).Into(out)
	return out, err
}

func (n nodeFeatures) List(ctx context.Context, opts metav1.ListOptions) (*nfdv1alpha1.NodeFeatureList, error) {
	out := &nfdv1alpha1.NodeFeatureList{}
	err := n.c.nfd.Get().NamespaceIfScoped(n.ns, n.ns != "").Resource("nodefeatures").
		VersionedParams(&opts, n.c.params).Timeout(timeout(opts)).Do(ctx).Into(out)
	return out, err
}

func (n nodeFeatures) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*nfdv1alpha1.NodeFeature, error) {
	out := &nfdv1alpha1.NodeFeature{}
	err := n.c.nfd.Patch(pt).NamespaceIfScoped(n.ns, n.ns != "").Resource("nodefeatures").Name(name).
		SubResource(subresources...).VersionedParams(&opts, n.c.params).Body(data).Do(ctx).Into(out)
	return out, err
}

// ConfigMaps implements Interface.
func (c *Client) ConfigMaps(namespace string) ConfigMaps { return configMaps{c, namespace} }

type configMaps struct {
	c  *Client
	ns string
}

func (m configMaps) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.ConfigMap, error) {
	out := &corev1.ConfigMap{}
	err := m.c.core.Get().Namespace(m.ns).Resource("configmaps").Name(name).
		VersionedParams(&opts, m.c.params).Do(ctx).Into(out)
	return out, err
}

// Pods implements Interface.
func (c *Client) Pods(namespace string) Pods { return pods{c, namespace} }

type pods struct {
	c  *Client
	ns string
}

func (p pods) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := p.c.core.Get().Namespace(p.ns).Resource("pods").Name(name).
		VersionedParams(&opts, p.c.params).Do(ctx).Into(out)
	return out, err
}
