package harness

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// controllerManagerControllers are the controllers StartControllerManager
// always runs: the garbage collector. It needs no other controller: it
// deletes a dependent once none of its owners exists, whoever deleted them.
// (The name's older alias, "garbagecollector", works too.)
const controllerManagerControllers = "garbage-collector-controller"

// ResourceClaimController is the controller of ResourceClaims: it takes a
// deleted pod out of its claims' reservedFor, deallocates claims no pod
// uses any more and lifts their delete protection, and makes the claims of
// ResourceClaimTemplates. StartControllerManager runs it when asked.
const ResourceClaimController = "resourceclaim-controller"

// ControllerManager is a running kube-controller-manager with the garbage
// collector and the controllers asked for enabled.
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
// it: it adds a few seconds to a test. controllers names more controllers to
// run (e.g. ResourceClaimController).
func StartControllerManager(t testing.TB, api *APIServer, controllers ...string) *ControllerManager {
	t.Helper()
	p, health := startControlPlaneComponent(t, api, KubeControllerManagerBinary,
		"--controllers="+strings.Join(append([]string{controllerManagerControllers}, controllers...), ","),
		"--use-service-account-credentials=false")
	return &ControllerManager{Process: p, HealthURL: health}
}

// startControlPlaneComponent starts binary (kube-controller-manager or
// kube-scheduler) against api with api's admin kubeconfig, leader election
// off and its secure port on a free loopback port, plus extraArgs, and
// returns it with its /healthz URL once that answers. The process is
// stopped when the test ends.
func startControlPlaneComponent(t testing.TB, api *APIServer, binary string, extraArgs ...string) (*Process, string) {
	t.Helper()
	bins := RequireBinaries(t, binary)
	ctx, cancel := context.WithTimeout(context.Background(), controlPlaneStartTimeout)
	defer cancel()
	port, err := FreePort()
	if err != nil {
		t.Fatalf("choosing %s's port: %v", binary, err)
	}
	dir := t.TempDir()
	args := append([]string{
		"--kubeconfig=" + api.KubeconfigPath,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		// Self-signed serving certificate written here, not in
		// /var/run/kubernetes.
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--v=2",
	}, extraArgs...)
	p := StartProcess(t, ProcessSpec{Name: binary, Path: bins.Path(binary), Args: args, Dir: dir})
	health := fmt.Sprintf("https://127.0.0.1:%d/healthz", port)
	if err := waitHTTPSOK(ctx, p, health); err != nil {
		t.Fatalf("waiting for %s: %v", binary, err)
	}
	return p, health
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
