package harness

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KubeSchedulerBinary is started only by the tests that ask for it
// (StartScheduler).
const KubeSchedulerBinary = "kube-scheduler"

// Scheduler is a running kube-scheduler with its default profile: every
// in-tree plugin, DynamicResources included, so it allocates ResourceClaims
// from ResourceSlices and serves extended resources backed by a DeviceClass
// (DRAExtendedResource, GA in Kubernetes 1.37).
type Scheduler struct {
	*Process
	// HealthURL is its /healthz endpoint on loopback (HTTPS, self-signed).
	HealthURL string
}

// StartScheduler starts kube-scheduler against api with api's admin
// credentials and leader election off, on a free loopback port. It returns
// once the process serves /healthz; it then places every pending pod whose
// schedulerName is "default-scheduler" (the default). The process is stopped
// when the test ends and its log is printed when the test failed. Only tests
// that need pods placed start it.
func StartScheduler(t testing.TB, api *APIServer) *Scheduler {
	t.Helper()
	p, health := startControlPlaneComponent(t, api, KubeSchedulerBinary,
		// Its own client identity for delegated authentication and
		// authorization of its endpoints: /healthz is always allowed
		// anyway, but without these it logs a warning per request.
		"--authentication-kubeconfig="+api.KubeconfigPath,
		"--authorization-kubeconfig="+api.KubeconfigPath)
	return &Scheduler{Process: p, HealthURL: health}
}

// nodeAllocatable is what SetNodeReady gives a Node: room for many pods, no
// device-plugin resources.
var nodeAllocatable = corev1.ResourceList{
	corev1.ResourcePods:   resource.MustParse("110"),
	corev1.ResourceCPU:    resource.MustParse("16"),
	corev1.ResourceMemory: resource.MustParse("64Gi"),
}

// SetNodeReady writes the Node's status the way a kubelet reports a healthy
// node (the Ready condition, capacity and allocatable of pods, CPU and
// memory) and lifts the not-ready taint as the node lifecycle controller
// would, so that kube-scheduler places pods on it. Device-plugin resources
// a KubeletPeer reports are not in it: extended resources the Node does not
// list are the ones DRA can serve.
func SetNodeReady(ctx context.Context, api *APIServer, name string) error {
	node, err := api.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting node %q: %w", name, err)
	}
	now := metav1.Now()
	node.Status.Capacity = nodeAllocatable.DeepCopy()
	node.Status.Allocatable = nodeAllocatable.DeepCopy()
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "set by the test harness", LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	node, err = api.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("writing the status of node %q: %w", name, err)
	}
	// The TaintNodesByCondition admission plugin taints a new Node
	// not-ready; the node lifecycle controller, which would lift the taint
	// once the Node is Ready, does not run in the tests.
	var taints []corev1.Taint
	for _, tn := range node.Spec.Taints {
		if tn.Key != corev1.TaintNodeNotReady {
			taints = append(taints, tn)
		}
	}
	if len(taints) == len(node.Spec.Taints) {
		return nil
	}
	node.Spec.Taints = taints
	if _, err := api.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("removing the %s taint of node %q: %w", corev1.TaintNodeNotReady, name, err)
	}
	return nil
}
