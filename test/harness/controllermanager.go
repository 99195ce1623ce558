package harness

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// controllerManagerControllers are the controllers StartControllerManager
// runs: the garbage collector only. It needs no other controller: it deletes
// a dependent once none of its owners exists, whoever deleted them. (The
// name's older alias, "garbagecollector", works too.)
const controllerManagerControllers = "garbage-collector-controller"

// ControllerManager is a running kube-controller-manager with only the
// garbage collector enabled.
type ControllerManager struct {
	*Process
	// HealthURL is its /healthz endpoint on loopback (HTTPS, self-signed).
	HealthURL string
}

// StartControllerManager starts kube-controller-manager against api with the
// garbage collector as its only controller, api's admin credentials
// (--use-service-account-credentials=false: no controller service accounts
// or tokens are needed) and leader election off. It returns once the process
// serves /healthz; the collector then lists every deletable resource, the
// CRDs installed by StartAPIServer included, and deletes the dependents whose
// owners are gone (also those deleted before it started). The process is
// stopped when the test ends. Only tests that need garbage collection start
// it: it adds a few seconds to a test.
func StartControllerManager(t testing.TB, api *APIServer) *ControllerManager {
	t.Helper()
	bins := RequireBinaries(t, KubeControllerManagerBinary)
	ctx, cancel := context.WithTimeout(context.Background(), controlPlaneStartTimeout)
	defer cancel()
	port, err := FreePort()
	if err != nil {
		t.Fatalf("choosing kube-controller-manager's port: %v", err)
	}
	dir := t.TempDir()
	p := StartProcess(t, ProcessSpec{
		Name: "kube-controller-manager",
		Path: bins.Path(KubeControllerManagerBinary),
		Args: []string{
			"--kubeconfig=" + api.KubeconfigPath,
			"--controllers=" + controllerManagerControllers,
			"--use-service-account-credentials=false",
			"--leader-elect=false",
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			// Self-signed serving certificate written here, not in
			// /var/run/kubernetes.
			"--cert-dir=" + filepath.Join(dir, "certs"),
			"--v=2",
		},
		Dir: dir,
	})
	m := &ControllerManager{Process: p, HealthURL: fmt.Sprintf("https://127.0.0.1:%d/healthz", port)}
	if err := waitHTTPSOK(ctx, p, m.HealthURL); err != nil {
		t.Fatalf("waiting for kube-controller-manager: %v", err)
	}
	return m
}

// waitHTTPSOK polls url, served with a self-signed certificate, until it
// answers 200 OK, failing early if p exits.
func waitHTTPSOK(ctx context.Context, p *Process, url string) error {
	client := &http.Client{
		Timeout: time.Second,
		// The serving certificate is one the process generated for itself
		// at start; only liveness is checked here.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // self-signed, loopback
	}
	defer client.CloseIdleConnections()
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
