package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// NFDNamespace is the namespace nfd-master runs in (KUBERNETES_NAMESPACE):
// NodeFeatures there are merged first for each node.
const NFDNamespace = "node-feature-discovery"

// nfdMasterReadyTimeout bounds the wait for nfd-master's health endpoint.
const nfdMasterReadyTimeout = time.Minute

// NFDMaster is a running nfd-master process.
type NFDMaster struct {
	*Process
	// Namespace is nfd-master's own namespace.
	Namespace string
	// HealthURL is its /healthz endpoint on loopback.
	HealthURL string
}

// StartNFDMaster starts nfd-master against api, with node registered the way
// a kubelet registers it (see APIServer.CreateNode) and the NFDNamespace
// created. It returns once nfd-master serves its health endpoint; the process
// is stopped when the test ends. extraArgs are added to nfd-master's command
// line, e.g. "-nfd-api-parallelism=50" (see docs/scale.md).
func StartNFDMaster(t testing.TB, api *APIServer, node string, extraArgs ...string) *NFDMaster {
	t.Helper()
	bins := RequireBinaries(t, NFDMasterBinary)
	ctx, cancel := context.WithTimeout(context.Background(), nfdMasterReadyTimeout)
	defer cancel()
	if _, err := api.CreateNode(ctx, node); err != nil {
		t.Fatalf("preparing node for nfd-master: %v", err)
	}
	if err := api.CreateNamespace(ctx, NFDNamespace); err != nil {
		t.Fatalf("preparing nfd-master's namespace: %v", err)
	}
	port, err := FreePort()
	if err != nil {
		t.Fatalf("choosing nfd-master's port: %v", err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "nfd-master.conf")
	if err := os.WriteFile(conf, []byte("{}\n"), 0o644); err != nil {
		t.Fatalf("writing nfd-master config: %v", err)
	}
	p := StartProcess(t, ProcessSpec{
		Name: "nfd-master",
		Path: bins.Path(NFDMasterBinary),
		Args: append([]string{
			"-kubeconfig=" + api.KubeconfigPath,
			"-config=" + conf,
			"-port=" + strconv.Itoa(port),
		}, extraArgs...),
		Env: []string{"NODE_NAME=" + node, "KUBERNETES_NAMESPACE=" + NFDNamespace},
		Dir: dir,
	})
	m := &NFDMaster{Process: p, Namespace: NFDNamespace, HealthURL: fmt.Sprintf("http://127.0.0.1:%d/healthz", port)}
	if err := waitHTTPOK(ctx, p, m.HealthURL); err != nil {
		t.Fatalf("waiting for nfd-master: %v", err)
	}
	return m
}

// waitHTTPOK polls url until it answers 200 OK, failing early if p exits.
func waitHTTPOK(ctx context.Context, p *Process, url string) error {
	client := &http.Client{Timeout: time.Second}
	return poll(ctx, func() (bool, string, error) {
		if !p.Running() {
			return false, "", fmt.Errorf("%s exited before it was ready: %v", p.Name, p.ExitErr())
		}
		resp, err := client.Get(url)
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, "GET " + url + ": " + resp.Status, nil
	})
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// chosen below the kernel's ephemeral range: a port from that range (what
// listening on port 0 gives) can be taken by any outgoing connection (an
// API client's) before the component that is handed it binds it.
func FreePort() (int, error) {
	low := ephemeralLow()
	const first = 20000
	for range 200 {
		if low <= first {
			break
		}
		port := first + rand.IntN(low-first)
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			_ = l.Close()
			return port, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("listening on a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	const linuxDefault = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return linuxDefault
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return linuxDefault
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return linuxDefault
	}
	return n
}
