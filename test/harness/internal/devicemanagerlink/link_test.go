package devicemanagerlink

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
)

// TestNewManagerListensAtSocketPath fails if the linked constructor's
// signature or behaviour drifted from the pinned k8s.io/kubernetes: the
// manager must serve its registration socket where it was told to.
func TestNewManagerListensAtSocketPath(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	logger := klog.Background()
	m, err := NewManager(logger, sock, nil, topologymanager.NewFakeManager(logger))
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	if err := m.Start(logger, nil, nil, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer m.Stop(logger)
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatalf("registration socket: %v", err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("%s has mode %v, want a unix socket", sock, fi.Mode())
	}
}
