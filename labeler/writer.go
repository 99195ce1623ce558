package labeler

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"sync"

	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
	"sigs.k8s.io/yaml"
)

// WriterFormat is how a WriterPublisher prints Content.
type WriterFormat string

// Writer formats.
const (
	// FormatLabels prints the labels as sorted key=value lines.
	FormatLabels WriterFormat = "labels"
	// FormatYAML prints a NodeFeature spec (features and labels) as YAML,
	// one document per publish.
	FormatYAML WriterFormat = "yaml"
)

// WriterPublisher prints Content to an io.Writer, for dry runs. Like the
// other publishers it prints only when the content changed since its last
// print.
type WriterPublisher struct {
	w      io.Writer
	format WriterFormat

	mu   sync.Mutex // guards w and last
	last []byte
}

var _ Publisher = (*WriterPublisher)(nil)

// NewWriterPublisher returns a publisher printing to w in format (empty
// means FormatLabels).
func NewWriterPublisher(w io.Writer, format WriterFormat) (*WriterPublisher, error) {
	switch format {
	case "":
		format = FormatLabels
	case FormatLabels, FormatYAML:
	default:
		return nil, fmt.Errorf("writer publisher: format %q: want %q or %q", format, FormatLabels, FormatYAML)
	}
	return &WriterPublisher{w: w, format: format}, nil
}

// Publish prints c unless it is what was printed last.
func (p *WriterPublisher) Publish(ctx context.Context, c Content) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var b bytes.Buffer
	switch p.format {
	case FormatYAML:
		spec := nfdv1alpha1.NodeFeatureSpec{Labels: maps.Clone(c.Labels)}
		if c.Features != nil {
			spec.Features = *c.Features
		}
		out, err := yaml.Marshal(spec)
		if err != nil {
			return fmt.Errorf("writer publisher: encode YAML: %w", err)
		}
		b.WriteString("---\n")
		b.Write(out)
	default:
		if err := formatLabels(&b, c.Labels); err != nil {
			return fmt.Errorf("writer publisher: %w", err)
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last != nil && bytes.Equal(p.last, b.Bytes()) {
		return nil
	}
	if _, err := p.w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("writer publisher: %w", err)
	}
	p.last = b.Bytes()
	return nil
}
