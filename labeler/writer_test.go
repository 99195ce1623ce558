package labeler

import (
	"bytes"
	"context"
	"strings"
	"testing"

	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
	"sigs.k8s.io/yaml"
)

func TestWriterPublisherLabels(t *testing.T) {
	var out bytes.Buffer
	pub, err := NewWriterPublisher(&out, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := Content{Labels: map[string]string{"b": "2", "a": "1"}}
	for range 3 {
		if err := pub.Publish(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if got := out.String(); got != "a=1\nb=2\n" {
		t.Errorf("printed %q, want the labels once, sorted", got)
	}
	if err := pub.Publish(ctx, Content{Labels: map[string]string{"a": "3"}}); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "a=1\nb=2\na=3\n" {
		t.Errorf("printed %q after a change, want the new labels appended", got)
	}
}

func TestWriterPublisherYAML(t *testing.T) {
	var out bytes.Buffer
	pub, err := NewWriterPublisher(&out, FormatYAML)
	if err != nil {
		t.Fatal(err)
	}
	c := testContent()
	if err := pub.Publish(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	var spec nfdv1alpha1.NodeFeatureSpec
	if err := yaml.Unmarshal(bytes.TrimPrefix(out.Bytes(), []byte("---\n")), &spec); err != nil {
		t.Fatalf("output is not a NodeFeature spec: %v\n%s", err, out.String())
	}
	if spec.Labels["nvidia.com/gpu.count"] != "8" || len(spec.Features.Instances["nvidia.gpu"].Elements) != 8 {
		t.Errorf("decoded spec lacks the labels or features:\n%s", out.String())
	}
}

func TestNewWriterPublisherBadFormat(t *testing.T) {
	if _, err := NewWriterPublisher(&bytes.Buffer{}, "json"); err == nil || !strings.Contains(err.Error(), `"json"`) {
		t.Errorf("error = %v, want one naming the format", err)
	}
}
