package labeler

import (
	"reflect"
	"testing"
)

// TestWithAnnotations: featureplug's annotations (featureplug.io/) are
// replaced as a whole, others' kept.
func TestWithAnnotations(t *testing.T) {
	existing := map[string]string{"featureplug.io/rules-digest": "sha256:old", "featureplug.io/gone": "x", "other.io/keep": "y"}
	got := withAnnotations(existing, map[string]string{"featureplug.io/rules-digest": "sha256:new"})
	want := map[string]string{"featureplug.io/rules-digest": "sha256:new", "other.io/keep": "y"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("withAnnotations = %v, want %v", got, want)
	}
	if existing["featureplug.io/rules-digest"] != "sha256:old" {
		t.Error("withAnnotations changed its argument")
	}
	if got := withAnnotations(map[string]string{"featureplug.io/a": "1"}, nil); got != nil {
		t.Errorf("no annotations left: %v, want nil", got)
	}
}
