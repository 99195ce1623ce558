package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/featureplug/featureplug/test/harness"
)

// realKubeletNode is the node name the real kubelet registers.
const realKubeletNode = "real-kubelet-node"

// realKubeletStopGrace is how long a stopped containerd or kubelet gets
// after SIGTERM before SIGKILL.
const realKubeletStopGrace = 5 * time.Second

// TestRealKubelet runs featureplug next to a real kubelet with containerd:
// the kubelet registers the Node, featureplug's GPUs show in the Node's
// capacity, and a pod bound to the node makes the kubelet call featureplug's
// Allocate (the pod itself never starts: there is no CNI and no pause image).
//
// The kubelet runs as root in a private mount namespace with a tmpfs over
// /var/lib and /var/log, so its hard-coded paths (the device-plugin socket,
// the checkpoints, the log directories) never touch the host's; its root
// directory is a temporary directory bind-mounted on /var/lib/kubelet.
func TestRealKubelet(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, containerd, the kubelet and featureplug")
	}
	if os.Geteuid() != 0 {
		t.Skip("the real kubelet needs root (a private mount namespace, cgroups); run as root to include it")
	}
	containerd, err := exec.LookPath("containerd")
	if err != nil {
		t.Skip("containerd is not installed (apt-get install containerd); the real kubelet needs a container runtime")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare (util-linux) is not installed; the real kubelet runs in a private mount namespace")
	}
	start := time.Now()
	bins := harness.RequireBinaries(t, harness.KubeletBinary)
	api := harness.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := api.CreateNamespace(ctx, agentNamespace); err != nil {
		t.Fatal(err)
	}

	dir := shortTempDir(t)
	sock := startContainerd(t, containerd, dir)
	rootDir := filepath.Join(dir, "kubelet")
	kubelet := startRealKubelet(t, unshare, bins.Path(harness.KubeletBinary), api.KubeconfigPath, sock, rootDir)
	if err := waitFor(ctx, func() (bool, string) {
		if !kubelet.Running() {
			return false, fmt.Sprintf("the kubelet exited: %v", kubelet.ExitErr())
		}
		_, err := api.Client.CoreV1().Nodes().Get(ctx, realKubeletNode, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	}); err != nil {
		t.Fatalf("the kubelet did not register node %s: %v", realKubeletNode, err)
	}
	t.Logf("node %s registered by the kubelet %s after the test started", realKubeletNode, time.Since(start).Round(time.Millisecond))

	pluginDir := filepath.Join(rootDir, "device-plugins")
	if err := waitFor(ctx, func() (bool, string) {
		_, err := os.Stat(filepath.Join(pluginDir, "kubelet.sock"))
		return err == nil, fmt.Sprint(err)
	}); err != nil {
		t.Fatalf("the kubelet's device-plugin socket: %v", err)
	}
	agentStart := time.Now()
	a := startAgent(t, agentSpec{
		Node:       realKubeletNode,
		FakeNode:   "dgx-h100",
		Publish:    "nodefeature",
		KubeletDir: pluginDir,
		Kubeconfig: api.KubeconfigPath,
		Namespace:  agentNamespace,
	})

	const gpu = corev1.ResourceName("nvidia.com/gpu")
	err = api.WaitNode(ctx, realKubeletNode, func(n *corev1.Node) (bool, string) {
		c, al := n.Status.Capacity[gpu], n.Status.Allocatable[gpu]
		return c.Value() == 8 && al.Value() == 8, fmt.Sprintf("capacity %s, allocatable %s", c.String(), al.String())
	})
	if err != nil {
		t.Fatalf("node %s: %s: %v", realKubeletNode, gpu, err)
	}
	t.Logf("%s: 8 in the Node's capacity %s after featureplug started", gpu, time.Since(agentStart).Round(time.Millisecond))

	// Allocate calls of the kubelet that featureplug answered with devices.
	const allocations = "featureplug_plugin_allocations_total"
	okGPU := []string{`resource="nvidia.com/gpu"`, `result="ok"`}
	before := a.metric(t, allocations, okGPU...)
	pod := gpuPod(t, api, realKubeletNode, gpu, 2)
	allocStart := time.Now()
	after := a.waitMetric(t, allocations, func(v float64) bool { return v > before }, okGPU...)
	t.Logf("pod %s/%s: featureplug's allocations went from %v to %v %s after the pod was bound",
		pod.Namespace, pod.Name, before, after, time.Since(allocStart).Round(time.Millisecond))
	t.Logf("whole test body took %s", time.Since(start).Round(time.Millisecond))
}

// startContainerd runs containerd with its root, state, sockets and plugin
// directories under dir, and returns its CRI socket once it is there.
func startContainerd(t *testing.T, path, dir string) string {
	t.Helper()
	sock := filepath.Join(dir, "containerd.sock")
	cfg := filepath.Join(dir, "containerd.toml")
	// Every path containerd would otherwise default to (/var/lib/containerd,
	// /run/containerd, /opt/containerd, /etc/cni, /opt/cni) points into dir.
	conf := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = %[6]q
  conf_dir = %[7]q
`,
		filepath.Join(dir, "containerd-root"), filepath.Join(dir, "containerd-state"),
		sock, sock+".ttrpc", filepath.Join(dir, "containerd-opt"),
		filepath.Join(dir, "cni-bin"), filepath.Join(dir, "cni-conf"))
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatalf("writing the containerd configuration: %v", err)
	}
	p := harness.StartProcess(t, harness.ProcessSpec{
		Name:      "containerd",
		Path:      path,
		Args:      []string{"--config", cfg},
		StopGrace: realKubeletStopGrace,
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := waitFor(ctx, func() (bool, string) {
		if !p.Running() {
			return false, fmt.Sprintf("exited: %v", p.ExitErr())
		}
		_, err := os.Stat(sock)
		return err == nil, fmt.Sprint(err)
	}); err != nil {
		t.Fatalf("containerd did not serve %s: %v", sock, err)
	}
	return sock
}

// realKubeletMountScript prepares the kubelet's private mount namespace and
// then becomes the kubelet: $1 is the kubelet's root directory on the host,
// $2 the kubelet binary, the rest its arguments.
const realKubeletMountScript = `set -eu
root=$1 kubelet=$2
shift 2
mount -t tmpfs -o mode=0755 featureplug-e2e /var/lib
mount -t tmpfs -o mode=0755 featureplug-e2e /var/log
mkdir -p /var/lib/kubelet
mount --bind "$root" /var/lib/kubelet
exec "$kubelet" "$@"
`

// startRealKubelet runs the kubelet against the API server and containerd's
// socket, with its root directory (device-plugins included) at rootDir.
func startRealKubelet(t *testing.T, unshare, kubelet, kubeconfig, containerdSock, rootDir string) *harness.Process {
	t.Helper()
	if err := os.MkdirAll(rootDir, 0o755); err != nil {
		t.Fatalf("creating the kubelet's root directory: %v", err)
	}
	port, err := harness.FreePort()
	if err != nil {
		t.Fatalf("choosing the kubelet's port: %v", err)
	}
	healthz, err := harness.FreePort()
	if err != nil {
		t.Fatalf("choosing the kubelet's healthz port: %v", err)
	}
	cfg := filepath.Join(filepath.Dir(rootDir), "kubelet.yaml")
	conf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
localStorageCapacityIsolation: false
containerRuntimeEndpoint: unix://%s
staticPodPath: ""
resolvConf: ""
nodeStatusUpdateFrequency: 1s
nodeStatusReportFrequency: 1s
evictionHard:
  memory.available: 1Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
  nodefs.inodesFree: 1%%
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
`, port, healthz, containerdSock)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatalf("writing the kubelet configuration: %v", err)
	}
	return harness.StartProcess(t, harness.ProcessSpec{
		Name: "kubelet",
		Path: unshare,
		Args: []string{"--mount", "--propagation", "private", "--",
			"/bin/sh", "-c", realKubeletMountScript, "kubelet-ns", rootDir, kubelet,
			"--config", cfg,
			"--kubeconfig", kubeconfig,
			"--hostname-override", realKubeletNode,
			"--node-ip", "127.0.0.1",
			"--root-dir", "/var/lib/kubelet",
			"--v", "2",
		},
		StopGrace: realKubeletStopGrace,
	})
}

// gpuPod creates, in the default namespace, a pod bound to node whose one
// container asks for n of res.
func gpuPod(t *testing.T, api *harness.APIServer, node string, res corev1.ResourceName, n int64) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	const ns = metav1.NamespaceDefault
	// Without a controller manager nobody creates the default service
	// account that pod admission wants.
	_, err := api.Client.CoreV1().ServiceAccounts(ns).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating service account %s/default: %v", ns, err)
	}
	noToken := false
	q := *resource.NewQuantity(n, resource.DecimalSI)
	pod, err := api.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-pod", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			AutomountServiceAccountToken: &noToken,
			Containers: []corev1.Container{{
				Name:  "cuda",
				Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{res: q},
				},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a pod asking for %d %s on node %s: %v", n, res, node, err)
	}
	return pod
}
