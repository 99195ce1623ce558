package dra

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNodeRollingUpdate: two agents of one node (the old and the new pod
// of a DaemonSet update) share the directories and the checkpoint, each
// with sockets named after its pod: both serve at once, either answers
// for a claim the other prepared (from the shared checkpoint), an
// unprepare through one is seen by the other, and the old one stopping
// removes only its own sockets.
func TestNodeRollingUpdate(t *testing.T) {
	claims := &nodeClaims{}
	a := nodeClaim("ns1", "claim-a", "uid-a", nodeOurs("gpu", "gpu-0000"))
	b := nodeClaim("ns1", "claim-b", "uid-b", nodeOurs("mig", "mig-1111"))
	claims.add(a)
	claims.add(b)
	base := newNodeEnv(t, "", claims, nodeTable)
	old := base.another("pod-old", nodeTable).start()
	newer := base.another("pod-new", nodeTable).start()

	wantNames := map[*nodeEnv][2]string{
		old:   {DriverName + "-pod-old-reg.sock", "dra-pod-old.sock"},
		newer: {DriverName + "-pod-new-reg.sock", "dra-pod-new.sock"},
	}
	for e, names := range wantNames {
		if got := filepath.Base(e.n.RegistrationSocket()); got != names[0] {
			t.Errorf("registration socket %s, want %s", got, names[0])
		}
		if got := filepath.Base(e.n.PluginSocket()); got != names[1] {
			t.Errorf("DRA socket %s, want %s", got, names[1])
		}
	}

	// Prepared by the old agent, answered by the new one from the
	// checkpoint, without reading the API server again.
	if r := old.prepare(old.v1(), nodeClaimRef(a))["uid-a"]; r.GetError() != "" {
		t.Fatalf("old agent: prepare: %s", r.GetError())
	}
	gets := claims.getCount()
	if r := newer.prepare(newer.v1(), nodeClaimRef(a))["uid-a"]; r.GetError() != "" || len(r.GetDevices()) != 1 {
		t.Fatalf("new agent: prepare of the old one's claim = %v", r)
	}
	if got := newer.metric("featureplug_dra_prepare_total", "result", "checkpointed"); got != 1 || claims.getCount() != gets {
		t.Errorf("new agent: prepare_total{checkpointed} = %v, API reads %d -> %d; want 1 answer from the shared checkpoint",
			got, gets, claims.getCount())
	}
	// Prepared by the new one; the old one unprepares it.
	if r := newer.prepare(newer.v1(), nodeClaimRef(b))["uid-b"]; r.GetError() != "" {
		t.Fatalf("new agent: prepare: %s", r.GetError())
	}
	if r := old.unprepare(old.v1(), nodeClaimRef(b))["uid-b"]; r.GetError() != "" {
		t.Fatalf("old agent: unprepare of the new one's claim: %s", r.GetError())
	}
	if got := old.metric("featureplug_dra_unprepare_total", "result", "unprepared"); got != 1 {
		t.Errorf("old agent: unprepare_total{unprepared} = %v, want 1 (the claim the new agent prepared)", got)
	}
	if ck := base.checkpoint(); len(ck.Claims) != 1 || ck.Claims[0].UID != "uid-a" {
		t.Fatalf("shared checkpoint = %+v, want only uid-a", ck.Claims)
	}

	// The old agent stops: its registration socket goes first, and its
	// DRA service answers a moment longer; then its sockets are gone, the
	// new one's stay, and the new one unprepares the claim the old one
	// prepared.
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		old.stop()
	}()
	old.waitFor("the old agent's registration socket is removed", func() bool {
		_, err := os.Stat(old.n.RegistrationSocket())
		return os.IsNotExist(err)
	})
	if r := old.prepare(old.v1(), nodeClaimRef(a))["uid-a"]; r.GetError() != "" || len(r.GetDevices()) != 1 {
		t.Errorf("the stopping agent's DRA service during the handover: %v", r)
	}
	<-stopped
	for _, p := range []string{old.n.RegistrationSocket(), old.n.PluginSocket()} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("the stopped agent's socket %s is still there (%v)", p, err)
		}
	}
	for _, p := range []string{newer.n.RegistrationSocket(), newer.n.PluginSocket()} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the new agent's socket %s: %v", p, err)
		}
	}
	if r := newer.unprepare(newer.v1(), nodeClaimRef(a))["uid-a"]; r.GetError() != "" {
		t.Fatalf("new agent: unprepare: %s", r.GetError())
	}
	if got := newer.metric("featureplug_dra_unprepare_total", "result", "unprepared"); got != 1 {
		t.Errorf("new agent: unprepare_total{unprepared} = %v, want 1", got)
	}
	if ck := base.checkpoint(); len(ck.Claims) != 0 {
		t.Errorf("shared checkpoint = %+v, want empty", ck.Claims)
	}
}

// TestRollingSocketNames: without an instance the fixed names; with one,
// the instance in the names, or a hash of it where the path would not fit
// a unix socket.
func TestRollingSocketNames(t *testing.T) {
	if got := registrationSocketName("/var/lib/kubelet/plugins_registry", ""); got != RegistrationSocketName {
		t.Errorf("no instance: %s", got)
	}
	if got := pluginSocketName(""); got != PluginSocketName {
		t.Errorf("no instance: %s", got)
	}
	uid := "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	if got := registrationSocketName("/var/lib/kubelet/plugins_registry", uid); got != DriverName+"-"+uid+"-reg.sock" {
		t.Errorf("short directory: %s", got)
	}
	long := "/" + strings.Repeat("d", 60)
	got := registrationSocketName(long, uid)
	if strings.Contains(got, uid) || !strings.HasSuffix(got, "-reg.sock") || len(filepath.Join(long, got)) > maxSocketPath {
		t.Errorf("long directory: %s (%d bytes)", got, len(filepath.Join(long, got)))
	}
	if again := registrationSocketName(long, uid); again != got {
		t.Errorf("the name is not stable: %s, then %s", got, again)
	}
}

// TestNodeSweepsStaleSockets: at start the driver removes its sockets
// that no process listens on (an agent killed before it removed them:
// another pod's rolling-update names, or the fixed names), and leaves a
// socket another agent serves and a file that is no socket.
func TestNodeSweepsStaleSockets(t *testing.T) {
	base := newNodeEnv(t, "", &nodeClaims{}, nodeTable)
	for _, d := range []string{base.regDir, base.plugDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	dead := func(path string) {
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		_ = ln.Close()
	}
	stale := []string{
		filepath.Join(base.regDir, DriverName+"-pod-dead-reg.sock"),
		filepath.Join(base.plugDir, "dra-pod-dead.sock"),
		filepath.Join(base.regDir, RegistrationSocketName),
		filepath.Join(base.plugDir, PluginSocketName),
	}
	for _, p := range stale {
		dead(p)
	}
	live := filepath.Join(base.regDir, DriverName+"-pod-live-reg.sock")
	ln, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	notSocket := filepath.Join(base.regDir, DriverName+"-notes-reg.sock")
	if err := os.WriteFile(notSocket, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(base.regDir, "other.example.com-reg.sock")
	dead(other)

	e := base.another("pod-new", nodeTable).start()
	e.waitFor("the stale sockets are removed", func() bool {
		for _, p := range stale {
			if _, err := os.Lstat(p); err == nil {
				return false
			}
		}
		return true
	})
	for _, p := range []string{live, notSocket, other, e.n.RegistrationSocket(), e.n.PluginSocket()} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	if logs := e.logs.String(); !strings.Contains(logs, "removed a stale DRA socket") {
		t.Errorf("the sweep is not logged:\n%s", logs)
	}
}
