package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/featureplug/featureplug/test/harness"
)

// gfdOwnerLabels are labels the agent publishes for the bundled dgx-h100
// node with the mixed rules (gpu-feature-discovery's names and values;
// mig.strategy is the configured one even without MIG devices).
var gfdOwnerLabels = map[string]string{
	"nvidia.com/gpu.product":  "NVIDIA-H100-80GB-HBM3",
	"nvidia.com/gpu.count":    "8",
	"nvidia.com/gpu.mode":     "compute",
	"nvidia.com/gpu.machine":  "unknown",
	"nvidia.com/gpu.replicas": "1",
	"nvidia.com/mig.strategy": "mixed",
}

// TestGFDOwnerReferences: with the default --owner daemonset, the agent
// running as a DaemonSet's Pod (POD_NAME, POD_UID from the downward API)
// owns its NodeFeature by that Pod and that DaemonSet, as nfd-worker does;
// with the object gone, nfd-master removes the labels from the Node.
//
// Uninstalling is exercised end to end with the real garbage collector
// (kube-controller-manager running only that controller): the test deletes
// the DaemonSet alone, in the background as `kubectl delete ds` does; the
// collector deletes its Pod, and, once the Pod is gone too, the NodeFeature
// whose owners are then all gone; nfd-master then takes the labels off. No
// kubelet runs the Pod, so the test does the kubelet's part of a Pod's
// graceful deletion: it stops the agent and removes the terminating Pod
// (grace period 0, as a kubelet does once the containers have exited). The
// NodeFeature is still there after the agent stopped, so the collector
// alone deletes it.
func TestGFDOwnerReferences(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, nfd-master, kube-controller-manager and featureplug")
	}
	api := harness.StartAPIServer(t)
	c := &cluster{api: api, master: harness.StartNFDMaster(t, api, nfdMasterNode)}
	harness.StartControllerManager(t, api)
	ctx, cancel := context.WithTimeout(context.Background(), 5*waitTimeout)
	defer cancel()
	if err := api.CreateNamespace(ctx, agentNamespace); err != nil {
		t.Fatal(err)
	}
	node := c.node(t, "gfd-owner", nil)
	ds, pod := gfdCreateDaemonSetPod(ctx, t, api, node)
	t.Setenv("POD_NAME", pod.Name)
	t.Setenv("POD_UID", string(pod.UID))

	a := startAgent(t, agentSpec{
		Node:       node,
		FakeNode:   "dgx-h100",
		Publish:    "nodefeature",
		Rules:      "mixed",
		Kubeconfig: api.KubeconfigPath,
		Namespace:  agentNamespace,
		Extra:      []string{"--rediscover-interval", "1h"},
	})
	c.waitLabels(t, node, gfdOwnerLabels)

	nfs := api.NFD.NfdV1alpha1().NodeFeatures(agentNamespace)
	nf, err := nfs.Get(ctx, nodeFeatureName(node), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the agent's NodeFeature: %v", err)
	}
	want := []metav1.OwnerReference{
		{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
		{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID},
	}
	if !reflect.DeepEqual(nf.OwnerReferences, want) {
		t.Fatalf("NodeFeature %s owned by %+v, want the agent's Pod and DaemonSet %+v", nf.Name, nf.OwnerReferences, want)
	}

	// Uninstall: `kubectl delete ds` deletes the DaemonSet only, leaving its
	// dependents to the garbage collector.
	background := metav1.DeletePropagationBackground
	if err := api.Client.AppsV1().DaemonSets(agentNamespace).Delete(ctx, ds.Name,
		metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		t.Fatal(err)
	}
	// The collector deletes the Pod: it is assigned to a node, so it
	// terminates gracefully (a deletion timestamp) until its kubelet is done.
	pods := api.Client.CoreV1().Pods(agentNamespace)
	if err := waitFor(ctx, func() (bool, string) {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return apierrors.IsNotFound(err), fmt.Sprintf("getting Pod %s: %v", pod.Name, err)
		}
		return p.DeletionTimestamp != nil, fmt.Sprintf("Pod %s not terminating (owners %+v)", pod.Name, p.OwnerReferences)
	}); err != nil {
		t.Fatalf("waiting for the garbage collector to delete the DaemonSet's Pod: %v", err)
	}
	// The kubelet's part: the container stops, then the Pod goes.
	if err := a.Stop(); err != nil {
		t.Fatalf("stopping the agent: %v", err)
	}
	if _, err := nfs.Get(ctx, nf.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the NodeFeature after the agent stopped, its Pod still there: %v", err)
	}
	kubeletDelete := *metav1.NewDeleteOptions(0)
	kubeletDelete.Preconditions = metav1.NewUIDPreconditions(string(pod.UID))
	if err := pods.Delete(ctx, pod.Name, kubeletDelete); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("removing the terminating Pod as its kubelet would: %v", err)
	}
	// With both owners gone, the collector deletes the NodeFeature.
	if err := waitFor(ctx, func() (bool, string) {
		got, err := nfs.Get(ctx, nf.Name, metav1.GetOptions{})
		if err != nil {
			return apierrors.IsNotFound(err), fmt.Sprintf("getting NodeFeature %s: %v", nf.Name, err)
		}
		return false, fmt.Sprintf("NodeFeature %s still there (owners %+v, deletion timestamp %v)", nf.Name, got.OwnerReferences, got.DeletionTimestamp)
	}); err != nil {
		t.Fatalf("waiting for the garbage collector to delete the NodeFeature: %v", err)
	}
	absent := make([]string, 0, len(gfdOwnerLabels))
	for k := range gfdOwnerLabels {
		absent = append(absent, k)
	}
	c.waitLabels(t, node, nil, absent...)
}

// gfdCreateDaemonSetPod creates a DaemonSet and one Pod it controls on
// node, as the DaemonSet controller would (none runs here): the agent reads
// the Pod for its UID and its DaemonSet.
func gfdCreateDaemonSetPod(ctx context.Context, t *testing.T, api *harness.APIServer, node string) (*appsv1.DaemonSet, *corev1.Pod) {
	t.Helper()
	labels := map[string]string{"app.kubernetes.io/name": "featureplug"}
	container := corev1.Container{Name: "featureplug", Image: "ghcr.io/featureplug/featureplug:test"}
	ds, err := api.Client.AppsV1().DaemonSets(agentNamespace).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "featureplug", Namespace: agentNamespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{container}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the DaemonSet: %v", err)
	}
	yes := true
	pod, err := api.Client.CoreV1().Pods(agentNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "featureplug-gfd01", Namespace: agentNamespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID,
				Controller: &yes, BlockOwnerDeletion: &yes}},
		},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{container}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the DaemonSet's Pod: %v", err)
	}
	return ds, pod
}

// gfdUniformA100 is a node the single strategy serves: two A100-SXM4-40GB
// split into seven 1g.5gb each (14 nvidia.com/gpu).
const gfdUniformA100 = `name: gfd-single
driverVersion: "570.86.15"
cudaVersion: "12.8"
gpus:
  - product: A100-SXM4-40GB
    count: 2
    mig:
      - profile: 1g.5gb
        count: 7
`

// gfdMIGBesideWhole is the same node after GPU 1 left MIG mode: a whole
// 40GB GPU beside 1g.5gb slices, which single would pool into one
// nvidia.com/gpu.
const gfdMIGBesideWhole = `name: gfd-single
driverVersion: "570.86.15"
cudaVersion: "12.8"
gpus:
  - product: A100-SXM4-40GB
    mig:
      - profile: 1g.5gb
        count: 7
  - product: A100-SXM4-40GB
`

// TestGFDSingleInvalid: under --rules single a node whose MIG layout stops
// being uniform (a whole GPU beside MIG devices) advertises nvidia.com/gpu
// with 0 devices to the kubelet, as NVIDIA's device plugin refuses such a
// node, and says why: a Warning Event DeviceRuleError on the Node and the
// log line naming the reason.
func TestGFDSingleInvalid(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	api := harness.StartAPIServer(t)
	c := &cluster{api: api}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := api.CreateNamespace(ctx, agentNamespace); err != nil {
		t.Fatal(err)
	}
	node := c.node(t, "gfd-single", nil)
	kubeletDir := shortTempDir(t)
	peer := harness.StartKubeletPeer(t, kubeletDir)
	fake := filepath.Join(t.TempDir(), "node.yaml")
	writeFileAtomic(t, fake, []byte(gfdUniformA100))
	a := startAgent(t, agentSpec{
		Node: node, FakeNode: fake, Rules: "single", KubeletDir: kubeletDir,
		Kubeconfig: api.KubeconfigPath, Namespace: agentNamespace,
		Extra: []string{"--rediscover-interval", "1h"},
	})
	waitCapacities(t, peer, map[string]int64{"nvidia.com/gpu": 14})

	writeFileAtomic(t, fake, []byte(gfdMIGBesideWhole))
	a.hup(t)
	waitCapacities(t, peer, map[string]int64{"nvidia.com/gpu": 0})
	if err := c.waitEvent(node, "DeviceRuleError"); err != nil {
		t.Errorf("node %s: %v", node, err)
	}
	gfdWaitLog(t, a, "devices left out of the plan because of their rules",
		"MIG strategy single refuses this node: GPUs with MIG enabled (GPU 0) beside GPUs with MIG disabled (GPU 1)")
}

// gfdWaitLog waits until the agent's recent log holds every wanted text.
func gfdWaitLog(t *testing.T, a *agent, want ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := waitFor(ctx, func() (bool, string) {
		tail := a.Tail(400)
		for _, w := range want {
			if !strings.Contains(tail, w) {
				return false, fmt.Sprintf("log lacks %q", w)
			}
		}
		return true, ""
	}); err != nil {
		t.Errorf("agent log: %v", err)
	}
}
