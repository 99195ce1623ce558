package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

	env  *envtest.Environment
	logs []string
}

// StartAPIServer starts etcd and kube-apiserver with envtest, installs the NFD
// CRDs (NodeFeature, NodeFeatureRule, NodeFeatureGroup) and returns once they
// are served. Both processes are stopped when the test ends; when it failed,
// the tails of their logs are printed.
func StartAPIServer(t testing.TB) *APIServer {
	t.Helper()
	bins := RequireBinaries(t, EtcdBinary, KubeAPIServerBinary)
	crds, err := NFDCRDPath()
	if err != nil {
		t.Fatalf("locating the NFD CRDs: %v", err)
	}
	logDir := LogDir(t)
	wrapDir := t.TempDir()
	etcdPath, err := dieWithParent(wrapDir, bins.Path(EtcdBinary))
	if err != nil {
		t.Fatalf("wrapping etcd: %v", err)
	}
	apiPath, err := dieWithParent(wrapDir, bins.Path(KubeAPIServerBinary))
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
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	env.ControlPlane.Etcd = &envtest.Etcd{Path: etcdPath, Out: etcdLog, Err: etcdLog}
	api := env.ControlPlane.GetAPIServer()
	api.Path, api.Out, api.Err = apiPath, apiLog, apiLog

	a := &APIServer{env: env, logs: []string{etcdLog.Name(), apiLog.Name()}}
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
// started by envtest cannot outlive a crashed or timed-out test binary. Where
// setpriv is missing it returns bin itself.
func dieWithParent(dir, bin string) (string, error) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return bin, nil
	}
	wrapper := filepath.Join(dir, filepath.Base(bin))
	script := fmt.Sprintf("#!/bin/sh\nexec %q --pdeathsig KILL -- %q \"$@\"\n", setpriv, bin)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		return "", fmt.Errorf("writing wrapper for %s: %w", bin, err)
	}
	return wrapper, nil
}
