package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/featureplug/featureplug/test/harness"
)

// Dynamic MIG end to end: a fake H100 the rules partition on demand,
// published as partitionable devices to the real kube-apiserver, placed by
// the real kube-scheduler, prepared through the kubelet's DRA manager,
// with the fake node's NVML state read back from its driver root.

// dynE2EFakeNode is the fake node of these tests: one H100 80GB HBM3.
const dynE2EFakeNode = "testdata/dynmig-h100.yaml"

// Resource names the rules give.
const (
	dynE2E1g    = "nvidia.com/mig-1g.10gb"
	dynE2E2g    = "nvidia.com/mig-2g.20gb"
	dynE2E3g    = "nvidia.com/mig-3g.40gb"
	dynE2EWhole = "nvidia.com/gpu"
)

// dynE2ERules partitions every H100 on demand into 1g.10gb, 2g.20gb and
// 3g.40gb devices, and offers the whole GPU too.
var dynE2ERules = dynE2ERulesFor("[1g.10gb, 2g.20gb, 3g.40gb]", dynE2EWhole)

// dynE2ERulesFor partitions every H100 on demand into profiles (a YAML
// list) and offers the whole GPU as wholeGPU, unless that is "".
func dynE2ERulesFor(profiles, wholeGPU string) string {
	whole := ""
	if wholeGPU != "" {
		whole = "    wholeGPU: " + wholeGPU + "\n"
	}
	return `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: h100-dynamic
  devices: gpu
  matchFeatures:
  - feature: nvidia.gpu
    matchExpressions:
      product: {op: InRegexp, value: ["H100"]}
  resource: 'nvidia.com/mig-{{ .profile }}'
  mig:
    partition: dynamic
    profiles: ` + profiles + `
` + whole
}

// dynE2EMIGStateFile is where the fake node keeps its MIG state under its
// driver root (fakenode.MIGStateFile).
const dynE2EMIGStateFile = "run/featureplug-fake/mig-state.json"

// dynE2EDevicesPerGPU is what an H100 offering those profiles publishes:
// the whole GPU, 7 placements of 1g.10gb, 3 of 2g.20gb and 2 of 3g.40gb.
const dynE2EDevicesPerGPU = 1 + 7 + 3 + 2

// dynE2ENode is a featureplug node partitioning its H100 on demand.
type dynE2ENode struct {
	*draE2ENode
	driverRoot string
}

// dynE2EStart starts the API server, a node with the kubelet's DRA side,
// and featureplug on it with a driver root of its own (which keeps the
// fake NVML's MIG state across restarts), waits for its slices, creates the
// classes of `dra classes` and starts the scheduler and the claim
// controller.
func dynE2EStart(t *testing.T) (*harness.APIServer, *dynE2ENode) {
	t.Helper()
	api := harness.StartAPIServer(t)
	draE2EEnsureServiceAccount(t, api)
	n := &dynE2ENode{draE2ENode: draE2EStartNode(t, api, "dynmig", dynE2ERules)}
	n.driverRoot = filepath.Join(shortTempDir(t), "root")
	n.start(t, "")
	n.draE2EWaitRegistered(t)
	n.waitPool(t, dynE2EDevicesPerGPU)
	draE2ECreateClasses(t, api, n.rules)
	harness.StartScheduler(t, api)
	harness.StartControllerManager(t, api, harness.ResourceClaimController)
	return api, n
}

// start runs featureplug on the node; crashAt, when set, is the prepare
// step its test hook kills it at.
func (n *dynE2ENode) start(t *testing.T, crashAt string) {
	t.Helper()
	spec := agentSpec{
		Node:       n.name,
		FakeNode:   filepath.Join(build.root, "test", "e2e", dynE2EFakeNode),
		Rules:      n.rules,
		Kubeconfig: n.api.KubeconfigPath,
		StateDir:   n.stateDir,
		Extra: []string{
			"--serve", "dra",
			"--kubelet-registry-dir", n.regDir,
			"--dra-plugin-dir", n.pluginDir,
			"--cdi-spec-dir", n.cdiDir,
			"--cdi-kind", draE2ECDIKind,
			"--driver-root", n.driverRoot,
			"--rediscover-interval", "1h",
		},
	}
	if crashAt != "" {
		spec.Env = []string{"FEATUREPLUG_TEST_DYNMIG_CRASH_AT=" + crashAt}
	}
	if n.agent == nil {
		n.agent = startAgent(t, spec)
		return
	}
	n.agent.spec = spec
	n.agent.start(n.agent.owner)
}

// waitPool waits until the node's pool is complete (every slice of its
// latest generation there, as many as it says) and holds want devices and
// one counter set, and returns its devices by name.
func (n *dynE2ENode) waitPool(t *testing.T, want int) map[string]resourceapi.Device {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var devs map[string]resourceapi.Device
	if err := waitFor(ctx, func() (bool, string) {
		list, err := n.api.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.name})
		if err != nil {
			return false, err.Error()
		}
		devs = map[string]resourceapi.Device{}
		sets, gen, count := 0, int64(-1), int64(0)
		for _, s := range list.Items {
			if gen >= 0 && s.Spec.Pool.Generation != gen {
				return false, "slices of two generations"
			}
			gen, count = s.Spec.Pool.Generation, s.Spec.Pool.ResourceSliceCount
			if len(s.Spec.Devices) > 0 && len(s.Spec.SharedCounters) > 0 {
				t.Fatalf("slice %s holds devices and counter sets", s.Name)
			}
			sets += len(s.Spec.SharedCounters)
			for _, d := range s.Spec.Devices {
				devs[d.Name] = d
			}
		}
		if int64(len(list.Items)) != count || len(devs) != want || sets != 1 {
			return false, fmt.Sprintf("%d slices (pool says %d), %d devices, %d counter sets", len(list.Items), count, len(devs), sets)
		}
		return true, ""
	}); err != nil {
		t.Fatalf("the pool of node %s: %v; want %d devices and 1 counter set", n.name, err, want)
	}
	return devs
}

// dynE2EMIG is a MIG device of the fake node's NVML state.
type dynE2EMIG struct {
	GPUInstanceID     uint32
	ComputeInstanceID uint32
	ProfileID         uint32
	Start             int
	UUID              string // "" for a GPU instance without a compute instance
}

// migState reads the fake node's MIG devices (GPU 0's) from its driver
// root: what its NVML shows.
func (n *dynE2ENode) migState(t *testing.T) []dynE2EMIG {
	t.Helper()
	return dynE2EReadMIG(t, n.driverRoot)
}

// dynE2EReadMIG reads GPU 0's MIG devices from the MIG state the fake node
// keeps under driverRoot.
func dynE2EReadMIG(t *testing.T, driverRoot string) []dynE2EMIG {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(driverRoot, dynE2EMIGStateFile))
	if err != nil {
		t.Fatalf("the fake node's MIG state: %v", err)
	}
	var st struct {
		GPUs []struct {
			Instances []struct {
				ID        uint32 `json:"id"`
				ProfileID uint32 `json:"profileID"`
				Start     int    `json:"start"`
				Compute   []struct {
					ID   uint32 `json:"id"`
					UUID string `json:"uuid"`
				} `json:"computeInstances"`
			} `json:"instances"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("the fake node's MIG state: %v", err)
	}
	var out []dynE2EMIG
	for _, gi := range st.GPUs[0].Instances {
		m := dynE2EMIG{GPUInstanceID: gi.ID, ProfileID: gi.ProfileID, Start: gi.Start}
		if len(gi.Compute) > 1 {
			t.Errorf("GPU instance at memory slice %d holds %d compute instances, want 1", gi.Start, len(gi.Compute))
		}
		if len(gi.Compute) > 0 {
			m.ComputeInstanceID, m.UUID = gi.Compute[0].ID, gi.Compute[0].UUID
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b dynE2EMIG) int { return a.Start - b.Start })
	return out
}

// dynE2EPlacement reads a placement device's name
// ("<gpu>-mig-<profile>-<profile ID>-<start>"); false for the whole GPU.
func dynE2EPlacement(name string) (id uint32, start int, ok bool) {
	parts := strings.Split(name, "-")
	if len(parts) < 5 || parts[len(parts)-4] != "mig" {
		return 0, 0, false
	}
	s, err1 := strconv.Atoi(parts[len(parts)-1])
	i, err2 := strconv.ParseUint(parts[len(parts)-2], 10, 32)
	return uint32(i), s, err1 == nil && err2 == nil
}

// dynE2EClaimed is a pod placed with its claim's device and what
// preparing it gave.
type dynE2EClaimed struct {
	pod       *corev1.Pod
	device    string
	profileID uint32
	start     int
	mig       string // the MIG UUID its CDI ID names
}

// placeAndPrepare creates a pod asking for one res, waits until it is
// bound with its claim allocated, prepares it through the kubelet's DRA
// manager and checks that its CDI ID names a MIG device at exactly the
// allocated placement, resolving through the claim's CDI spec.
func (n *dynE2ENode) placeAndPrepare(t *testing.T, name, res string) dynE2EClaimed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := n.api.Client.CoreV1().Pods(draE2ENamespace).Create(ctx, draE2EPod(name, res, 1, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := dynE2EClaimed{pod: n.waitBound(t, name)}
	devs := draE2EAllocated(t, n.api, n.name, c.pod.Status.ExtendedResourceClaimStatus.ResourceClaimName)
	if len(devs) != 1 {
		t.Fatalf("pod %s: claim allocated %v, want one device", name, devs)
	}
	c.device = devs[0]
	var ok bool
	if c.profileID, c.start, ok = dynE2EPlacement(c.device); !ok {
		t.Fatalf("pod %s asking for %s was allocated %s, which is no placement device", name, res, c.device)
	}
	began := time.Now()
	ids, err := n.kubelet.PreparePod(ctx, c.pod)
	if err != nil {
		t.Fatalf("preparing pod %s: %v", name, err)
	}
	t.Logf("pod %s: claim allocated %s, prepared by the kubelet's DRA manager in %v", name, c.device, time.Since(began).Round(time.Microsecond))
	c.mig = n.checkPrepared(t, c, ids["main"], res)
	return c
}

// waitBound waits until the pod is bound with the claim the scheduler
// made for its extended resource.
func (n *dynE2ENode) waitBound(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p := draE2EWaitPod(t, n.api, name, "bound with the claim the scheduler made", func(p *corev1.Pod) bool {
		return p.Spec.NodeName != "" && p.Status.ExtendedResourceClaimStatus != nil
	})
	if p.Spec.NodeName != n.name {
		t.Fatalf("pod %s placed on %s, want %s", name, p.Spec.NodeName, n.name)
	}
	return p
}

// checkPrepared checks that Prepare's answer is one CDI ID naming the MIG
// device the fake NVML shows at the claim's placement, of its profile, and
// returns its UUID.
func (n *dynE2ENode) checkPrepared(t *testing.T, c dynE2EClaimed, ids []string, res string) string {
	t.Helper()
	if len(ids) != 1 {
		t.Fatalf("pod %s got CDI IDs %v, want one", c.pod.Name, ids)
	}
	var at *dynE2EMIG
	for _, m := range n.migState(t) {
		if m.Start == c.start {
			at = &m
		}
	}
	if at == nil || at.UUID == "" || at.ProfileID != c.profileID {
		t.Fatalf("pod %s: allocated profile %d at memory slice %d, the fake NVML holds %+v there (all: %+v)", c.pod.Name, c.profileID, c.start, at, n.migState(t))
	}
	draE2ECheckCDI(t, n.cdiDir, ids, []string{at.UUID}, res)
	return at.UUID
}

// deletePod unprepares the pod's claims as the kubelet does once its
// containers are gone, then deletes it at once (no kubelet runs it).
func (n *dynE2ENode) deletePod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := n.kubelet.UnpreparePod(ctx, p); err != nil {
		t.Fatalf("unpreparing pod %s: %v", p.Name, err)
	}
	if err := n.api.Client.CoreV1().Pods(draE2ENamespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// wantMIG checks that the fake NVML holds exactly the MIG devices of
// claimed, each complete.
func (n *dynE2ENode) wantMIG(t *testing.T, claimed ...dynE2EClaimed) {
	t.Helper()
	var want []dynE2EMIG
	for _, c := range claimed {
		want = append(want, dynE2EMIG{ProfileID: c.profileID, Start: c.start, UUID: c.mig})
	}
	slices.SortFunc(want, func(a, b dynE2EMIG) int { return a.Start - b.Start })
	// A destroy is answered before the test looks; a create before the
	// claim is prepared: no waiting.
	got := n.migState(t)
	for i := range got {
		got[i].GPUInstanceID, got[i].ComputeInstanceID = 0, 0
	}
	if !slices.Equal(got, want) {
		t.Errorf("the fake NVML holds MIG devices %+v, want exactly %+v", got, want)
	}
}

// TestDynamicMIG runs featureplug on a fake H100 the rules partition on
// demand: its ResourceSlices (a counter set, the placements and the whole
// GPU) are taken by the API server; pods asking for mig-3g.40gb,
// mig-2g.20gb and mig-1g.10gb are placed by the scheduler at placements
// that do not overlap, and each is prepared as the MIG device created for
// it at exactly its placement, the fake NVML holding exactly those; a
// further 2g.20gb pod and a whole-GPU pod do not fit and stay Pending;
// unpreparing and deleting the 3g.40gb pod destroys its MIG device and the
// Pending 2g.20gb pod is then placed; once every MIG claim is gone the
// whole-GPU pod gets the GPU.
func TestDynamicMIG(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, kube-scheduler, kube-controller-manager and featureplug")
	}
	api, n := dynE2EStart(t)
	started := time.Now()
	big := n.placeAndPrepare(t, "mig-3g", dynE2E3g)
	mid := n.placeAndPrepare(t, "mig-2g", dynE2E2g)
	small := n.placeAndPrepare(t, "mig-1g", dynE2E1g)
	t.Logf("three MIG pods placed and prepared in %v: %s, %s, %s", time.Since(started).Round(time.Millisecond), big.device, mid.device, small.device)
	for _, pair := range [][2]dynE2EClaimed{{big, mid}, {big, small}, {mid, small}} {
		if dynE2EOverlap(pair[0], pair[1]) {
			t.Errorf("%s and %s overlap", pair[0].device, pair[1].device)
		}
	}
	n.wantMIG(t, big, mid, small)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	pods := api.Client.CoreV1().Pods(draE2ENamespace)
	for _, p := range []*corev1.Pod{draE2EPod("mig-2g-more", dynE2E2g, 1, ""), draE2EPod("whole", dynE2EWhole, 1, "")} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := draE2EWaitPod(t, api, p.Name, "unschedulable", func(p *corev1.Pod) bool { return draE2EUnschedulable(p) != nil })
		if got.Spec.NodeName != "" {
			t.Fatalf("pod %s that does not fit was bound to %s", p.Name, got.Spec.NodeName)
		}
	}

	n.deletePod(t, big.pod)
	n.wantMIG(t, mid, small)
	more := dynE2EClaimed{pod: n.waitBound(t, "mig-2g-more")}
	devs := draE2EAllocated(t, api, n.name, more.pod.Status.ExtendedResourceClaimStatus.ResourceClaimName)
	if len(devs) != 1 {
		t.Fatalf("pod mig-2g-more: allocated %v", devs)
	}
	more.device = devs[0]
	more.profileID, more.start, _ = dynE2EPlacement(more.device)
	ids, err := n.kubelet.PreparePod(ctx, more.pod)
	if err != nil {
		t.Fatal(err)
	}
	more.mig = n.checkPrepared(t, more, ids["main"], dynE2E2g)
	n.wantMIG(t, mid, small, more)
	if p, err := pods.Get(ctx, "whole", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Fatalf("the whole-GPU pod is on node %q next to MIG claims (err %v)", p.Spec.NodeName, err)
	}

	for _, c := range []dynE2EClaimed{mid, small, more} {
		n.deletePod(t, c.pod)
	}
	n.wantMIG(t)
	gpu := discover(t, filepath.Join(build.root, "test", "e2e", dynE2EFakeNode)).GPUs[0].UUID
	whole := n.waitBound(t, "whole")
	devs = draE2EAllocated(t, api, n.name, whole.Status.ExtendedResourceClaimStatus.ResourceClaimName)
	if want := []string{draE2EDeviceName(gpu)}; !slices.Equal(devs, want) {
		t.Fatalf("the whole-GPU claim got %v, want the GPU %v", devs, want)
	}
	ids, err = n.kubelet.PreparePod(ctx, whole)
	if err != nil {
		t.Fatal(err)
	}
	draE2ECheckCDI(t, n.cdiDir, ids["main"], []string{gpu}, dynE2EWhole)
	n.wantMIG(t)
}

// dynE2EOverlap reports whether two claims' placements share a memory
// slice.
func dynE2EOverlap(a, b dynE2EClaimed) bool {
	size := map[uint32]int{19: 1, 15: 2, 14: 2, 9: 4, 5: 4, 0: 8}
	return a.start < b.start+size[b.profileID] && b.start < a.start+size[a.profileID]
}

// dynE2ESteps are the prepare steps of the agent's test hook
// (dra.PrepareSteps) and what the fake NVML holds for the claim when the
// agent is killed there: nothing, a GPU instance without its compute
// instance, or the whole MIG device.
var dynE2ESteps = []struct {
	step string
	left string // "", "gi" or "mig"
}{
	{"before-nvml", ""},
	{"after-gpu-instance", "gi"},
	{"after-compute-instance", "mig"},
	{"after-cdi", "mig"},
	{"after-checkpoint", "mig"},
}

// crashPrepare starts the agent with its test hook at step, places a pod
// asking for res and has the kubelet prepare it: the agent kills itself
// at the step, and the kubelet's prepare fails. It returns the pod and
// its allocated placement.
func (n *dynE2ENode) crashPrepare(t *testing.T, step, pod, res string) dynE2EClaimed {
	t.Helper()
	if err := n.agent.Stop(); err != nil {
		t.Fatal(err)
	}
	n.start(t, step)
	n.draE2EWaitRegistered(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := n.api.Client.CoreV1().Pods(draE2ENamespace).Create(ctx, draE2EPod(pod, res, 1, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := dynE2EClaimed{pod: n.waitBound(t, pod)}
	devs := draE2EAllocated(t, n.api, n.name, c.pod.Status.ExtendedResourceClaimStatus.ResourceClaimName)
	if len(devs) != 1 {
		t.Fatalf("pod %s: allocated %v", pod, devs)
	}
	c.device = devs[0]
	c.profileID, c.start, _ = dynE2EPlacement(c.device)
	if _, err := n.kubelet.PreparePod(ctx, c.pod); err == nil {
		t.Fatalf("prepare of pod %s succeeded with the agent set to die at %s", pod, step)
	}
	select {
	case <-n.agent.Done():
	case <-ctx.Done():
		t.Fatalf("the agent did not die at %s", step)
	}
	return c
}

// wantLeft checks what the fake NVML holds after a crash at a step: left
// "" nothing, "gi" one GPU instance at the claim's placement without a
// compute instance, "mig" one MIG device there.
func (n *dynE2ENode) wantLeft(t *testing.T, c dynE2EClaimed, left string) {
	t.Helper()
	got := n.migState(t)
	switch {
	case left == "" && len(got) == 0:
	case left != "" && len(got) == 1 && got[0].Start == c.start && got[0].ProfileID == c.profileID && (got[0].UUID == "") == (left == "gi"):
	default:
		t.Fatalf("after the crash the fake NVML holds %+v, want %q at %s", got, left, c.device)
	}
}

// TestDynamicMIGCrashAtEachPrepareStep kills the agent (SIGKILL, by its
// test hook) at each step of a dynamic MIG prepare: before the first NVML
// call, after the GPU instance, after the compute instance, after the CDI
// spec, after the checkpoint. The restarted agent, on the kubelet's retry,
// answers with exactly one MIG device for the claim, at its placement (the
// one a crash left, finished, never a second), and the kubelet's unprepare
// leaves none. A claim whose pod goes away after such a crash instead of
// being retried is unprepared too, and what the crash left is destroyed.
func TestDynamicMIGCrashAtEachPrepareStep(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, kube-scheduler, kube-controller-manager and featureplug")
	}
	_, n := dynE2EStart(t)
	for i, s := range dynE2ESteps {
		t.Run(s.step, func(t *testing.T) {
			c := n.crashPrepare(t, s.step, fmt.Sprintf("crash-%d", i), dynE2E3g)
			n.wantLeft(t, c, s.left)
			n.start(t, "")
			n.draE2EWaitRegistered(t)
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			ids, err := n.kubelet.PreparePod(ctx, c.pod)
			if err != nil {
				t.Fatalf("the kubelet's retry after the crash at %s: %v", s.step, err)
			}
			c.mig = n.checkPrepared(t, c, ids["main"], dynE2E3g)
			n.wantMIG(t, c)
			n.deletePod(t, c.pod)
			n.wantMIG(t)
			n.waitPool(t, dynE2EDevicesPerGPU)
		})
	}
	t.Run("PodGoneAfterCrash", func(t *testing.T) {
		c := n.crashPrepare(t, "after-compute-instance", "crash-gone", dynE2E1g)
		n.wantLeft(t, c, "mig")
		n.start(t, "")
		n.draE2EWaitRegistered(t)
		// The restarted agent counts the MIG device the crash left as
		// its claim's: its GPU stays offered.
		n.waitPool(t, dynE2EDevicesPerGPU)
		n.deletePod(t, c.pod)
		n.wantMIG(t)
	})
}

// waitDevices waits until the node's slices hold exactly want devices per
// resource attribute, and returns them by name.
func (n *dynE2ENode) waitDevices(t *testing.T, what string, want map[string]int) map[string]resourceapi.Device {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var devs map[string]resourceapi.Device
	if err := waitFor(ctx, func() (bool, string) {
		list, err := n.api.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.name})
		if err != nil {
			return false, err.Error()
		}
		devs = map[string]resourceapi.Device{}
		got := map[string]int{}
		for i := range list.Items {
			for k, c := range draE2ESliceResources(&list.Items[i]) {
				got[k] += c
			}
			for _, d := range list.Items[i].Spec.Devices {
				devs[d.Name] = d
			}
		}
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("devices by resource %v", got)
	}); err != nil {
		t.Fatalf("%s: the slices of node %s: %v; want %v", what, n.name, err, want)
	}
	return devs
}

// TestDynamicMIGHealthAndRulesEdit prepares a claim of a 3g.40gb placement
// on a fake H100 partitioned on demand, then: an XID on the MIG device
// created for it (48, a double-bit ECC error) taints exactly its placement
// device, and the kubelet shows it unhealthy in the pod's status; a rules
// edit that stops partitioning the GPU (a devices: mig rule and a
// whole-GPU rule instead) keeps the claim and its MIG device, and offers
// nothing (neither the MIG device, which the claim holds, nor the GPU, in
// MIG mode); once the claim ends its MIG device is destroyed, MIG mode
// turned off, and the whole GPU offered as the new rules say.
func TestDynamicMIGHealthAndRulesEdit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, kube-scheduler, kube-controller-manager and featureplug")
	}
	api, n := dynE2EStart(t)
	// A claim of its own (not an extended resource's), whose health the
	// kubelet puts in the pod's status under its name.
	draE2ECreateAnyClass(t, api)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	claims := api.Client.ResourceV1().ResourceClaims(draE2ENamespace)
	if _, err := claims.Create(ctx, draE2EClaim("health", draE2EAttr("type")+` == "mig" && `+draE2EAttr("profile")+` == "3g.40gb"`), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Client.CoreV1().Pods(draE2ENamespace).Create(ctx, draE2EPod("health", "", 0, "health"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := dynE2EClaimed{pod: draE2EWaitPod(t, api, "health", "bound", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })}
	devs := draE2EAllocated(t, api, n.name, "health")
	if len(devs) != 1 {
		t.Fatalf("claim health allocated %v", devs)
	}
	c.device = devs[0]
	c.profileID, c.start, _ = dynE2EPlacement(c.device)
	ids, err := n.kubelet.PreparePod(ctx, c.pod)
	if err != nil {
		t.Fatal(err)
	}
	c.mig = n.checkPrepared(t, c, ids["main"], dynE2E3g)
	gi := n.migState(t)[0].GPUInstanceID

	httpc := &http.Client{Timeout: 2 * time.Second}
	resp, err := httpc.Post(fmt.Sprintf("%s/fake/xid?gpu=0&gi=%d&ci=0&xid=48", n.agent.base, gi), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("injecting an XID on the MIG device: %s", resp.Status)
	}
	if err := waitFor(ctx, func() (bool, string) {
		devs := n.waitPool(t, dynE2EDevicesPerGPU)
		var tainted []string
		for name, d := range devs {
			if len(d.Taints) > 0 {
				tainted = append(tainted, name)
			}
		}
		return slices.Equal(tainted, []string{c.device}), fmt.Sprintf("tainted %v", tainted)
	}); err != nil {
		t.Fatalf("after an XID on the MIG device of %s: %v; want exactly it tainted", c.device, err)
	}
	// The kubelet's DRA manager learns it from the health stream and puts
	// it in the pod's status.
	draE2EWaitDeviceHealth(t, n.kubelet, c.pod, ids["main"][0], corev1.ResourceHealthStatusUnhealthy, "xid-48")

	static := `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: mig
  devices: mig
  resource: example.com/mig
  serve: dra
- name: whole
  devices: gpu
  resource: ` + dynE2EWhole + `
  serve: dra
`
	if err := os.WriteFile(n.rules, []byte(static), 0o644); err != nil {
		t.Fatal(err)
	}
	n.agent.hup(t)
	n.waitDevices(t, "after the rules edit", map[string]int{})
	n.wantMIG(t, c)

	n.deletePod(t, c.pod)
	if err := claims.Delete(ctx, "health", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n.wantMIG(t)
	n.waitDevices(t, "once the claim ended", map[string]int{dynE2EWhole: 1})
}
