package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/featureplug/featureplug/test/harness"
	"github.com/featureplug/featureplug/test/harness/podprobe"
)

// End to end with pods that really run: featureplug next to a real kubelet
// and containerd 2 with runc (harness.RealNode), each check made from
// inside the container by the probe image (harness/podprobe), through
// every way featureplug hands devices to a container.

// podsNode is the Node the real kubelet registers.
const podsNode = "pods-node"

// Resources of the example rules (manifests/examples/rules) on the tests'
// fake nodes.
const (
	// podsA100 are GPUs 1-3 of draE2EFakeNode under
	// per-model-time-slicing.yaml.
	podsA100 = "nvidia.com/a100-sxm4-80gb"
	// podsMIG are GPU 0's two MIG devices there.
	podsMIG = "nvidia.com/mig-3g.40gb"
	// podsMPS are dgx-h100's GPUs shared four ways by MPS under
	// mps-inference-pool.yaml, on a node labelled podsMPSPool.
	podsMPS     = "nvidia.com/h100.mps"
	podsMPSPool = "example.com/pool"
)

// podsControlNodes are the control device nodes every container with a
// GPU of the fake driver root gets (plugin/cdi.Root).
var podsControlNodes = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// podsRoundsEnv sets how many pods each path runs (default 1); the
// figures of docs/performance.md are medians of 5.
const podsRoundsEnv = "FEATUREPLUG_PODS_ROUNDS"

// podsRun is the shared state of TestPodsRun's subtests: one API server
// and one real node for all of them, each subtest with its own agent.
type podsRun struct {
	api         *harness.APIServer
	node        *harness.RealNode
	driverRoots string // the agents' fake driver roots, one per fake node
	rounds      int

	mu      sync.Mutex
	figures map[string][]time.Duration // path -> pod bound to container running
	paths   []string                   // in the order first measured
}

// TestPodsRun runs pods on a real kubelet and containerd 2 and checks,
// from inside each container, what featureplug gave it:
//
//   - device plugin, cdi-cri: a pod asking for nvidia.com/a100-sxm4-80gb
//     (manifests/examples/rules/per-model-time-slicing.yaml) gets exactly
//     its GPU's device node, the control devices, the driver's files (the
//     host's own files, by device and inode) and the environment of
//     featureplug's CDI spec, and no other GPU's node; a pod asking for a
//     MIG device gets the parent GPU's node and exactly that device's GPU-
//     and compute-instance capability nodes;
//   - cdi-annotations: the same, through the annotations containerd
//     resolves;
//   - envvar: NVIDIA_VISIBLE_DEVICES names exactly the allocated GPUs and
//     nothing else reaches the container (without NVIDIA's runtime hook
//     the variable is all there is);
//   - MPS (mps-inference-pool.yaml on an 8x H100 node in the pool): the
//     pipe directory, the daemons' shared /dev/shm (a file the container
//     writes there is on the host) and the CUDA_MPS_* limits of a quarter
//     GPU;
//   - DRA: a pod with a ResourceClaim and one asking for an extended
//     resource of a DeviceClass's extendedResourceName run through the
//     kubelet's DRA manager with the claim's CDI devices;
//   - dynamic MIG (a fake H100 partitioned on demand): a pod asking for
//     nvidia.com/mig-1g.10gb, or with a ResourceClaim of its class, gets
//     the MIG device created for it at the placement the scheduler chose
//     (its GPU's node and exactly that device's capability nodes, its CDI
//     spec), the fake NVML holds exactly that device while the pod runs,
//     and none once the pod is deleted; two such pods at once get two MIG
//     devices at different placements, each container only its own;
//   - health: XID 79 on a running pod's GPU takes it out of the kubelet's
//     allocatable, leaves the running container alone, and the next pod
//     gets healthy GPUs;
//   - restart: with the agent killed (SIGKILL) under a running pod and the
//     kubelet restarted, the pod keeps running and a new pod gets a
//     correct, different GPU.
//
// Each path's pod bound -> container running time (the probe's own start)
// is logged at the end; FEATUREPLUG_PODS_ROUNDS=5 runs five pods per path
// for the medians of docs/performance.md.
func TestPodsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, kube-scheduler, kube-controller-manager, containerd, the kubelet and featureplug")
	}
	if why := harness.RealNodeUnavailable(); why != "" {
		t.Skip(why)
	}
	rounds := 1
	if v := os.Getenv(podsRoundsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number of pods per path", podsRoundsEnv, v)
		}
		rounds = n
	}
	api := harness.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := api.CreateNamespace(ctx, agentNamespace); err != nil {
		t.Fatal(err)
	}
	p := &podsRun{
		api:         api,
		node:        harness.StartRealNode(t, api, podsNode),
		driverRoots: shortTempDir(t),
		rounds:      rounds,
		figures:     map[string][]time.Duration{},
	}
	p.baseline(t)
	t.Run("DevicePluginCDICRI", p.testCDICRI)
	t.Run("DevicePluginCDIAnnotations", p.testCDIAnnotations)
	t.Run("DevicePluginEnvvar", p.testEnvvar)
	t.Run("MPS", p.testMPS)
	t.Run("DRA", p.testDRA)
	t.Run("DynamicMIG", p.testDynamicMIG)
	t.Run("Health", p.testHealth)
	// Last: it restarts the kubelet.
	t.Run("Restart", p.testRestart)
	p.logFigures(t)
}

// startAgent runs featureplug for the node with the fake node and rules
// given, serving through the kubelet's device-plugin directory with the
// device-list strategy given, its CDI spec in containerd's spec directory
// and the fake driver root of its fake node (kept across agents, as a
// host's driver is). It lives as long as t.
func (p *podsRun) startAgent(t *testing.T, fakeNode, rules, strategy string, extra ...string) *agent {
	t.Helper()
	p.waitNoDevices(t)
	return startAgent(t, agentSpec{
		Node:       podsNode,
		FakeNode:   fakeNode,
		Rules:      rules,
		KubeletDir: p.node.DevicePluginDir,
		Kubeconfig: p.api.KubeconfigPath,
		Namespace:  agentNamespace,
		Extra: append([]string{
			"--device-list-strategy", strategy,
			"--cdi-spec-dir", p.node.CDISpecDir,
			"--driver-root", filepath.Join(p.driverRoots, filepath.Base(fakeNode)),
			"--rediscover-interval", "1h",
		}, extra...),
	})
}

// waitAllocatable waits until the kubelet reports n of res allocatable in
// the Node's status.
func (p *podsRun) waitAllocatable(t *testing.T, res string, n int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err := p.api.WaitNode(ctx, podsNode, func(nd *corev1.Node) (bool, string) {
		c, a := nd.Status.Capacity[corev1.ResourceName(res)], nd.Status.Allocatable[corev1.ResourceName(res)]
		return a.Value() == n, fmt.Sprintf("%s capacity %s, allocatable %s", res, c.String(), a.String())
	})
	if err != nil {
		t.Fatalf("node %s: waiting for %d %s allocatable: %v", podsNode, n, res, err)
	}
}

// waitNoDevices waits until the Node's status shows none of the
// resources an earlier agent served allocatable: once that agent is gone
// the kubelet takes them away, and a count a new agent's devices must
// reach is not the old agent's.
func (p *podsRun) waitNoDevices(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err := p.api.WaitNode(ctx, podsNode, func(nd *corev1.Node) (bool, string) {
		for name, q := range nd.Status.Allocatable {
			if (strings.HasPrefix(string(name), "nvidia.com/") || strings.HasPrefix(string(name), "example.com/")) && !q.IsZero() {
				return false, fmt.Sprintf("%s allocatable %s", name, q.String())
			}
		}
		return true, ""
	})
	if err != nil {
		t.Fatalf("node %s: the devices of an earlier agent are still allocatable: %v", podsNode, err)
	}
}

// podsLimits makes a probe pod's container ask for n of res.
func podsLimits(pod *corev1.Pod, res string, n int64) *corev1.Pod {
	q := *resource.NewQuantity(n, resource.DecimalSI)
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(res): q}
	return pod
}

// run creates pod and returns the probe's report and the pod once the
// probe reported, recording the time from the pod's binding (its creation
// when it names its node; else the binding the test watched) to the
// probe's start under path (unless path is ""). The pod is deleted when t
// ends.
func (p *podsRun) run(t *testing.T, path string, pod *corev1.Pod) (*podprobe.Report, *corev1.Pod) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	pods := p.api.Client.CoreV1().Pods(pod.Namespace)
	var bound <-chan time.Time
	if pod.Spec.NodeName == "" {
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", pod.Name).String()})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		bound = podsWatchBound(w)
	}
	created := time.Now()
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
	t.Cleanup(func() { p.delete(t, pod.Name) })
	r, got, err := p.node.WaitProbe(ctx, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	at := created
	if bound != nil {
		select {
		case at = <-bound:
		case <-ctx.Done():
			t.Fatalf("pod %s runs but its binding was not seen", pod.Name)
		}
	}
	if path != "" {
		p.record(path, r.Started.Sub(at))
	}
	return r, got
}

// podsWatchBound sends the time the watched pod is first seen bound to a
// node.
func podsWatchBound(w watch.Interface) <-chan time.Time {
	out := make(chan time.Time, 1)
	go func() {
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
				out <- time.Now()
				return
			}
		}
	}()
	return out
}

// delete deletes the pod at once (no grace) and waits until the kubelet
// has let it go (its pod-resources API lists it no more), so its devices
// are free again.
func (p *podsRun) delete(t *testing.T, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	pods := p.api.Client.CoreV1().Pods(metav1.NamespaceDefault)
	pod, err := pods.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Errorf("deleting pod %s: %v", name, err)
		return
	}
	zero := int64(0)
	if err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting pod %s: %v", name, err)
		return
	}
	if err := waitFor(ctx, func() (bool, string) {
		_, err := p.node.PodResources(ctx, pod)
		return err != nil && strings.Contains(err.Error(), "has no pod"), fmt.Sprintf("pod-resources: %v", err)
	}); err != nil {
		t.Errorf("the kubelet still holds deleted pod %s: %v", name, err)
	}
}

// record adds one measurement of path.
func (p *podsRun) record(path string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.figures[path]; !ok {
		p.paths = append(p.paths, path)
	}
	p.figures[path] = append(p.figures[path], d)
}

// logFigures logs each path's pod bound -> container running times.
func (p *podsRun) logFigures(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "pod bound -> container running with its devices (%d pod(s) per path):\n", p.rounds)
	fmt.Fprintf(&b, "  %-40s %5s %9s %9s %9s\n", "PATH", "PODS", "MEDIAN", "MIN", "MAX")
	for _, path := range p.paths {
		ds := slices.Clone(p.figures[path])
		slices.Sort(ds)
		fmt.Fprintf(&b, "  %-40s %5d %9s %9s %9s\n", path, len(ds),
			ds[len(ds)/2].Round(time.Millisecond), ds[0].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
	t.Log(b.String())
}

// allocated returns the device IDs of res the kubelet gave the pod's probe
// container, from its pod-resources API.
func (p *podsRun) allocated(t *testing.T, pod *corev1.Pod, res string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	pr, err := p.node.PodResources(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range pr.GetContainers() {
		if c.GetName() != harness.ProbeContainer {
			continue
		}
		for _, d := range c.GetDevices() {
			if d.GetResourceName() == res {
				ids = append(ids, d.GetDeviceIds()...)
			}
		}
	}
	sort.Strings(ids)
	return ids
}

// baseline runs pods with no device, the floor of every path's figure,
// after one not measured: the node's first pod sets up what the others
// find ready.
func (p *podsRun) baseline(t *testing.T) {
	for i := range p.rounds + 1 {
		path := "no device (floor)"
		if i == 0 {
			path = ""
		}
		r, _ := p.run(t, path, p.node.ProbePod(fmt.Sprintf("baseline-%d", i)))
		if nodes := r.DevicePaths("/dev/nvidia"); len(nodes) > 0 {
			t.Errorf("a pod asking for no GPU has GPU device nodes %v", nodes)
		}
		p.delete(t, fmt.Sprintf("baseline-%d", i))
	}
}

// checkCDI checks that the container saw exactly the device nodes of the
// devices ids (their GPU's, their MIG capabilities', the control
// devices), each a character device, and the mounts and environment the
// agent's CDI spec gives them: every mount is the host's own file.
func (p *podsRun) checkCDI(t *testing.T, pod string, r *podprobe.Report, ids []string, devs map[string]cdiDevice) {
	t.Helper()
	want := slices.Clone(podsControlNodes)
	for _, id := range ids {
		d, ok := devs[id]
		if !ok {
			t.Fatalf("pod %s: allocated device %s is none of the fake node's", pod, id)
		}
		want = append(want, d.wantNodes()...)
	}
	slices.Sort(want)
	got := r.DevicePaths("/dev/nvidia")
	if !slices.Equal(got, want) {
		t.Errorf("pod %s (devices %v): device nodes in the container %v, want %v", pod, ids, got, want)
	}
	for _, n := range got {
		if d := r.Devices[n]; d.Type != "c" {
			t.Errorf("pod %s: %s is %+v in the container, want a character device", pod, n, d)
		}
	}
	cache := cdiLoad(t, p.node.CDISpecDir)
	mounts, env := 0, 0
	for i, id := range ids {
		d := cache.GetDevice(cdiKind + "=" + id)
		if d == nil {
			t.Fatalf("pod %s: device %s is not in the CDI spec (devices %v)", pod, id, cache.ListDevices())
		}
		edits := []specs.ContainerEdits{d.ContainerEdits}
		if i == 0 {
			edits = append(edits, d.GetSpec().ContainerEdits)
		}
		for _, e := range edits {
			for _, kv := range e.Env {
				k, v, _ := strings.Cut(kv, "=")
				if got, ok := r.Env[k]; !ok || got != v {
					t.Errorf("pod %s: %s=%q in the container (set %v), want %q from the CDI spec", pod, k, got, ok, v)
				}
				env++
			}
			for _, m := range e.Mounts {
				checkSameFile(t, pod, r, m.ContainerPath, m.HostPath)
				mounts++
			}
		}
	}
	t.Logf("pod %s: devices %v; in the container: device nodes %v, %d mounts and %d variables of the CDI spec, NVIDIA_VISIBLE_DEVICES=%s",
		pod, ids, got, mounts, env, r.Env["NVIDIA_VISIBLE_DEVICES"])
}

// checkSameFile checks that the container's mount at target shows the
// host's file or directory host (same device and inode).
func checkSameFile(t *testing.T, pod string, r *podprobe.Report, target, host string) {
	t.Helper()
	m, ok := r.Mount(target)
	if !ok {
		t.Errorf("pod %s: nothing is mounted at %s in the container (want the host's %s)", pod, target, host)
		return
	}
	var st syscall.Stat_t
	if err := syscall.Stat(host, &st); err != nil {
		t.Errorf("pod %s: %v", pod, err)
		return
	}
	if m.Dev != st.Dev || m.Ino != st.Ino {
		t.Errorf("pod %s: %s in the container is device %d inode %d, want the host's %s (device %d inode %d)", pod, target, m.Dev, m.Ino, host, st.Dev, st.Ino)
	}
}

// exampleRules returns the path of a rules file of manifests/examples.
func exampleRules(name string) string {
	return filepath.Join(build.root, "manifests", "examples", "rules", name)
}

// podsFakeNode is the fake node of the device-plugin paths
// (draE2EFakeNode: GPU 0 with two 3g.40gb MIG devices, GPUs 1-3
// A100-SXM4-80GB, GPU 4 an A100-SXM4-40GB, GPU 5 an L40S).
func podsFakeNode() string { return filepath.Join(build.root, "test", "e2e", draE2EFakeNode) }

// cdiStrategy runs a pod of one A100 and one of a MIG device with the
// agent on a CDI device-list strategy, and checks their containers.
func (p *podsRun) cdiStrategy(t *testing.T, strategy string) {
	p.startAgent(t, podsFakeNode(), exampleRules("per-model-time-slicing.yaml"), strategy)
	p.waitAllocatable(t, podsA100, 3)
	p.waitAllocatable(t, podsMIG, 2)
	devs := cdiDiscover(t, podsFakeNode())
	for i := range p.rounds {
		name := fmt.Sprintf("%s-a100-%d", strategy, i)
		r, pod := p.run(t, "device plugin "+strategy, podsLimits(p.node.ProbePod(name), podsA100, 1))
		ids := p.allocated(t, pod, podsA100)
		if len(ids) != 1 {
			t.Fatalf("pod %s got %s devices %v, want 1", name, podsA100, ids)
		}
		p.checkCDI(t, name, r, ids, devs)
		p.delete(t, name)

		name = fmt.Sprintf("%s-mig-%d", strategy, i)
		r, pod = p.run(t, "device plugin "+strategy+", MIG", podsLimits(p.node.ProbePod(name), podsMIG, 1))
		ids = p.allocated(t, pod, podsMIG)
		if len(ids) != 1 || !devs[ids[0]].mig {
			t.Fatalf("pod %s got %s devices %v, want one MIG device", name, podsMIG, ids)
		}
		p.checkCDI(t, name, r, ids, devs)
		p.delete(t, name)
	}
}

func (p *podsRun) testCDICRI(t *testing.T) { p.cdiStrategy(t, "cdi-cri") }

func (p *podsRun) testCDIAnnotations(t *testing.T) { p.cdiStrategy(t, "cdi-annotations") }

// testEnvvar: two A100s by NVIDIA_VISIBLE_DEVICES alone.
func (p *podsRun) testEnvvar(t *testing.T) {
	p.startAgent(t, podsFakeNode(), exampleRules("per-model-time-slicing.yaml"), "envvar")
	p.waitAllocatable(t, podsA100, 3)
	for i := range p.rounds {
		name := fmt.Sprintf("envvar-%d", i)
		r, pod := p.run(t, "device plugin envvar", podsLimits(p.node.ProbePod(name), podsA100, 2))
		ids := p.allocated(t, pod, podsA100)
		if len(ids) != 2 {
			t.Fatalf("pod %s got %s devices %v, want 2", name, podsA100, ids)
		}
		visible := strings.Split(r.Env["NVIDIA_VISIBLE_DEVICES"], ",")
		sort.Strings(visible)
		if !slices.Equal(visible, ids) {
			t.Errorf("pod %s: NVIDIA_VISIBLE_DEVICES=%q in the container, want the allocated %v", name, r.Env["NVIDIA_VISIBLE_DEVICES"], ids)
		}
		// Without NVIDIA's runtime hook, nothing acts on the variable.
		if nodes := r.DevicePaths("/dev/nvidia"); len(nodes) > 0 {
			t.Errorf("pod %s: device nodes %v in the container with the envvar strategy, want none", name, nodes)
		}
		for _, m := range r.Mounts {
			if strings.Contains(m.Target, "nvidia") || strings.Contains(m.Target, "libcuda") {
				t.Errorf("pod %s: driver file mounted at %s with the envvar strategy", name, m.Target)
			}
		}
		t.Logf("pod %s: devices %v; in the container: NVIDIA_VISIBLE_DEVICES=%s and no device node", name, ids, r.Env["NVIDIA_VISIBLE_DEVICES"])
		p.delete(t, name)
	}
}

// testMPS: a quarter of an H100 through MPS.
func (p *podsRun) testMPS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// The example's rule shares the H100s of the inference pool.
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"inference"}}}`, podsMPSPool)
	if _, err := p.api.Client.CoreV1().Nodes().Patch(ctx, podsNode, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	mpsRoot := shortTempDir(t) // the daemons' sockets need a short path
	p.startAgent(t, "dgx-h100", exampleRules("mps-inference-pool.yaml"), "cdi-cri",
		append([]string{"--mps-root", mpsRoot}, mpsControlFlags(t)...)...)
	p.waitAllocatable(t, podsMPS, 8*4)
	inv := discoverMemory(t, "dgx-h100")
	devs := cdiDiscover(t, "dgx-h100")
	pipe := filepath.Join(mpsRoot, strings.ReplaceAll(podsMPS, "/", "_"), "pipe")
	shm := filepath.Join(mpsRoot, "shm")
	for i := range p.rounds {
		name := fmt.Sprintf("mps-%d", i)
		touched := "/dev/shm/" + name
		r, pod := p.run(t, "device plugin MPS (cdi-cri)", podsLimits(p.node.ProbePod(name, "-touch", touched), podsMPS, 1))
		ids := p.allocated(t, pod, podsMPS)
		if len(ids) != 1 {
			t.Fatalf("pod %s got %s devices %v, want 1 replica", name, podsMPS, ids)
		}
		uuid, _, _ := strings.Cut(ids[0], "::")
		p.checkCDI(t, name, r, []string{uuid}, devs)
		for k, want := range map[string]string{
			"CUDA_MPS_PIPE_DIRECTORY":           pipe,
			"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
			"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  fmt.Sprintf("0=%dM", inv[uuid]/4),
		} {
			if got := r.Env[k]; got != want {
				t.Errorf("pod %s: %s=%q in the container, want %q", name, k, got, want)
			}
		}
		checkSameFile(t, name, r, pipe, pipe)
		checkSameFile(t, name, r, "/dev/shm", shm)
		if e, ok := r.Touched[touched]; !ok || e != "" {
			t.Errorf("pod %s: writing %s in the container: %q", name, touched, e)
		} else if _, err := os.Stat(filepath.Join(shm, name)); err != nil {
			t.Errorf("pod %s: the file the container wrote into /dev/shm is not in the daemons' %s: %v", name, shm, err)
		}
		t.Logf("pod %s: replica %s; in the container: CUDA_MPS_PIPE_DIRECTORY=%s, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%s, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%s, /dev/shm the daemons' %s",
			name, ids[0], r.Env["CUDA_MPS_PIPE_DIRECTORY"], r.Env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], r.Env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], shm)
		p.delete(t, name)
	}
}

// discoverMemory returns each GPU's memory in MiB, by UUID, from
// `featureplug discover`.
func discoverMemory(t *testing.T, fakeNode string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, g := range discover(t, fakeNode).GPUs {
		out[g.UUID] = g.MemoryMiB
	}
	return out
}

// testDRA: a ResourceClaim and an extended resource of a DeviceClass,
// through the kubelet's DRA manager.
func (p *podsRun) testDRA(t *testing.T) {
	dir := shortTempDir(t)
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte(draE2ERules("")), 0o644); err != nil {
		t.Fatal(err)
	}
	a := p.startAgent(t, podsFakeNode(), rules, "cdi-cri",
		"--serve", "dra",
		"--kubelet-registry-dir", p.node.PluginRegistryDir,
		"--dra-plugin-dir", filepath.Join(p.node.PluginsDir, draE2EDriver))
	a.waitMetric(t, "featureplug_dra_registered", func(v float64) bool { return v == 1 })
	draE2ECreateClasses(t, p.api, rules)
	draE2ECreateAnyClass(t, p.api)
	harness.StartScheduler(t, p.api)
	// The claim controller takes a deleted pod's claims back (and the
	// garbage collector the claims the scheduler made for extended
	// resources), so each round finds its device free again.
	harness.StartControllerManager(t, p.api, harness.ResourceClaimController)

	inv := discover(t, podsFakeNode())
	devs := cdiDiscover(t, podsFakeNode())
	a100 := draE2EDeviceUUIDs(t, inv, []int{1, 2, 3}, -1)
	l40s := draE2EDeviceUUIDs(t, inv, []int{5}, -1)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	claims := p.api.Client.ResourceV1().ResourceClaims(draE2ENamespace)
	for i := range p.rounds {
		claim := fmt.Sprintf("l40s-%d", i)
		cel := draE2EAttr("type") + ` == "gpu" && ` + draE2EAttr("product") + `.matches("L40S")`
		if _, err := claims.Create(ctx, draE2EClaim(claim, cel), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("dra-claim-%d", i)
		pod := p.node.ProbePod(name)
		pod.Spec.NodeName = ""
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim}}
		pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
		r, _ := p.run(t, "DRA ResourceClaim", pod)
		p.checkCDI(t, name, r, p.draDevices(t, claim, l40s), devs)
		p.delete(t, name)
		if err := claims.Delete(ctx, claim, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}

		name = fmt.Sprintf("dra-ext-%d", i)
		pod = podsLimits(p.node.ProbePod(name), draE2EA100, 1)
		pod.Spec.NodeName = ""
		r, got := p.run(t, "DRA extendedResourceName", pod)
		if got.Status.ExtendedResourceClaimStatus == nil {
			t.Fatalf("pod %s asking for %s runs without the claim the scheduler makes", name, draE2EA100)
		}
		p.checkCDI(t, name, r, p.draDevices(t, got.Status.ExtendedResourceClaimStatus.ResourceClaimName, a100), devs)
		p.delete(t, name)
	}
}

// podsDynMIGRules partition every H100 on demand into 1g.10gb devices
// only (no whole GPU: the DRA path's classes stay the only others).
var podsDynMIGRules = dynE2ERulesFor("[1g.10gb]", "")

// testDynamicMIG: a MIG device created at Prepare for a pod asking for
// the extended resource of a profile's DeviceClass, or with a ResourceClaim
// of that class, destroyed when the pod is deleted; then two such pods at
// once.
func (p *podsRun) testDynamicMIG(t *testing.T) {
	dir := shortTempDir(t)
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte(podsDynMIGRules), 0o644); err != nil {
		t.Fatal(err)
	}
	fakeNode := filepath.Join(build.root, "test", "e2e", dynE2EFakeNode)
	a := p.startAgent(t, fakeNode, rules, "cdi-cri",
		"--serve", "dra",
		"--kubelet-registry-dir", p.node.PluginRegistryDir,
		"--dra-plugin-dir", filepath.Join(p.node.PluginsDir, draE2EDriver))
	a.waitMetric(t, "featureplug_dra_registered", func(v float64) bool { return v == 1 })
	classes := draE2ECreateClasses(t, p.api, rules)
	harness.StartScheduler(t, p.api)
	harness.StartControllerManager(t, p.api, harness.ResourceClaimController)

	class := ""
	for _, c := range classes {
		if c.Spec.ExtendedResourceName != nil && *c.Spec.ExtendedResourceName == dynE2E1g {
			class = c.Name
		}
	}
	if class == "" {
		t.Fatalf("featureplug dra classes made no DeviceClass for %s of %s", dynE2E1g, rules)
	}
	m := podsDynMIG{driverRoot: filepath.Join(p.driverRoots, filepath.Base(fakeNode))}
	m.minor = cdiDiscover(t, fakeNode)[discover(t, fakeNode).GPUs[0].UUID].gpuMinor
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	claims := p.api.Client.ResourceV1().ResourceClaims(draE2ENamespace)
	for i := range p.rounds {
		// -wait keeps the containers running: their claims stay prepared.
		name := fmt.Sprintf("dynmig-ext-%d", i)
		pod := podsLimits(p.node.ProbePod(name, "-wait"), dynE2E1g, 1)
		pod.Spec.NodeName = ""
		ext := p.startDynMIG(t, "DRA dynamic MIG, extendedResourceName", pod, "")
		p.checkDynMIG(t, m, ext)
		p.deleteDynMIG(t, m, ext)

		claim := draE2EClaim(fmt.Sprintf("dynmig-%d", i), "")
		claim.Spec.Devices.Requests[0].Exactly.DeviceClassName = class
		claim.Spec.Devices.Requests[0].Exactly.Selectors = nil
		if _, err := claims.Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		name = fmt.Sprintf("dynmig-claim-%d", i)
		pod = p.node.ProbePod(name, "-wait")
		pod.Spec.NodeName = ""
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim.Name}}
		pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
		own := p.startDynMIG(t, "DRA dynamic MIG, ResourceClaim", pod, claim.Name)
		p.checkDynMIG(t, m, own)
		p.deleteDynMIG(t, m, own)
		if err := claims.Delete(ctx, claim.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Two at once: two MIG devices at placements that do not overlap, each
	// container seeing only its own.
	var pair []*podsDynMIGPod
	for _, name := range []string{"dynmig-pair-a", "dynmig-pair-b"} {
		pod := podsLimits(p.node.ProbePod(name, "-wait"), dynE2E1g, 1)
		pod.Spec.NodeName = ""
		pair = append(pair, p.startDynMIG(t, "", pod, ""))
	}
	if pair[0].start == pair[1].start {
		t.Fatalf("pods %s and %s were both allocated memory slice %d (%s, %s)", pair[0].name, pair[1].name, pair[0].start, pair[0].device, pair[1].device)
	}
	p.checkDynMIG(t, m, pair...)
	p.deleteDynMIG(t, m, pair...)
}

// podsDynMIG is the fake H100 of the dynamic MIG path.
type podsDynMIG struct {
	driverRoot string // its fake driver root, which holds its NVML's MIG state
	minor      int    // its device node's minor
}

// podsDynMIGPod is a running pod of the dynamic MIG path: its claim, the
// placement device allocated to it, what its container reported, and the
// MIG device created for it once checked.
type podsDynMIGPod struct {
	name, claim, device string
	profile             uint32
	start               int
	report              *podprobe.Report
	mig                 dynE2EMIG
}

// startDynMIG runs pod, whose claim (the one the scheduler makes for its
// extended resource when claim is "") asks for one dynamic MIG device,
// recording its bound -> running time under path (unless ""), and reads
// the placement allocated.
func (p *podsRun) startDynMIG(t *testing.T, path string, pod *corev1.Pod, claim string) *podsDynMIGPod {
	t.Helper()
	r, got := p.run(t, path, pod)
	if claim == "" {
		if got.Status.ExtendedResourceClaimStatus == nil {
			t.Fatalf("pod %s asking for %s runs without the claim the scheduler makes", pod.Name, dynE2E1g)
		}
		claim = got.Status.ExtendedResourceClaimStatus.ResourceClaimName
	}
	devs := draE2EAllocated(t, p.api, podsNode, claim)
	if len(devs) != 1 {
		t.Fatalf("pod %s: claim %s allocated %v, want one device", pod.Name, claim, devs)
	}
	profile, start, ok := dynE2EPlacement(devs[0])
	if !ok {
		t.Fatalf("pod %s: claim %s was allocated %s, which is no placement device", pod.Name, claim, devs[0])
	}
	return &podsDynMIGPod{name: pod.Name, claim: claim, device: devs[0], profile: profile, start: start, report: r}
}

// checkDynMIG checks that the fake NVML holds exactly one MIG device per
// running pod, at the placement allocated to it, and that each container
// sees exactly its own through its claim's CDI spec.
func (p *podsRun) checkDynMIG(t *testing.T, m podsDynMIG, running ...*podsDynMIGPod) {
	t.Helper()
	migs := dynE2EReadMIG(t, m.driverRoot)
	if len(migs) != len(running) {
		t.Fatalf("%d pod(s) run with dynamic MIG devices: the fake NVML holds MIG devices %+v", len(running), migs)
	}
	for _, r := range running {
		i := slices.IndexFunc(migs, func(g dynE2EMIG) bool { return g.Start == r.start && g.ProfileID == r.profile && g.UUID != "" })
		if i < 0 {
			t.Fatalf("pod %s runs with placement %s: the fake NVML holds MIG devices %+v, none of profile %d at memory slice %d", r.name, r.device, migs, r.profile, r.start)
		}
		r.mig = migs[i]
		p.checkCDI(t, r.name, r.report, []string{r.mig.UUID}, map[string]cdiDevice{r.mig.UUID: {
			uuid: r.mig.UUID, gpuMinor: m.minor, mig: true, gi: int(r.mig.GPUInstanceID), ci: int(r.mig.ComputeInstanceID),
		}})
		t.Logf("pod %s: claim %s allocated %s, MIG device %s (GPU instance %d, compute instance %d) created for it",
			r.name, r.claim, r.device, r.mig.UUID, r.mig.GPUInstanceID, r.mig.ComputeInstanceID)
	}
}

// deleteDynMIG deletes the checked pods and checks that their MIG devices
// are destroyed, and their CDI specs gone, once the kubelet let them go.
func (p *podsRun) deleteDynMIG(t *testing.T, m podsDynMIG, pods ...*podsDynMIGPod) {
	t.Helper()
	for _, r := range pods {
		p.delete(t, r.name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// The kubelet unprepares a claim once the pod's containers are gone,
	// on its own schedule.
	if err := waitFor(ctx, func() (bool, string) {
		left := dynE2EReadMIG(t, m.driverRoot)
		return len(left) == 0, fmt.Sprintf("MIG devices %+v", left)
	}); err != nil {
		t.Fatalf("pods deleted: their MIG devices are not destroyed: %v", err)
	}
	cache := cdiLoad(t, p.node.CDISpecDir)
	for _, r := range pods {
		if d := cache.GetDevice(cdiKind + "=" + r.mig.UUID); d != nil {
			t.Errorf("pod %s deleted and its MIG device %s destroyed: the device is still in CDI spec %s", r.name, r.mig.UUID, d.GetSpec().GetPath())
		}
	}
}

// draDevices returns the UUIDs of the devices allocated to the claim,
// which must all be of want (slice device name -> UUID).
func (p *podsRun) draDevices(t *testing.T, claim string, want map[string]string) []string {
	t.Helper()
	var out []string
	for _, d := range draE2EAllocated(t, p.api, podsNode, claim) {
		uuid, ok := want[d]
		if !ok {
			t.Fatalf("claim %s got device %s, want one of %v", claim, d, want)
		}
		out = append(out, uuid)
	}
	return out
}

// testHealth: XID 79 on a running pod's GPU.
func (p *podsRun) testHealth(t *testing.T) {
	a := p.startAgent(t, podsFakeNode(), exampleRules("per-model-time-slicing.yaml"), "cdi-cri")
	p.waitAllocatable(t, podsA100, 3)
	inv := discover(t, podsFakeNode())
	devs := cdiDiscover(t, podsFakeNode())
	r, running := p.run(t, "", podsLimits(p.node.ProbePod("health-running", "-wait"), podsA100, 1))
	ids := p.allocated(t, running, podsA100)
	if len(ids) != 1 {
		t.Fatalf("pod health-running got %s devices %v, want 1", podsA100, ids)
	}
	sick := ids[0]
	p.checkCDI(t, running.Name, r, ids, devs)
	before := p.waitRunning(t, running.Name)

	a.injectXID(t, gpuIndex(t, inv, sick), 79)
	p.waitAllocatable(t, podsA100, 2)
	t.Logf("XID 79 on %s: the kubelet's allocatable %s went from 3 to 2", sick, podsA100)

	// The next pod gets the two healthy GPUs, the running one is alone.
	r2, next := p.run(t, "", podsLimits(p.node.ProbePod("health-next"), podsA100, 2))
	ids2 := p.allocated(t, next, podsA100)
	if len(ids2) != 2 || slices.Contains(ids2, sick) {
		t.Fatalf("pod health-next got %s devices %v, want the 2 healthy GPUs other than %s", podsA100, ids2, sick)
	}
	p.checkCDI(t, next.Name, r2, ids2, devs)
	p.checkUntouched(t, running, before, r)
}

// podsContainer returns the status of the pod's probe container, nil
// when the pod has none yet.
func podsContainer(pod *corev1.Pod) *corev1.ContainerStatus {
	for i, cs := range pod.Status.ContainerStatuses {
		if cs.Name == harness.ProbeContainer {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// waitRunning waits until the kubelet reports the pod's probe container
// running (the probe may report before the kubelet does) and returns its
// status.
func (p *podsRun) waitRunning(t *testing.T, name string) corev1.ContainerStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var cs *corev1.ContainerStatus
	if err := waitFor(ctx, func() (bool, string) {
		pod, err := p.api.Client.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cs = podsContainer(pod)
		return cs != nil && cs.State.Running != nil && cs.ContainerID != "", fmt.Sprintf("container status %+v", cs)
	}); err != nil {
		t.Fatalf("pod %s: waiting until its container runs: %v", name, err)
	}
	return *cs
}

// checkUntouched checks that the pod's probe container still runs as the
// same container (ID, no restart) it was, and its report is the first.
func (p *podsRun) checkUntouched(t *testing.T, pod *corev1.Pod, before corev1.ContainerStatus, first *podprobe.Report) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	r, now, err := p.node.WaitProbe(ctx, pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	cs := podsContainer(now)
	if cs == nil {
		t.Fatalf("pod %s has no status of its container", pod.Name)
	}
	if cs.State.Running == nil || cs.ContainerID != before.ContainerID || cs.RestartCount != 0 || !r.Started.Equal(first.Started) {
		t.Errorf("pod %s: container %s running %v, restarts %d, probe started %s; want container %s still running as started at %s",
			pod.Name, cs.ContainerID, cs.State.Running != nil, cs.RestartCount, r.Started, before.ContainerID, first.Started)
	}
}

// gpuIndex returns the index of the GPU of UUID uuid.
func gpuIndex(t *testing.T, inv inventory, uuid string) int {
	t.Helper()
	for _, g := range inv.GPUs {
		if g.UUID == uuid {
			return g.Index
		}
	}
	t.Fatalf("GPU %s is not in the inventory", uuid)
	return -1
}

// testRestart: the agent killed under a running pod, then the kubelet
// restarted.
func (p *podsRun) testRestart(t *testing.T) {
	a := p.startAgent(t, podsFakeNode(), exampleRules("per-model-time-slicing.yaml"), "cdi-cri")
	p.waitAllocatable(t, podsA100, 3)
	devs := cdiDiscover(t, podsFakeNode())
	r, running := p.run(t, "", podsLimits(p.node.ProbePod("restart-running", "-wait"), podsA100, 1))
	ids := p.allocated(t, running, podsA100)
	if len(ids) != 1 {
		t.Fatalf("pod restart-running got %s devices %v, want 1", podsA100, ids)
	}
	p.checkCDI(t, running.Name, r, ids, devs)
	before := p.waitRunning(t, running.Name)

	if err := a.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.Done()
	p.node.RestartKubelet(t)
	t.Log("agent killed with SIGKILL, kubelet restarted")
	p.checkUntouched(t, running, before, r)
	// As its DaemonSet would, the agent comes back.
	p.waitNoDevices(t)
	a.start(a.owner)
	p.waitAllocatable(t, podsA100, 3)
	r2, next := p.run(t, "", podsLimits(p.node.ProbePod("restart-next"), podsA100, 1))
	ids2 := p.allocated(t, next, podsA100)
	if len(ids2) != 1 || ids2[0] == ids[0] {
		t.Fatalf("pod restart-next got %s devices %v after the restarts, want one other than the running pod's %s", podsA100, ids2, ids[0])
	}
	p.checkCDI(t, next.Name, r2, ids2, devs)
	if got := p.allocated(t, running, podsA100); !slices.Equal(got, ids) {
		t.Errorf("the restarted kubelet holds devices %v for the running pod, want %v", got, ids)
	}
	p.checkUntouched(t, running, before, r)
}
