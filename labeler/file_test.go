package labeler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

func TestFilePublisherWrites(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "features.d")
	path := filepath.Join(dir, "featureplug")
	pub, err := NewFilePublisher(FileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := Content{Labels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"}}
	if err := pub.Publish(ctx, c); err != nil {
		t.Fatal(err)
	}
	want := featureFileHeader + "nvidia.com/gpu.count=8\nnvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3\n"
	if got, _ := os.ReadFile(path); string(got) != want {
		t.Errorf("file content\n%s\nwant\n%s", got, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("file mode %v, %v; want 0644", fi.Mode(), err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Errorf("directory holds %v (%v), want only the feature file (no temporary dotfiles left)", entries, err)
	}
}

// TestFilePublisherNoRewrite checks that unchanged content leaves the file
// alone (same inode and mtime), that changed content replaces it through a
// rename (new inode), and that a file removed behind the publisher's back is
// written again.
func TestFilePublisherNoRewrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "featureplug")
	pub, err := NewFilePublisher(FileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := Content{Labels: map[string]string{"a": "1"}}
	if err := pub.Publish(ctx, c); err != nil {
		t.Fatal(err)
	}
	old := time.Unix(1000, 0)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(path)
	for range 5 {
		if err := pub.Publish(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	after, _ := os.Stat(path)
	if !after.ModTime().Equal(old) || !os.SameFile(before, after) {
		t.Errorf("unchanged content rewrote the file (mtime %v)", after.ModTime())
	}
	if s := pub.Stats(); s.Writes() != 1 || s.Unchanged != 5 {
		t.Errorf("stats %+v, want 1 write and 5 unchanged", s)
	}

	if err := pub.Publish(ctx, Content{Labels: map[string]string{"a": "2"}}); err != nil {
		t.Fatal(err)
	}
	changed, _ := os.Stat(path)
	if os.SameFile(before, changed) {
		t.Error("changed content was written in place, not renamed over the file")
	}
	if got, _ := os.ReadFile(path); !strings.Contains(string(got), "a=2\n") {
		t.Errorf("file %q does not hold the new label", got)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, Content{Labels: map[string]string{"a": "2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("removed file not written again: %v", err)
	}
}

func TestFilePublisherSizeLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "featureplug")
	pub, err := NewFilePublisher(FileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{}
	for i := range 1200 {
		labels[fmt.Sprintf("example.com/label-%04d", i)] = strings.Repeat("v", 40)
	}
	err = pub.Publish(context.Background(), Content{Labels: labels})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "65536") {
		t.Fatalf("Publish of a %d-label file: error %v, want one naming the file and the limit", len(labels), err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("oversized content was written (stat: %v)", err)
	}
}

func TestFilePublisherBadLabels(t *testing.T) {
	path := filepath.Join(t.TempDir(), "featureplug")
	pub, err := NewFilePublisher(FileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	for _, labels := range []map[string]string{
		{"a=b": "c"},
		{"#a": "c"},
		{"a": "line\nbreak"},
	} {
		err := pub.Publish(context.Background(), Content{Labels: labels})
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("Publish(%q) error = %v, want one naming the file", labels, err)
		}
	}
}

// TestFilePublisherExpiry checks the expiry directive stays stable between
// publishes (no rewrite) and is renewed once half of it has passed.
func TestFilePublisherExpiry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "featureplug")
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	pub, err := NewFilePublisher(FileConfig{Path: path, Expiry: time.Hour, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := Content{Labels: map[string]string{"a": "1"}}
	publish := func() string {
		t.Helper()
		if err := pub.Publish(ctx, c); err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(path)
		return string(data)
	}
	first := publish()
	if !strings.Contains(first, "\n# +expiry-time=2026-01-02T04:04:05Z\na=1\n") {
		t.Fatalf("file %q lacks the expiry directive before the labels", first)
	}
	clk.SetTime(clk.Now().Add(20 * time.Minute))
	if got := publish(); got != first {
		t.Errorf("expiry renewed too early:\n%s", got)
	}
	clk.SetTime(clk.Now().Add(15 * time.Minute))
	if got := publish(); !strings.Contains(got, "expiry-time=2026-01-02T04:39:05Z") {
		t.Errorf("expiry not renewed after half of it passed:\n%s", got)
	}
	if pub.Stats().Writes() != 2 {
		t.Errorf("stats %+v, want 2 writes", pub.Stats())
	}
}

func TestNewFilePublisherErrors(t *testing.T) {
	for _, cfg := range []FileConfig{
		{Path: "/tmp/.hidden"},
		{Path: "/tmp/x", Expiry: -time.Second},
	} {
		if _, err := NewFilePublisher(cfg); err == nil || !strings.Contains(err.Error(), cfg.Path) {
			t.Errorf("NewFilePublisher(%+v) error = %v, want one naming the path", cfg, err)
		}
	}
	pub, err := NewFilePublisher(FileConfig{})
	if err != nil || pub.Path() != DefaultFeatureFile {
		t.Errorf("default path %q, %v; want %s", pub.Path(), err, DefaultFeatureFile)
	}
}

func BenchmarkFilePublishUnchanged(b *testing.B) {
	pub, err := NewFilePublisher(FileConfig{Path: filepath.Join(b.TempDir(), "featureplug")})
	if err != nil {
		b.Fatal(err)
	}
	inv := a100MixedMIG()
	c := Content{Labels: Labels(inv, mixedPlan(inv), LabelOptions{})}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := pub.Publish(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
}
