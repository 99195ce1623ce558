package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/cmd/internal/kube"
	"github.com/featureplug/featureplug/labeler"
)

// Where the manifests install the agent's rules (manifests/base).
const (
	defaultRulesNamespace = "featureplug"
	defaultRulesConfigMap = "featureplug-rules"
	defaultRulesKey       = "rules.yaml"
)

// clusterReader is what `rules explain --node` and `rules diff` read from
// the cluster. Everything they need goes through it, so the API client
// behind it (client-go's typed clientsets today) can be swapped without
// touching the commands, and tests hand them objects directly.
type clusterReader interface {
	// Nodes lists the Nodes a label selector selects ("" selects all).
	Nodes(ctx context.Context, selector string) ([]corev1.Node, error)
	// Node reads one Node.
	Node(ctx context.Context, name string) (*corev1.Node, error)
	// NodeFeatures lists featureplug's NodeFeatures in every namespace:
	// of one node, or of every node when node is "".
	NodeFeatures(ctx context.Context, node string) ([]nfdv1alpha1.NodeFeature, error)
	// ConfigMap reads a ConfigMap.
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	// DeviceClasses lists the cluster's DRA DeviceClasses.
	DeviceClasses(ctx context.Context) ([]resourcev1.DeviceClass, error)
}

// clusterFlags are the flags of the commands that read the cluster.
type clusterFlags struct {
	kubeconfig   string
	context      string
	namespace    string
	configMap    string
	configMapKey string
	timeout      time.Duration
}

func (f *clusterFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the in-cluster configuration)")
	fs.StringVar(&f.context, "context", "", "kubeconfig context (default: the current context)")
	fs.StringVar(&f.namespace, "namespace", defaultRulesNamespace, "namespace of the agents' rules ConfigMap")
	fs.StringVar(&f.configMap, "configmap", defaultRulesConfigMap, "the agents' rules ConfigMap, read when no rules file says otherwise")
	fs.StringVar(&f.configMapKey, "configmap-key", defaultRulesKey, "the key of the rules file in the ConfigMap")
	fs.DurationVar(&f.timeout, "request-timeout", 30*time.Second, "how long to wait for the API server, all requests together")
}

// reader connects to the API server the flags name.
func (f *clusterFlags) reader() (clusterReader, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: f.context}).ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		return nil, errors.New("no cluster to read: no kubeconfig (give --kubeconfig or set $KUBECONFIG, or write ~/.kube/config) and not running in a cluster")
	}
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "featureplug/" + version
	// Listing every NodeFeature of a large cluster is one request, but a
	// big one; the client's default rate limit is not what slows it.
	cfg.QPS, cfg.Burst = 50, 100
	// package kube, not client-go's clientsets: they would link every
	// API group into the agent's binary (docs/performance.md).
	api, err := kube.New(cfg)
	if err != nil {
		return nil, err
	}
	return &kubeReader{api: api}, nil
}

// kubeReader is a clusterReader over featureplug's API client.
type kubeReader struct {
	api kube.Interface
}

var _ clusterReader = (*kubeReader)(nil)

// Nodes implements clusterReader.
func (r *kubeReader) Nodes(ctx context.Context, selector string) ([]corev1.Node, error) {
	list, err := r.api.Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("listing Nodes (selector %q): %w", selector, err)
	}
	return list.Items, nil
}

// Node implements clusterReader.
func (r *kubeReader) Node(ctx context.Context, name string) (*corev1.Node, error) {
	n, err := r.api.Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Node %s: %w", name, err)
	}
	return n, nil
}

// NodeFeatures implements clusterReader.
func (r *kubeReader) NodeFeatures(ctx context.Context, node string) ([]nfdv1alpha1.NodeFeature, error) {
	sel := labels.Set{labeler.ManagedByLabel: labeler.ManagedByValue}
	if node != "" {
		sel[labeler.NodeNameLabel] = node
	}
	list, err := r.api.NodeFeatures(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("listing featureplug's NodeFeatures (%s): %w", sel, err)
	}
	return list.Items, nil
}

// ConfigMap implements clusterReader.
func (r *kubeReader) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	cm, err := r.api.ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", namespace, name, err)
	}
	return cm, nil
}

// DeviceClasses implements clusterReader.
func (r *kubeReader) DeviceClasses(ctx context.Context) ([]resourcev1.DeviceClass, error) {
	list, err := r.api.DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing DeviceClasses: %w", err)
	}
	return list.Items, nil
}
