package deviceplugin

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestSocketPath(t *testing.T) {
	long := "example.com/" + strings.Repeat("a", 60)
	longDir := "/var/lib/kubelet/" + strings.Repeat("d", 40)
	tests := []struct {
		name, dir, resource, want string
	}{
		{"plain", "/var/lib/kubelet/device-plugins", "nvidia.com/gpu", "/var/lib/kubelet/device-plugins/featureplug-nvidia.com_gpu.sock"},
		{"mig", "/var/lib/kubelet/device-plugins", "nvidia.com/mig-1g.10gb", "/var/lib/kubelet/device-plugins/featureplug-nvidia.com_mig-1g.10gb.sock"},
		{"underscore in name", "/k", "example.com/a_b", "/k/featureplug-example.com_a_b.sock"},
		{"shortened with hash", longDir, long, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SocketPath(tt.dir, tt.resource)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) > maxSocketPath {
				t.Errorf("SocketPath = %q: %d bytes, over the %d-byte limit", got, len(got), maxSocketPath)
			}
			if filepath.Dir(got) != filepath.Clean(tt.dir) {
				t.Errorf("SocketPath = %q, not in %q", got, tt.dir)
			}
			if tt.want != "" && got != tt.want {
				t.Errorf("SocketPath = %q, want %q", got, tt.want)
			}
			if tt.want == "" && !strings.HasSuffix(got, ".sock") {
				t.Errorf("SocketPath = %q, want a .sock name", got)
			}
		})
	}
}

func TestSocketPathUnique(t *testing.T) {
	dir := "/var/lib/kubelet/device-plugins/" + strings.Repeat("x", 20)
	names := []string{
		"example.com/" + strings.Repeat("a", 60) + "1",
		"example.com/" + strings.Repeat("a", 60) + "2",
		"example.com/a-b",
		"example.com/a_b",
		"example.com/a.b",
		"example.co/m_a.b",
	}
	seen := map[string]string{}
	for _, n := range names {
		p, err := SocketPath(dir, n)
		if err != nil {
			t.Fatal(err)
		}
		if other, dup := seen[p]; dup {
			t.Errorf("%q and %q share socket %q", n, other, p)
		}
		seen[p] = n
	}
}

func TestSocketPathDirTooLong(t *testing.T) {
	if _, err := SocketPath("/"+strings.Repeat("d", 100), "a.b/c"); err == nil {
		t.Fatal("SocketPath accepted a directory leaving no room for a socket name")
	}
}
