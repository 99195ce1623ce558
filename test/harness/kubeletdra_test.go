package harness_test

import (
	"context"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/featureplug/featureplug/test/harness"
)

// tinyDRADriver is a minimal DRA driver: it prepares every device of a
// claim's allocation as the CDI device "example.com/tiny=<device>" and
// records which claims it prepared and unprepared.
type tinyDRADriver struct {
	name string

	mu         sync.Mutex
	prepared   []types.UID
	unprepared []types.UID
}

var _ kubeletplugin.DRAPlugin = (*tinyDRADriver)(nil)

func (d *tinyDRADriver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		d.prepared = append(d.prepared, c.UID)
		var res kubeletplugin.PrepareResult
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != d.name {
				continue
			}
			res.Devices = append(res.Devices, kubeletplugin.Device{
				Requests:     []string{r.Request},
				PoolName:     r.Pool,
				DeviceName:   r.Device,
				CDIDeviceIDs: []string{"example.com/tiny=" + r.Device},
			})
		}
		out[c.UID] = res
	}
	return out, nil
}

func (d *tinyDRADriver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]error{}
	for _, c := range claims {
		d.unprepared = append(d.unprepared, c.UID)
		out[c.UID] = nil
	}
	return out, nil
}

func (d *tinyDRADriver) HandleError(context.Context, error, string) {}

func (d *tinyDRADriver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return nil
}

func (d *tinyDRADriver) calls() (prepared, unprepared []types.UID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.prepared), slices.Clone(d.unprepared)
}

// TestKubeletDRAPreparesThroughRegisteredDriver drives the kubelet's DRA
// manager with a DRA driver over real unix sockets: the start-up delete of
// the Node's ResourceSlices, registration through the registry directory,
// NodePrepareResources for an allocated and reserved claim (the CDI IDs the
// container gets), NodeUnprepareResources, and deregistration when the
// driver's registration socket goes away.
func TestKubeletDRAPreparesThroughRegisteredDriver(t *testing.T) {
	const (
		node   = "dra-peer-node"
		driver = "tiny.example.com"
	)
	api := harness.StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := api.CreateNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	// A slice left from an earlier kubelet run: the kubelet deletes it at
	// start, before any driver registers.
	stale := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "stale-" + node},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			NodeName: ptrTo(node),
			Pool:     resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices:  []resourceapi.Device{{Name: "dev-0"}},
		},
	}
	if _, err := api.Client.ResourceV1().ResourceSlices().Create(ctx, stale, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a stale ResourceSlice: %v", err)
	}

	base := kubeletsim.ShortTempDir(t)
	regDir, pluginDir := filepath.Join(base, "reg"), filepath.Join(base, "plugin")
	if err := os.MkdirAll(pluginDir, 0o750); err != nil {
		t.Fatal(err)
	}
	kubelet := harness.StartKubeletDRA(t, api, node, regDir)
	if _, err := api.Client.ResourceV1().ResourceSlices().Get(ctx, stale.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("stale ResourceSlice after the kubelet started: got error %v, want NotFound", err)
	}

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
	stopped := false
	defer func() {
		if !stopped {
			helper.Stop()
		}
	}()
	if err := kubelet.WaitRegistered(ctx, driver); err != nil {
		t.Fatalf("driver %s did not register: %v", driver, err)
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-1", Namespace: "default", UID: "uid-pod-1"},
		Spec: corev1.PodSpec{
			NodeName:       node,
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptrTo("claim-1")}},
			Containers: []corev1.Container{
				{Name: "ctr", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}},
				{Name: "sidecar"},
			},
		},
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim-1", Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name:    "req",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "tiny"},
		}}}},
	}
	claims := api.Client.ResourceV1().ResourceClaims("default")
	claim, err = claims.Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the claim: %v", err)
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{Request: "req", Driver: driver, Pool: node, Device: "dev-3"}},
	}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	if claim, err = claims.UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("allocating the claim: %v", err)
	}

	got, err := kubelet.PreparePod(ctx, pod)
	if err != nil {
		t.Fatalf("PreparePod: %v", err)
	}
	want := map[string][]string{"ctr": {"example.com/tiny=dev-3"}, "sidecar": nil}
	if len(got) != len(want) || !slices.Equal(got["ctr"], want["ctr"]) || len(got["sidecar"]) != 0 {
		t.Errorf("CDI devices per container = %v, want %v", got, want)
	}
	// Preparing again (the kubelet does on every pod sync) calls no driver.
	if _, err := kubelet.PreparePod(ctx, pod); err != nil {
		t.Fatalf("PreparePod again: %v", err)
	}
	if p, u := drv.calls(); !slices.Equal(p, []types.UID{claim.UID}) || len(u) != 0 {
		t.Errorf("driver calls after prepare: prepared %v, unprepared %v; want prepared [%s] once, none unprepared", p, u, claim.UID)
	}

	if err := kubelet.UnpreparePod(ctx, pod); err != nil {
		t.Fatalf("UnpreparePod: %v", err)
	}
	if p, u := drv.calls(); len(p) != 1 || !slices.Equal(u, []types.UID{claim.UID}) {
		t.Errorf("driver calls after unprepare: prepared %v, unprepared %v; want [%s] each", p, u, claim.UID)
	}

	helper.Stop()
	stopped = true
	if err := kubelet.WaitUnregistered(ctx, driver); err != nil {
		t.Errorf("driver %s still registered after it stopped: %v", driver, err)
	}
}

func ptrTo[T any](v T) *T { return &v }
