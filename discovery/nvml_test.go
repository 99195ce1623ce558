package discovery

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenNVMLWithoutDriver(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this machine has an NVIDIA driver")
	}
	lib, closeFn, err := OpenNVML(NVMLOptions{})
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("OpenNVML() = %v, %v; want ErrNoDriver", lib, err)
	}
	if closeFn != nil {
		t.Error("OpenNVML returned a close function on failure")
	}
	for _, want := range []string{"no NVIDIA driver found", "libnvidia-ml.so.1", "--fake-node"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestResolveLibrary(t *testing.T) {
	root := t.TempDir()
	lib := filepath.Join(root, "usr/lib/x86_64-linux-gnu", NVMLLibraryName)
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()

	tests := []struct {
		name    string
		opts    NVMLOptions
		want    string
		wantErr string
	}{
		{name: "default", opts: NVMLOptions{}, want: NVMLLibraryName},
		{name: "host root", opts: NVMLOptions{DriverRoot: "/"}, want: NVMLLibraryName},
		{name: "driver root", opts: NVMLOptions{DriverRoot: root}, want: lib},
		{name: "explicit path wins", opts: NVMLOptions{DriverRoot: empty, LibraryPath: lib}, want: lib},
		{name: "empty driver root", opts: NVMLOptions{DriverRoot: empty}, wantErr: "under driver root \"" + empty + "\""},
		{name: "missing explicit path", opts: NVMLOptions{LibraryPath: filepath.Join(empty, "nope.so")}, wantErr: "nope.so"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.opts.ResolveLibrary()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ResolveLibrary() = %q, %v; want error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ResolveLibrary() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
