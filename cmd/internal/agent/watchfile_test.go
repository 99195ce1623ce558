package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// configMapVolume lays out dir as the kubelet lays out a ConfigMap volume:
// the file is a symlink through ..data to a timestamped directory, and an
// update swaps ..data atomically.
type configMapVolume struct {
	t   *testing.T
	dir string
	n   int
}

func (v *configMapVolume) publish(content string) {
	v.t.Helper()
	v.n++
	ts := filepath.Join(v.dir, "..2026_11_29_00_00_0"+string(rune('0'+v.n)))
	if err := os.Mkdir(ts, 0o755); err != nil {
		v.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, "rules.yaml"), []byte(content), 0o644); err != nil {
		v.t.Fatal(err)
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	link := filepath.Join(v.dir, "rules.yaml")
	if _, err := os.Lstat(link); os.IsNotExist(err) {
		if err := os.Symlink(filepath.Join("..data", "rules.yaml"), link); err != nil {
			v.t.Fatal(err)
		}
	}
}

func TestWatchFileFollowsConfigMapSwaps(t *testing.T) {
	v := &configMapVolume{t: t, dir: t.TempDir()}
	v.publish("first")
	changed := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- watchFile(ctx, filepath.Join(v.dir, "rules.yaml"), changed, slog.New(slog.DiscardHandler))
	}()
	time.Sleep(50 * time.Millisecond) // let the watch start

	expect := func(what string, want bool) {
		t.Helper()
		select {
		case <-changed:
			if !want {
				t.Errorf("%s: reported a change", what)
			}
		case <-time.After(time.Second):
			if want {
				t.Errorf("%s: no change reported", what)
			}
		}
	}
	v.publish("second")
	expect("a ConfigMap update", true)
	v.publish("second")
	expect("a ConfigMap update with the same content", false)
	if err := os.WriteFile(filepath.Join(v.dir, "unrelated"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	expect("another file in the directory", false)

	cancel()
	if err := <-done; err != nil {
		t.Errorf("watchFile: %v", err)
	}
}

func TestWatchFileFailsOnMissingDirectory(t *testing.T) {
	err := watchFile(context.Background(), "/nonexistent/dir/rules.yaml", make(chan struct{}), slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/dir") {
		t.Errorf("watchFile on a missing directory = %v, want an error naming it", err)
	}
}
