package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	nfdclient "sigs.k8s.io/node-feature-discovery/api/generated/clientset/versioned"
)

// nfdModule is the module whose deployment manifests hold the NFD CRDs; its
// version is the one the test module's go.mod requires.
const nfdModule = "sigs.k8s.io/node-feature-discovery"

// nfdCRDFile is the NFD CRD manifest inside nfdModule.
const nfdCRDFile = "deployment/base/nfd-crds/nfd-api-crds.yaml"

// controlPlaneStartTimeout bounds the start of etcd and of kube-apiserver;
// generous because tests share small CI machines with compilers.
const controlPlaneStartTimeout = 2 * time.Minute

// readyzTimeout bounds one GET /readyz of WaitReady.
const readyzTimeout = 2 * time.Second

// controlPlaneStopTimeout bounds the stop of etcd and of kube-apiserver.
const controlPlaneStopTimeout = 30 * time.Second

// APIServer is a kube-apiserver with its etcd, both on loopback ports chosen
// at run time, with the NFD CRDs installed.
type APIServer struct {
	// Config is an admin (system:masters) client configuration.
	Config *rest.Config
	// KubeconfigPath is a kubeconfig file with the same credentials, for
	// processes such as nfd-master or featureplug.
	KubeconfigPath string
	// Client is a clientset built from Config.
	Client kubernetes.Interface
	// NFD is an NFD API clientset built from Config.
	NFD nfdclient.Interface

	// mu guards env and down: StopAPIServer, StartAPIServer and Stop may be
	// called from different goroutines (a test and its cleanup).
	mu     sync.Mutex
	env    *envtest.Environment
	down   bool     // kube-apiserver stopped by StopAPIServer, etcd running
	apiLog *os.File // kube-apiserver's log, shared by its restarts
	// apiPidFile holds the process id of the last kube-apiserver started
	// (written by its wrapper script; envtest does not expose it).
	apiPidFile string
	logs       []string
}

// StartAPIServer starts etcd and kube-apiserver with envtest, installs the NFD
// CRDs (NodeFeature, NodeFeatureRule, NodeFeatureGroup) and returns once they
// are served. Both processes are stopped when the test ends; when it failed,
// the tails of their logs are printed. kube-apiserver's certificates live in
// a directory the harness owns (not one envtest removes on stop), so that
// StopAPIServer and StartAPIServer can restart it with the same identity.
func StartAPIServer(t testing.TB) *APIServer {
	t.Helper()
	bins := RequireBinaries(t, EtcdBinary, KubeAPIServerBinary)
	crds, err := NFDCRDPath()
	if err != nil {
		t.Fatalf("locating the NFD CRDs: %v", err)
	}
	logDir := LogDir(t)
	wrapDir := t.TempDir()
	etcdPath, err := dieWithParent(wrapDir, bins.Path(EtcdBinary), "")
	if err != nil {
		t.Fatalf("wrapping etcd: %v", err)
	}
	apiPidFile := filepath.Join(wrapDir, "kube-apiserver.pid")
	apiPath, err := dieWithParent(wrapDir, bins.Path(KubeAPIServerBinary), apiPidFile)
	if err != nil {
		t.Fatalf("wrapping kube-apiserver: %v", err)
	}
	etcdLog, err := createLog(logDir, "etcd")
	if err != nil {
		t.Fatalf("etcd: %v", err)
	}
	apiLog, err := createLog(logDir, "kube-apiserver")
	if err != nil {
		t.Fatalf("kube-apiserver: %v", err)
	}

	env := &envtest.Environment{
		CRDDirectoryPaths:        []string{crds},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: controlPlaneStartTimeout,
		ControlPlaneStopTimeout:  controlPlaneStopTimeout,
	}
	env.ControlPlane.Etcd = &envtest.Etcd{Path: etcdPath, Out: etcdLog, Err: etcdLog}
	api := env.ControlPlane.GetAPIServer()
	api.Path, api.Out, api.Err = apiPath, apiLog, apiLog
	// envtest keeps the serving port, the serving certificates, the
	// service-account keys and the client CA across a Stop and Start of its
	// APIServer only when CertDir is given: a directory it created itself is
	// removed on Stop and everything is generated anew on Start, which would
	// lock out every client made from Config.
	api.CertDir = t.TempDir()

	a := &APIServer{env: env, apiLog: apiLog, apiPidFile: apiPidFile, logs: []string{etcdLog.Name(), apiLog.Name()}}
	t.Cleanup(func() {
		if err := a.Stop(); err != nil {
			t.Logf("stopping the API server: %v", err)
		}
		etcdLog.Close()
		apiLog.Close()
		if t.Failed() {
			for _, l := range a.logs {
				t.Logf("--- last %d lines of %s:\n%s", logTailLines, l, fileTail(l, logTailLines))
			}
		}
	})
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting etcd and kube-apiserver from %s: %v", bins.Dir, err)
	}
	t.Logf("API server at %s, ready with NFD CRDs in %s", cfg.Host, time.Since(start).Round(time.Millisecond))

	a.Config = cfg
	a.KubeconfigPath = strings.TrimSuffix(apiLog.Name(), ".log") + ".kubeconfig"
	if err := os.WriteFile(a.KubeconfigPath, env.KubeConfig, 0o600); err != nil {
		t.Fatalf("writing kubeconfig: %v", err)
	}
	if a.Client, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatalf("creating clientset: %v", err)
	}
	if a.NFD, err = nfdclient.NewForConfig(cfg); err != nil {
		t.Fatalf("creating NFD clientset: %v", err)
	}
	return a
}

// Stop stops kube-apiserver and etcd. StartAPIServer's cleanup calls it; call
// it earlier to test what happens when the API server goes away.
func (a *APIServer) Stop() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.env == nil {
		return nil
	}
	env := a.env
	a.env = nil
	if err := env.Stop(); err != nil {
		return fmt.Errorf("stopping envtest control plane: %w", err)
	}
	return nil
}

// StopAPIServer stops the kube-apiserver process the way a kubelet stops a
// static pod: SIGTERM, then SIGKILL once grace has passed (0 kills at once,
// as a crash or an OOM kill would), and waits for it to exit; etcd keeps
// running with its data. kube-apiserver stops listening as soon as it gets
// SIGTERM, so new requests are refused from then on, but it can keep open
// watch connections (nfd-master's informers) for longer than 30 s: grace
// decides how long clients with a watch open see a silent server before
// their connections break.
func (a *APIServer) StopAPIServer(grace time.Duration) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.env == nil {
		return errors.New("stopping kube-apiserver: the control plane was stopped")
	}
	if a.down {
		return errors.New("stopping kube-apiserver: already stopped")
	}
	b, err := os.ReadFile(a.apiPidFile)
	if err != nil {
		return fmt.Errorf("stopping kube-apiserver: its process id: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return fmt.Errorf("stopping kube-apiserver: %s holds %q, not a process id", a.apiPidFile, b)
	}
	how := "SIGKILL"
	if grace > 0 {
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			return fmt.Errorf("stopping kube-apiserver (pid %d): SIGTERM: %w", pid, err)
		}
		how = "SIGTERM"
	}
	if !waitGone(pid, grace) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("stopping kube-apiserver (pid %d): SIGKILL: %w", pid, err)
		}
		if grace > 0 {
			how = fmt.Sprintf("SIGTERM, SIGKILL after %s", grace)
		}
		if !waitGone(pid, controlPlaneStopTimeout) {
			return fmt.Errorf("stopping kube-apiserver (pid %d): still there %s after SIGKILL", pid, controlPlaneStopTimeout)
		}
	}
	// envtest reaps the process; its next Start makes a new one with the
	// same flags.
	a.down = true
	fmt.Fprintf(a.apiLog, "\n# --- %s: kube-apiserver (pid %d) stopped by the test (%s); etcd keeps running\n\n",
		time.Now().UTC().Format(time.RFC3339Nano), pid, how)
	return nil
}

// waitGone waits up to d for process pid to have exited and been reaped.
func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(pollInterval)
	}
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, with the
// flags envtest computed the first time: the same address and port, the same
// serving certificate and CA, the same service-account keys, the same
// client-certificate CA (so the admin credentials of Config and
// KubeconfigPath stay valid) and the same etcd, whose data, CRDs included,
// was kept. Config, KubeconfigPath, Client and NFD keep working, as do the
// clients other processes built from them. It returns once /readyz answers
// ok, or with ctx's error; the process start itself is bounded by the
// control-plane start timeout (2 minutes). It fails if another process took
// the port meanwhile.
func (a *APIServer) StartAPIServer(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.env == nil {
		return errors.New("starting kube-apiserver: the control plane was stopped")
	}
	if !a.down {
		return errors.New("starting kube-apiserver: it is running (StopAPIServer first)")
	}
	fmt.Fprintf(a.apiLog, "# --- %s: kube-apiserver started again by the test\n", time.Now().UTC().Format(time.RFC3339Nano))
	api := a.env.ControlPlane.GetAPIServer()
	if err := api.Start(); err != nil {
		return fmt.Errorf("starting kube-apiserver again at %s (port taken meanwhile?): %w", a.Config.Host, err)
	}
	a.down = false
	if u, err := url.Parse(a.Config.Host); err != nil || u.Host != api.SecureServing.HostPort() {
		return fmt.Errorf("kube-apiserver came back at %s, not at %s", api.SecureServing.HostPort(), a.Config.Host)
	}
	return a.WaitReady(ctx)
}

// WaitReady waits until kube-apiserver's /readyz answers ok: etcd reachable,
// every post-start hook done (CRDs served, RBAC bootstrapped).
func (a *APIServer) WaitReady(ctx context.Context) error {
	rc := a.Client.Discovery().RESTClient()
	err := poll(ctx, func() (bool, string, error) {
		rctx, cancel := context.WithTimeout(ctx, readyzTimeout)
		defer cancel()
		body, err := rc.Get().AbsPath("/readyz").DoRaw(rctx)
		if err != nil {
			return false, fmt.Sprintf("GET /readyz: %v: %s", err, body), nil
		}
		return true, "", nil
	})
	if err != nil {
		return fmt.Errorf("waiting for kube-apiserver at %s to be ready: %w", a.Config.Host, err)
	}
	return nil
}

// CreateNamespace creates a namespace, tolerating one that exists.
func (a *APIServer) CreateNamespace(ctx context.Context, name string) error {
	_, err := a.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %q: %w", name, err)
	}
	return nil
}

// CreateNode creates a Node object the way a kubelet would register it: with
// the kubernetes.io/hostname (and os/arch) labels and a non-empty annotations
// map, which nfd-master's JSON patches need. An existing Node is left as is.
func (a *APIServer) CreateNode(ctx context.Context, name string) (*corev1.Node, error) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name,
		Labels: map[string]string{
			"kubernetes.io/hostname": name,
			"kubernetes.io/os":       "linux",
			"kubernetes.io/arch":     "amd64",
		},
		Annotations: map[string]string{
			"node.alpha.kubernetes.io/ttl": "0",
		},
	}}
	created, err := a.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return a.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("creating node %q: %w", name, err)
	}
	return created, nil
}

// WaitNode waits until cond holds for the Node; cond also describes the state
// it saw, for the error when ctx ends first.
func (a *APIServer) WaitNode(ctx context.Context, name string, cond func(*corev1.Node) (bool, string)) error {
	return poll(ctx, func() (bool, string, error) {
		n, err := a.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Sprintf("getting node %q: %v", name, err), nil
		}
		ok, state := cond(n)
		return ok, state, nil
	})
}

// WaitNodeLabels waits until the Node carries every label in want with the
// wanted value.
func (a *APIServer) WaitNodeLabels(ctx context.Context, name string, want map[string]string) error {
	return a.WaitNode(ctx, name, func(n *corev1.Node) (bool, string) {
		for k, v := range want {
			if got, has := n.Labels[k]; !has || got != v {
				return false, fmt.Sprintf("node %q label %s is %q (present: %v), want %q; labels: %v", name, k, got, has, v, n.Labels)
			}
		}
		return true, ""
	})
}

// NFDCRDPath returns the NFD CRD manifest in the module cache, for the NFD
// version the test module requires (downloading the module when needed).
func NFDCRDPath() (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", nfdModule).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", nfdModule, exitDetail(err))
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("decoding go mod download output %q: %w", out, err)
	}
	if mod.Error != "" || mod.Dir == "" {
		return "", fmt.Errorf("go mod download %s: no directory (error %q)", nfdModule, mod.Error)
	}
	p := filepath.Join(mod.Dir, nfdCRDFile)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("NFD CRDs: %w", err)
	}
	return p, nil
}

// dieWithParent writes a wrapper script in dir that runs bin with SIGKILL as
// its parent-death signal (setpriv --pdeathsig), so a control-plane process
// started by envtest cannot outlive a crashed or timed-out test binary. When
// pidFile is not empty the wrapper first writes its process id there (exec
// keeps it: it is bin's). Where setpriv is missing and no pidFile is asked
// for, it returns bin itself.
func dieWithParent(dir, bin, pidFile string) (string, error) {
	exec1 := fmt.Sprintf("exec %q \"$@\"\n", bin)
	if setpriv, err := exec.LookPath("setpriv"); err == nil {
		exec1 = fmt.Sprintf("exec %q --pdeathsig KILL -- %q \"$@\"\n", setpriv, bin)
	} else if pidFile == "" {
		return bin, nil
	}
	script := "#!/bin/sh\n"
	if pidFile != "" {
		script += fmt.Sprintf("echo $$ > %q\n", pidFile)
	}
	wrapper := filepath.Join(dir, filepath.Base(bin))
	if err := os.WriteFile(wrapper, []byte(script+exec1), 0o755); err != nil {
		return "", fmt.Errorf("writing wrapper for %s: %w", bin, err)
	}
	return wrapper, nil
}
