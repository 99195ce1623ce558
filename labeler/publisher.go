package labeler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// Content is what publishers publish for one node: the NFD features (what
// NodeFeatureRules and featureplug's rules match) and the labels nfd-master
// puts on the Node.
type Content struct {
	// Features are the node's NFD features; nil publishes none.
	Features *nfdv1alpha1.Features
	// Labels are the node labels, keyed by label key.
	Labels map[string]string
	// Annotations go on the NodeFeature object (the rules digest and the
	// served resources: served.go); other
	// publishers ignore them.
	Annotations map[string]string
}

// NewContent computes the Content for an Inventory and a Plan (nil when no
// rules are loaded yet): discovery.Features and Labels.
func NewContent(inv *discovery.Inventory, plan *plan.Plan, opts LabelOptions) Content {
	return Content{Features: discovery.Features(inv), Labels: Labels(inv, plan, opts)}
}

// Publisher publishes a node's Content somewhere. Implementations write only
// when the content differs from what is already published, so calling
// Publish again with the same Content is cheap, and they are safe for
// concurrent use.
type Publisher interface {
	Publish(ctx context.Context, c Content) error
}

// WriteLabels writes labels as sorted key=value lines, the format of
// nfd-worker feature files and of `featureplug discover -o labels`.
// A key or value that would break that format (a newline, '=' in the key, a
// key starting with '#') is an error naming the key.
func WriteLabels(w io.Writer, labels map[string]string) error {
	var b bytes.Buffer
	if err := formatLabels(&b, labels); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

func formatLabels(b *bytes.Buffer, labels map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		v := labels[k]
		switch {
		case k == "" || strings.ContainsAny(k, "=\n\r") || strings.HasPrefix(strings.TrimSpace(k), "#"):
			return fmt.Errorf("label key %q cannot be written as a key=value line", k)
		case strings.ContainsAny(v, "\n\r"):
			return fmt.Errorf("label %q: value %q contains a line break", k, v)
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
		b.WriteByte('\n')
	}
	return nil
}

// Offer hands c to a Loop through ch without blocking: when ch (make it
// with a buffer of 1) already holds an older Content, that one is dropped,
// since the Loop only ever needs the latest. It is meant for one producer
// per channel. On an unbuffered channel Offer blocks until the Loop
// receives.
func Offer(ch chan Content, c Content) {
	if cap(ch) == 0 {
		ch <- c
		return
	}
	for {
		select {
		case ch <- c:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}

// PublishMode says where features and labels go.
type PublishMode string

// Publish modes.
const (
	PublishNodeFeature PublishMode = "nodefeature"
	PublishFile        PublishMode = "file"
	PublishStdout      PublishMode = "stdout"
	PublishNone        PublishMode = "none"
)

// PublisherConfig says which publisher NewPublisher makes.
type PublisherConfig struct {
	// Mode is where the content goes.
	Mode PublishMode
	// NodeName and Namespace name the NodeFeature (PublishNodeFeature).
	NodeName, Namespace string
	// NFD, Node and Owners reach the API server (PublishNodeFeature; nil
	// NFD: there is none); see NodeFeatureConfig.
	NFD    NFDClient
	Node   func(ctx context.Context) (*corev1.Node, error)
	Owners func(ctx context.Context) ([]metav1.OwnerReference, error)
	// FeaturesFile is the nfd-worker feature file (PublishFile).
	FeaturesFile string
	// Stdout takes the labels (PublishStdout).
	Stdout io.Writer
	// Logger receives the publisher's logs.
	Logger *slog.Logger
}

// NewPublisher makes the publisher of c.Mode; PublishNone gives none (nil,
// nil). A mode without what it needs is an error naming the flag.
func NewPublisher(c PublisherConfig) (Publisher, error) {
	switch c.Mode {
	case PublishNodeFeature:
		if c.NFD == nil {
			return nil, errors.New("--publish nodefeature needs an API server (in-cluster or --kubeconfig)")
		}
		if c.Namespace == "" {
			return nil, errors.New("--publish nodefeature: --namespace is empty (set it or POD_NAMESPACE)")
		}
		p, err := NewNodeFeaturePublisher(NodeFeatureConfig{NodeName: c.NodeName, Namespace: c.Namespace, NFD: c.NFD,
			Node: c.Node, Owners: c.Owners, Logger: c.Logger})
		if err != nil {
			return nil, err
		}
		return p, nil
	case PublishFile:
		p, err := NewFilePublisher(FileConfig{Path: c.FeaturesFile, Logger: c.Logger})
		if err != nil {
			return nil, err
		}
		return p, nil
	case PublishStdout:
		if c.Stdout == nil {
			return nil, errors.New("--publish stdout: no output")
		}
		p, err := NewWriterPublisher(c.Stdout, FormatLabels)
		if err != nil {
			return nil, err
		}
		return p, nil
	case PublishNone:
		return nil, nil
	default:
		return nil, fmt.Errorf("--publish: %q is not a mode (use nodefeature, file, stdout or none)", c.Mode)
	}
}
