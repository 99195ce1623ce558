package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Binaries of the containerd component (test/components/build.sh builds
// the three together; RequireBinaries takes ContainerdBinary for all).
const (
	// ContainerdBinary is containerd 2, whose CRI plugin injects CDI devices.
	ContainerdBinary = "containerd"
	// CtrBinary is containerd's client, which imports the pod images.
	CtrBinary = "ctr"
	// ContainerdShimBinary runs runc for containerd; containerd finds it
	// next to itself.
	ContainerdShimBinary = "containerd-shim-runc-v2"
)

// realNodeStopGrace is how long a stopped containerd or kubelet gets after
// SIGTERM before SIGKILL.
const realNodeStopGrace = 10 * time.Second

// realNodeStartTimeout bounds each start-up step of a RealNode.
const realNodeStartTimeout = 2 * time.Minute

// RealNode is a Kubernetes node that runs pods for real: containerd 2 with
// runc and the real kubelet, registered with an APIServer. The kubelet and
// containerd run as root in a private mount namespace with tmpfs over
// /var/lib, /var/log and /run, so nothing they write by default reaches
// the host's; every directory of theirs is under Dir (the kubelet's root
// directory is bind-mounted at /var/lib/kubelet, whose device-plugin path
// the kubelet hard-codes). Pods must use the host network (there is no
// CNI: the Node stays NotReady, so pods tolerate that) and the locally
// built ProbeImage; PauseImage is the sandbox image. containerd reads CDI
// specs from CDISpecDir only.
type RealNode struct {
	// Name is the Node's name.
	Name string
	// Dir holds everything of the node on the host.
	Dir string
	// KubeletDir is the kubelet's root directory on the host (its
	// /var/lib/kubelet).
	KubeletDir string
	// DevicePluginDir is where device plugins register (the kubelet's
	// /var/lib/kubelet/device-plugins).
	DevicePluginDir string
	// PluginRegistryDir is where DRA drivers register (the kubelet's
	// /var/lib/kubelet/plugins_registry).
	PluginRegistryDir string
	// PluginsDir is the parent of the DRA drivers' own socket directories
	// (the kubelet's /var/lib/kubelet/plugins).
	PluginsDir string
	// CDISpecDir is containerd's one CDI spec directory.
	CDISpecDir string
	// PodLogsDir is the kubelet's pod log directory.
	PodLogsDir string

	api   *APIServer
	owner testing.TB
	// nsPid is the process holding the mount namespace; nsID is the
	// namespace's identity (the target of /proc/<pid>/ns/mnt).
	nsPid int
	nsID  string
	// containerdSock is containerd's gRPC (CRI) socket.
	containerdSock string
	runcRoot       string
	runc           string
	kubeletArgs    []string
	healthURL      string

	mu      sync.Mutex // guards kubelet
	kubelet *Process
}

// RealNodeUnavailable says in one sentence why this machine cannot run a
// RealNode, or returns "" when it can: it needs root, runc and
// util-linux's unshare and nsenter. (The containerd and kubelet binaries
// are built when missing.)
func RealNodeUnavailable() string {
	if os.Geteuid() != 0 {
		return "pods run on a real kubelet and containerd only as root (a private mount namespace, cgroups, device nodes); run the tests as root to include them"
	}
	for _, tool := range []string{"unshare", "nsenter", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " (util-linux) is not installed; the real kubelet and containerd run in a private mount namespace"
		}
	}
	if _, err := findRunc(); err != nil {
		return "runc is not installed (apt-get install runc); pods on a real kubelet need it"
	}
	return ""
}

// findRunc finds runc in PATH or in /usr/sbin, where Debian installs it
// (not in every PATH).
func findRunc() (string, error) {
	if p, err := exec.LookPath("runc"); err == nil {
		return p, nil
	}
	const debian = "/usr/sbin/runc"
	if _, err := os.Stat(debian); err != nil {
		return "", fmt.Errorf("runc is neither in PATH nor at %s", debian)
	}
	return debian, nil
}

// realNodeMountScript prepares the private mount namespace and then holds
// it: $1 is the kubelet's root directory on the host, $2 a file it creates
// once the mounts are in place.
const realNodeMountScript = `set -eu
mount -t tmpfs -o mode=0755 featureplug-e2e /run
mount -t tmpfs -o mode=0755 featureplug-e2e /var/lib
mount -t tmpfs -o mode=0755 featureplug-e2e /var/log
mkdir -p /var/lib/kubelet
mount --bind "$1" /var/lib/kubelet
: >"$2"
exec sleep infinity
`

// StartRealNode starts containerd and the kubelet for Node name against
// api, imports PauseImage and ProbeImage, and returns once the kubelet has
// registered the Node and serves its device-plugin socket. Everything is
// stopped when the test ends: the pods' sandboxes are removed through the
// CRI before containerd stops, and whatever is left of the node's
// containers (runc) and processes (the namespace's) is killed. The tails
// of the logs are printed when the test failed. Call RealNodeUnavailable
// first and skip when it says why not.
func StartRealNode(t testing.TB, api *APIServer, name string) *RealNode {
	t.Helper()
	if why := RealNodeUnavailable(); why != "" {
		t.Fatal(why)
	}
	runc, _ := findRunc()
	bins := RequireBinaries(t, KubeletBinary, ContainerdBinary)
	start := time.Now()
	// Short: containerd's and the kubelet's unix sockets live here.
	dir, err := os.MkdirTemp("", "fpn")
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs last, once nothing runs in dir.
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	n := &RealNode{
		Name:           name,
		Dir:            dir,
		KubeletDir:     filepath.Join(dir, "kubelet"),
		CDISpecDir:     filepath.Join(dir, "cdi"),
		PodLogsDir:     filepath.Join(dir, "pod-logs"),
		api:            api,
		owner:          t,
		containerdSock: filepath.Join(dir, "containerd.sock"),
		runcRoot:       filepath.Join(dir, "runc"),
		runc:           runc,
	}
	n.DevicePluginDir = filepath.Join(n.KubeletDir, "device-plugins")
	n.PluginRegistryDir = filepath.Join(n.KubeletDir, "plugins_registry")
	n.PluginsDir = filepath.Join(n.KubeletDir, "plugins")
	for _, d := range []string{n.KubeletDir, n.DevicePluginDir, n.PluginRegistryDir, n.PluginsDir, n.CDISpecDir, n.PodLogsDir, n.runcRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), realNodeStartTimeout)
	defer cancel()

	ready := filepath.Join(dir, "namespace-ready")
	holder := StartProcess(t, ProcessSpec{
		Name: "mount-namespace",
		Path: "unshare",
		Args: []string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c", realNodeMountScript, "realnode-ns", n.KubeletDir, ready},
	})
	if err := poll(ctx, func() (bool, string, error) {
		if !holder.Running() {
			return false, "", fmt.Errorf("the mount namespace's holder exited: %v\n%s", holder.ExitErr(), holder.Tail(20))
		}
		_, err := os.Stat(ready)
		return err == nil, fmt.Sprint(err), nil
	}); err != nil {
		t.Fatalf("preparing the node's mount namespace: %v", err)
	}
	n.nsPid = holder.Pid()
	if n.nsID, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", n.nsPid)); err != nil {
		t.Fatalf("the node's mount namespace: %v", err)
	}
	// Runs after containerd stopped, before the namespace's holder does.
	t.Cleanup(n.killLeftovers)

	cfg := filepath.Join(dir, "containerd.toml")
	if err := os.WriteFile(cfg, []byte(n.containerdConfig()), 0o644); err != nil {
		t.Fatalf("writing the containerd configuration: %v", err)
	}
	containerd := StartProcess(t, ProcessSpec{
		Name: "containerd",
		Path: "nsenter",
		Args: append(n.nsenter(), bins.Path(ContainerdBinary), "--config", cfg),
		// The shim is found next to containerd; ctr and runc by path.
		Env:       []string{"PATH=" + bins.Dir + ":" + os.Getenv("PATH")},
		StopGrace: realNodeStopGrace,
	})
	if err := poll(ctx, func() (bool, string, error) {
		if !containerd.Running() {
			return false, "", fmt.Errorf("containerd exited: %v", containerd.ExitErr())
		}
		ok, state := n.criReady(ctx)
		return ok, state, nil
	}); err != nil {
		t.Fatalf("containerd's CRI at %s: %v", n.containerdSock, err)
	}
	// Runs after the kubelet stopped, before containerd does.
	t.Cleanup(n.removeSandboxes)

	images, err := n.importImages(bins)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.writeKubeletConfig(); err != nil {
		t.Fatal(err)
	}
	n.startKubelet(t, bins)
	if err := n.waitKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ensureDefaultServiceAccount(ctx, api); err != nil {
		t.Fatal(err)
	}
	t.Logf("real node %s: containerd and the kubelet of %s up, images %v imported, node registered, in %s",
		name, bins.Dir, images, time.Since(start).Round(time.Millisecond))
	return n
}

// nsenter is the nsenter command line that enters the node's mount
// namespace.
func (n *RealNode) nsenter() []string {
	return []string{"--target", strconv.Itoa(n.nsPid), "--mount", "--"}
}

// containerdConfig is containerd's configuration: every path it would
// default to under Dir (or in the namespace's tmpfs), the CRI plugin with
// the locally built sandbox image, CDI from CDISpecDir, runc with
// cgroupfs, and the limits of an unprivileged-looking root: the bounding
// set of these machines lacks CAP_SYS_RESOURCE, so the sandbox's negative
// oom_score_adj must be clamped (restrict_oom_score_adj).
func (n *RealNode) containerdConfig() string {
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs",
  "io.containerd.snapshotter.v1.blockfile", "io.containerd.nri.v1.nri",
]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins.'io.containerd.internal.v1.opt']
  path = %[5]q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[6]q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  cdi_spec_dirs = [%[7]q]
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %[8]q
        Root = %[9]q
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[10]q]
    conf_dir = %[11]q

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`,
		filepath.Join(n.Dir, "containerd", "root"), filepath.Join(n.Dir, "containerd", "state"),
		n.containerdSock, n.containerdSock+".ttrpc", filepath.Join(n.Dir, "containerd", "opt"),
		PauseImage, n.CDISpecDir, n.runc, n.runcRoot,
		filepath.Join(n.Dir, "cni", "bin"), filepath.Join(n.Dir, "cni", "conf"))
}

// cri dials containerd's CRI.
func (n *RealNode) cri() (runtimeapi.RuntimeServiceClient, func(), error) {
	conn, err := grpc.NewClient("unix://"+n.containerdSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return runtimeapi.NewRuntimeServiceClient(conn), func() { _ = conn.Close() }, nil
}

// criReady reports whether containerd's CRI answers with its runtime ready
// (the network is never: there is no CNI).
func (n *RealNode) criReady(ctx context.Context) (bool, string) {
	if _, err := os.Stat(n.containerdSock); err != nil {
		return false, err.Error()
	}
	c, closeConn, err := n.cri()
	if err != nil {
		return false, err.Error()
	}
	defer closeConn()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := c.Status(rctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return false, err.Error()
	}
	for _, c := range st.GetStatus().GetConditions() {
		if c.Type == runtimeapi.RuntimeReady {
			return c.Status, fmt.Sprintf("%s=%v %s", c.Type, c.Status, c.Message)
		}
	}
	return false, fmt.Sprintf("no %s condition in %v", runtimeapi.RuntimeReady, st.GetStatus())
}

// importImages builds PauseImage and ProbeImage and imports them into
// containerd's k8s.io namespace (the CRI's), returning their names.
func (n *RealNode) importImages(bins Binaries) ([]string, error) {
	script, err := findBuildScript()
	if err != nil {
		return nil, err
	}
	moduleDir := filepath.Dir(filepath.Dir(script))
	dir := filepath.Join(n.Dir, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	archives, err := buildPodImages(moduleDir, dir)
	if err != nil {
		return nil, err
	}
	for _, a := range archives {
		cmd := exec.Command(bins.Path(CtrBinary), "--address", n.containerdSock, "--namespace", "k8s.io", "images", "import", a)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("ctr images import %s: %w\n%s", a, err, out)
		}
	}
	var refs []string
	for _, im := range podImages {
		refs = append(refs, im.ref)
	}
	return refs, nil
}

// writeKubeletConfig writes the kubelet's configuration and command line.
func (n *RealNode) writeKubeletConfig() error {
	port, err := FreePort()
	if err != nil {
		return fmt.Errorf("choosing the kubelet's port: %w", err)
	}
	healthz, err := FreePort()
	if err != nil {
		return fmt.Errorf("choosing the kubelet's healthz port: %w", err)
	}
	n.healthURL = fmt.Sprintf("http://127.0.0.1:%d/healthz", healthz)
	cfg := filepath.Join(n.Dir, "kubelet.yaml")
	// cgroupfs without per-QoS cgroups (no systemd); evictions only at
	// the very end of resources, and no image garbage collection, so a
	// busy CI disk takes none of the node's pods or images.
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
podLogsDir: %s
staticPodPath: ""
resolvConf: ""
nodeStatusUpdateFrequency: 1s
nodeStatusReportFrequency: 1s
syncFrequency: 5s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
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
`, port, healthz, n.containerdSock, n.PodLogsDir)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return fmt.Errorf("writing the kubelet configuration: %w", err)
	}
	n.kubeletArgs = []string{
		"--config", cfg,
		"--kubeconfig", n.api.KubeconfigPath,
		"--hostname-override", n.Name,
		"--node-ip", "127.0.0.1",
		"--root-dir", "/var/lib/kubelet",
		"--v", "2",
	}
	return nil
}

// startKubelet starts the kubelet in the node's mount namespace; it lives
// as long as the test that started the node.
func (n *RealNode) startKubelet(t testing.TB, bins Binaries) {
	p := StartProcess(t, ProcessSpec{
		Name:      "kubelet",
		Path:      "nsenter",
		Args:      append(n.nsenter(), append([]string{bins.Path(KubeletBinary)}, n.kubeletArgs...)...),
		StopGrace: realNodeStopGrace,
	})
	n.mu.Lock()
	n.kubelet = p
	n.mu.Unlock()
}

// Kubelet returns the running kubelet process.
func (n *RealNode) Kubelet() *Process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.kubelet
}

// waitKubelet waits until the kubelet answers /healthz, has registered
// the Node and serves its device-plugin registration socket.
func (n *RealNode) waitKubelet(ctx context.Context) error {
	k := n.Kubelet()
	if err := waitHTTPOK(ctx, k, n.healthURL); err != nil {
		return fmt.Errorf("the kubelet: %w", err)
	}
	err := poll(ctx, func() (bool, string, error) {
		if !k.Running() {
			return false, "", fmt.Errorf("the kubelet exited: %v", k.ExitErr())
		}
		if _, err := n.api.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
			return false, "node: " + err.Error(), nil
		}
		_, err := os.Stat(filepath.Join(n.DevicePluginDir, KubeletSocketName))
		return err == nil, fmt.Sprint(err), nil
	})
	if err != nil {
		return fmt.Errorf("the kubelet did not register node %s and serve %s: %w", n.Name, filepath.Join(n.DevicePluginDir, KubeletSocketName), err)
	}
	return nil
}

// RestartKubelet stops the kubelet (SIGTERM) and starts it again with the
// same configuration and state, as a node's kubelet upgrade or crash loop
// does; running containers are not touched. It returns once the new
// kubelet serves its device-plugin socket again (a new socket: plugins
// must register again) and has registered the Node.
func (n *RealNode) RestartKubelet(t testing.TB) {
	t.Helper()
	old := n.Kubelet()
	sock := filepath.Join(n.DevicePluginDir, KubeletSocketName)
	if err := old.Stop(); err != nil {
		t.Fatalf("stopping the kubelet: %v", err)
	}
	// The stopped kubelet leaves its socket; the new one replaces it, so
	// its appearing marks the new kubelet's device manager (an inode
	// number can come back).
	if err := os.Remove(sock); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	bins := RequireBinaries(t, KubeletBinary)
	n.startKubelet(n.owner, bins)
	ctx, cancel := context.WithTimeout(context.Background(), realNodeStartTimeout)
	defer cancel()
	if err := n.waitKubelet(ctx); err != nil {
		t.Fatal(err)
	}
}

// PodResources returns what the kubelet's pod-resources API (List) says
// the pod's containers hold: devices of device plugins and DRA claims'
// CDI devices, as monitoring agents read them.
func (n *RealNode) PodResources(ctx context.Context, pod *corev1.Pod) (*podresourcesapi.PodResources, error) {
	sock := filepath.Join(n.KubeletDir, "pod-resources", "kubelet.sock")
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("the kubelet's pod-resources List at %s: %w", sock, err)
	}
	for _, p := range resp.GetPodResources() {
		if p.GetNamespace() == pod.Namespace && p.GetName() == pod.Name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("the kubelet's pod-resources List has no pod %s/%s", pod.Namespace, pod.Name)
}

// removeSandboxes stops and removes every pod sandbox through the CRI, so
// containerd's shims and runc's containers end with the node.
func (n *RealNode) removeSandboxes() {
	c, closeConn, err := n.cri()
	if err != nil {
		return
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return
	}
	for _, s := range list.GetItems() {
		_, _ = c.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id})
		_, _ = c.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id})
	}
}

// killLeftovers ends what containerd left behind: runc's containers under
// the node's runc root (deleted by force), then every process still in
// the node's mount namespace but its holder (shims that did not exit),
// and removes containerd's cgroup parent (cgroupfs: /k8s.io in every
// hierarchy) where no container of anyone's is left in it.
func (n *RealNode) killLeftovers() {
	defer func() {
		parents, _ := filepath.Glob("/sys/fs/cgroup/*/k8s.io")
		for _, p := range parents {
			_ = syscall.Rmdir(p) // fails, as wanted, while it holds a cgroup
		}
	}()
	nsRoots, _ := os.ReadDir(n.runcRoot)
	for _, ns := range nsRoots {
		root := filepath.Join(n.runcRoot, ns.Name())
		ids, _ := os.ReadDir(root)
		for _, id := range ids {
			_ = exec.Command(n.runc, "--root", root, "delete", "--force", id.Name()).Run()
		}
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == n.nsPid {
			continue
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && ns == n.nsID {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// ensureDefaultServiceAccount creates the default namespace's default
// service account, which pod admission wants and which no controller
// makes here.
func ensureDefaultServiceAccount(ctx context.Context, api *APIServer) error {
	_, err := api.Client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating service account %s/default: %w", metav1.NamespaceDefault, err)
	}
	return nil
}
