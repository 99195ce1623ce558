package deviceplugin

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/featureplug/featureplug/plugin/kubeletsim"
)

// TestHandoverBetweenTwoManagers: a second manager serving the same
// resource in the same directory takes the next socket slot and registers
// it, leaving the first one's socket, server and stream alone; when the
// first stops it removes only its own socket; a third start after the
// second was killed (its socket left behind, no one listening) takes the
// stale first slot again.
func TestHandoverBetweenTwoManagers(t *testing.T) {
	const res = "nvidia.com/gpu"
	first := startEnv(t, DefaultOptions(), h100Plan(res))
	first.waitRegistered(1, res)
	slot0, _ := slotPath(first.dir, res, 0)
	slot1, _ := slotPath(first.dir, res, 1)
	if first.kubelet.Endpoint(res) != filepath.Base(slot0) {
		t.Fatalf("first endpoint %q, want %q", first.kubelet.Endpoint(res), filepath.Base(slot0))
	}
	conn, err := grpc.NewClient("unix://"+slot0, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	firstClient := pluginapi.NewDevicePluginClient(conn)

	second := &env{t: t, dir: first.dir, kubelet: first.kubelet}
	second.startManager(DefaultOptions(), h100Plan(res))
	second.waitRegistered(2, res)
	if got := second.kubelet.Endpoint(res); got != filepath.Base(slot1) {
		t.Errorf("second endpoint %q, want %q", got, filepath.Base(slot1))
	}
	if !first.m.Ready() || !second.m.Ready() {
		t.Errorf("ready: first %v, second %v; want both", first.m.Ready(), second.m.Ready())
	}
	// The first server still answers on its socket.
	if _, err := firstClient.GetDevicePluginOptions(first.ctx(), &pluginapi.Empty{}); err != nil {
		t.Errorf("the first server stopped answering after the second started: %v", err)
	}
	if staleSocket(slot0) || staleSocket(slot1) {
		t.Error("a serving socket looks stale")
	}

	first.stop()
	if exists(slot0) {
		t.Errorf("the stopped manager left its socket %s", slot0)
	}
	if !exists(slot1) || staleSocket(slot1) {
		t.Errorf("the stopped manager touched the other's socket %s", slot1)
	}
	if !second.m.Ready() {
		t.Error("the second manager is not ready after the first stopped")
	}

	// Killed: the socket stays, no one listens; a new start takes slot 0,
	// then slot 1 is stale and swept at the next start.
	ln, err := net.Listen("unix", slot0)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = ln.Close()
	third := &env{t: t, dir: first.dir, kubelet: first.kubelet}
	third.startManager(DefaultOptions(), h100Plan(res))
	third.waitRegistered(3, res)
	if got := third.kubelet.Endpoint(res); got != filepath.Base(slot0) {
		t.Errorf("third endpoint %q, want the stale first slot %q", got, filepath.Base(slot0))
	}
}

// TestSocketSlots: slot names never collide with another resource's, and
// a path that is not a socket is never taken or removed.
func TestSocketSlots(t *testing.T) {
	dir := kubeletsim.ShortTempDir(t)
	a1, _ := slotPath(dir, "example.com/gpu", 1)
	b0, _ := slotPath(dir, "example.com/gpu-1", 0)
	if a1 == b0 || filepath.Base(a1) != "featureplug-example.com_gpu@1.sock" {
		t.Errorf("slot 1 of example.com/gpu is %s, slot 0 of example.com/gpu-1 %s", a1, b0)
	}
	if !isOwnSocketName(filepath.Base(a1)) {
		t.Errorf("%s is not taken for featureplug's own socket", a1)
	}
	notSocket, _ := slotPath(dir, "example.com/x", 0)
	if err := os.WriteFile(notSocket, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, path, err := listenSocket(dir, "example.com/x", notSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	if want, _ := slotPath(dir, "example.com/x", 1); path != want {
		t.Errorf("listened on %s, want %s past the file that is not a socket", path, want)
	}
	if data, err := os.ReadFile(notSocket); err != nil || string(data) != "x" {
		t.Errorf("the file that is not a socket was touched: %q, %v", data, err)
	}
}
