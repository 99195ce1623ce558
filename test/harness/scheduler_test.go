package harness_test

import (
	"context"
	"fmt"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/featureplug/featureplug/test/harness"
)

// TestSchedulerServesExtendedResourceThroughDRA runs the real kube-scheduler
// against a Node with one device in a ResourceSlice and a DeviceClass that
// names an extended resource: a pod asking for that resource is placed on
// the Node with a claim the scheduler made and allocated, the kubelet's DRA
// manager prepares it through the driver (the container gets the driver's
// CDI ID), and a second pod stays Pending, unschedulable, while the device is
// taken.
func TestSchedulerServesExtendedResourceThroughDRA(t *testing.T) {
	const (
		node   = "sched-node"
		driver = "tiny.example.com"
		extRes = "example.com/tiny"
		ns     = "default"
	)
	api := harness.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := api.CreateNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := harness.SetNodeReady(ctx, api, node); err != nil {
		t.Fatal(err)
	}
	// No service-account controller runs: the admission plugin wants the
	// namespace's default account to exist.
	if _, err := api.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating the default service account: %v", err)
	}

	base := kubeletsim.ShortTempDir(t)
	regDir, pluginDir := filepath.Join(base, "reg"), filepath.Join(base, "plugin")
	if err := os.MkdirAll(pluginDir, 0o750); err != nil {
		t.Fatal(err)
	}
	kubelet := harness.StartKubeletDRA(t, api, node, regDir)
	drv := &tinyDRADriver{name: driver}
	helper, err := kubeletplugin.Start(ctx, drv,
		kubeletplugin.DriverName(driver),
		kubeletplugin.NodeName(node),
		kubeletplugin.KubeClient(api.Client),
		kubeletplugin.RegistrarDirectoryPath(regDir),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		t.Fatalf("starting the tiny DRA driver: %v", err)
	}
	defer helper.Stop()
	if err := kubelet.WaitRegistered(ctx, driver); err != nil {
		t.Fatalf("driver %s did not register: %v", driver, err)
	}

	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "tiny.example.com"},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q", driver)}}},
			ExtendedResourceName: ptrTo(extRes),
		},
	}
	if _, err := api.Client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating DeviceClass: %v", err)
	}
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-tiny"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			NodeName: ptrTo(node),
			Pool:     resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices:  []resourceapi.Device{{Name: "dev-0"}},
		},
	}
	if _, err := api.Client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ResourceSlice: %v", err)
	}
	harness.StartScheduler(t, api)

	pods := api.Client.CoreV1().Pods(ns)
	newPod := func(name string) *corev1.Pod {
		q := resource.MustParse("1")
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "ctr", Image: "registry.example/none",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{extRes: q},
					Limits:   corev1.ResourceList{extRes: q},
				},
			}}},
		}
	}
	if _, err := pods.Create(ctx, newPod("first"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod first: %v", err)
	}
	first := waitPod(ctx, t, api, ns, "first", func(p *corev1.Pod) bool {
		return p.Spec.NodeName != "" && p.Status.ExtendedResourceClaimStatus != nil
	})
	if first.Spec.NodeName != node {
		t.Fatalf("pod first placed on %q, want %q", first.Spec.NodeName, node)
	}
	claimName := first.Status.ExtendedResourceClaimStatus.ResourceClaimName
	claim, err := api.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claimName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting the scheduler's claim %s: %v", claimName, err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 ||
		claim.Status.Allocation.Devices.Results[0].Device != "dev-0" || claim.Status.Allocation.Devices.Results[0].Driver != driver {
		t.Fatalf("claim %s allocation = %+v, want device dev-0 of %s", claimName, claim.Status.Allocation, driver)
	}

	got, err := kubelet.PreparePod(ctx, first)
	if err != nil {
		t.Fatalf("PreparePod first: %v", err)
	}
	if want := []string{"example.com/tiny=dev-0"}; !slices.Equal(got["ctr"], want) {
		t.Errorf("CDI devices of pod first = %v, want %v", got, want)
	}

	if _, err := pods.Create(ctx, newPod("second"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod second: %v", err)
	}
	second := waitPod(ctx, t, api, ns, "second", func(p *corev1.Pod) bool {
		return unschedulable(p) != nil
	})
	if second.Spec.NodeName != "" {
		t.Errorf("pod second placed on %q while the only device is taken", second.Spec.NodeName)
	}
	t.Logf("pod second: %s", unschedulable(second).Message)
}

// unschedulable returns the pod's PodScheduled=False condition with reason
// Unschedulable, or nil.
func unschedulable(p *corev1.Pod) *corev1.PodCondition {
	for i, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// waitPod waits until cond holds for the pod and returns it.
func waitPod(ctx context.Context, t *testing.T, api *harness.APIServer, ns, name string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		p, err := api.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil && cond(p) {
			return p
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for pod %s/%s: %v; last: %+v (err %v)", ns, name, ctx.Err(), podState(p), err)
		case <-tick.C:
		}
	}
}

func podState(p *corev1.Pod) any {
	if p == nil {
		return nil
	}
	return struct {
		Node       string
		Conditions []corev1.PodCondition
		Ext        *corev1.PodExtendedResourceClaimStatus
	}{p.Spec.NodeName, p.Status.Conditions, p.Status.ExtendedResourceClaimStatus}
}
