package labeler

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

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
