package deviceplugin

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/connectivity"

	"github.com/featureplug/featureplug/discovery/fswatch"
)

// TestKubeletConnSharedPerSocketFile: registrations to one kubelet.sock
// share a connection; a new kubelet.sock (a restarted kubelet) or a failed
// registration (drop) makes the next one dial afresh, closing the old.
func TestKubeletConnSharedPerSocketFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, KubeletSocket)
	stat := func() fswatch.ID {
		t.Helper()
		id, ok := fswatch.Identify(path)
		if !ok {
			t.Fatalf("%s missing", path)
		}
		return id
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var k kubeletConn
	defer k.close()

	first, err := k.get(path, stat())
	if err != nil {
		t.Fatal(err)
	}
	again, err := k.get(path, stat())
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatal("a second registration to the same kubelet.sock made another connection")
	}

	// The kubelet restarts: its socket is another file.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	second, err := k.get(path, stat())
	if err != nil {
		t.Fatal(err)
	}
	if second == first {
		t.Fatal("a restarted kubelet's socket got the old connection")
	}
	if s := first.GetState(); s != connectivity.Shutdown {
		t.Errorf("the old kubelet's connection is %v, want Shutdown", s)
	}

	// A failed registration drops the connection; dropping a connection
	// already replaced changes nothing.
	k.drop(first)
	if again, _ := k.get(path, stat()); again != second {
		t.Fatal("dropping a replaced connection dropped the current one")
	}
	k.drop(second)
	if s := second.GetState(); s != connectivity.Shutdown {
		t.Errorf("a dropped connection is %v, want Shutdown", s)
	}
	third, err := k.get(path, stat())
	if err != nil {
		t.Fatal(err)
	}
	if third == second {
		t.Fatal("the registration after a failure reused the failed connection")
	}
}
