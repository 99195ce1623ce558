package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/featureplug/featureplug/test/harness"
)

// The standard attributes of KEP-6072 (k8s.io/dynamic-resource-allocation's
// deviceattribute names), which every featureplug device carries.
const (
	draE2EPCIeRoot = "resource.kubernetes.io/pcieRoot"
	draE2EPCIBusID = "resource.kubernetes.io/pciBusID"
	draE2ENUMANode = "resource.kubernetes.io/numaNode"
)

// draE2ENICDriver is the test-only DRA driver of these tests: NICs under
// known PCIe roots, published by the test as the NIC driver of a real
// node would (no kubelet plugin: the scheduler allocates from slices).
const draE2ENICDriver = "nic.e2e.example.com"

// draE2ENICSlice publishes the NIC driver's ResourceSlice for a node: one
// NIC per port, under the given PCIe root.
func draE2ENICSlice(t *testing.T, api *harness.APIServer, node string, roots map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var devs []resourceapi.Device
	for _, port := range slices.Sorted(maps.Keys(roots)) {
		devs = append(devs, resourceapi.Device{Name: "nic-" + port, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"port":         {StringValue: ptr.To(port)},
			draE2EPCIeRoot: {StringValue: ptr.To(roots[port])},
		}})
	}
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + draE2ENICDriver},
		Spec: resourceapi.ResourceSliceSpec{Driver: draE2ENICDriver, NodeName: &node,
			Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}, Devices: devs},
	}
	if _, err := api.Client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatalf("publishing the NIC driver's slice: %v", err)
	}
}

// draE2EDriverClass creates a DeviceClass of every device of a driver.
func draE2EDriverClass(t *testing.T, api *harness.APIServer, name, driver string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", driver)}}}},
	}
	if _, err := api.Client.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// draE2ECreateClaim creates a claim and a pod asking for it, which the
// scheduler then allocates and binds, or leaves Pending.
func draE2ECreateClaim(t *testing.T, api *harness.APIServer, c *resourceapi.ResourceClaim) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c.Namespace = draE2ENamespace
	if _, err := api.Client.ResourceV1().ResourceClaims(draE2ENamespace).Create(ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating claim %s: %v", c.Name, err)
	}
	if _, err := api.Client.CoreV1().Pods(draE2ENamespace).Create(ctx, draE2EPod("pod-"+c.Name, "", 0, c.Name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// draE2EResults waits until the scheduler bound the claim's pod and
// returns the claim's allocation results.
func draE2EResults(t *testing.T, api *harness.APIServer, claim string) []resourceapi.DeviceRequestAllocationResult {
	t.Helper()
	draE2EWaitPod(t, api, "pod-"+claim, "bound", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := api.Client.ResourceV1().ResourceClaims(draE2ENamespace).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Allocation == nil {
		t.Fatalf("claim %s of a bound pod is not allocated", claim)
	}
	return c.Status.Allocation.Devices.Results
}

// draE2EWaitUnschedulable waits until the scheduler found no node for the
// claim's pod, and checks the claim stayed unallocated.
func draE2EWaitUnschedulable(t *testing.T, api *harness.APIServer, claim string) {
	t.Helper()
	p := draE2EWaitPod(t, api, "pod-"+claim, "unschedulable", func(p *corev1.Pod) bool { return draE2EUnschedulable(p) != nil })
	if p.Spec.NodeName != "" {
		t.Errorf("pod of claim %s bound to %s", claim, p.Spec.NodeName)
	}
	t.Logf("claim %s: scheduler: %s", claim, draE2EUnschedulable(p).Message)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := api.Client.ResourceV1().ResourceClaims(draE2ENamespace).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status.Allocation != nil {
		t.Errorf("claim %s allocated %+v", claim, c.Status.Allocation.Devices.Results)
	}
}

// draE2EInventoryGPU is a GPU of the test node as discover reports it.
type draE2EInventoryGPU struct {
	UUID     string `json:"uuid"`
	PCIBusID string `json:"pciBusID"`
	PCIeRoot string `json:"pcieRoot"`
	NUMANode int    `json:"numaNode"`
	Product  string `json:"product"`
	Minor    int    `json:"minor"`
	MIG      []struct {
		UUID string `json:"uuid"`
	} `json:"migDevices"`
}

// draE2EGPUs discovers the test node's GPUs with their PCIe placement.
func draE2EGPUs(t *testing.T) []draE2EInventoryGPU {
	t.Helper()
	var doc struct {
		Inventory struct {
			GPUs []draE2EInventoryGPU `json:"gpus"`
		} `json:"inventory"`
	}
	discoverInto(t, filepath.Join(build.root, "test", "e2e", draE2EFakeNode), &doc)
	return doc.Inventory.GPUs
}

// TestDRAStandardAttributesAndPrioritizedList runs featureplug with --serve
// dra on the six-GPU fake node, next to a test-only NIC driver's slice, and
// the real kube-scheduler:
//   - every device carries the standard resource.kubernetes.io/pcieRoot,
//     pciBusID and numaNode of its GPU (a MIG device its parent's);
//   - a claim for a GPU and a NIC with matchAttribute
//     resource.kubernetes.io/pcieRoot is allocated the one GPU under the
//     NIC's root; with a NIC under a root no GPU shares it stays Pending;
//   - a firstAvailable claim (an H100, else an A100-SXM4-40GB) on this
//     node without H100s is satisfied by its second choice;
//   - a pod asking for the implicit extended resource of a class,
//     deviceclass.resource.kubernetes.io/<class>, gets a device of it.
func TestDRAStandardAttributesAndPrioritizedList(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, kube-scheduler and featureplug")
	}
	api := harness.StartAPIServer(t)
	draE2EEnsureServiceAccount(t, api)
	n := draE2EStartNode(t, api, "dra-topology", draE2ERules(""))
	n.draE2EStartAgent(t, "dra", "")
	n.draE2EWaitRegistered(t)
	slice := n.draE2EWaitSlice(t, map[string]int{draE2EA100: 3, draE2EOther: 2, draE2EMIG: 2})

	gpus := draE2EGPUs(t)
	byDevice := map[string]draE2EInventoryGPU{}
	roots := map[string]bool{}
	for _, g := range gpus {
		byDevice[draE2EDeviceName(g.UUID)] = g
		for _, m := range g.MIG {
			byDevice[draE2EDeviceName(m.UUID)] = g // a MIG device has its parent's placement
		}
		roots[g.PCIeRoot] = true
	}
	if len(roots) != len(gpus) || roots[""] {
		t.Fatalf("the fake node's GPUs have PCIe roots %v, want one each", roots)
	}
	for _, d := range slice.Spec.Devices {
		g, ok := byDevice[d.Name]
		if !ok {
			t.Errorf("slice device %s is no GPU or MIG device of the node", d.Name)
			continue
		}
		for attr, want := range map[string]string{draE2EPCIeRoot: g.PCIeRoot, draE2EPCIBusID: g.PCIBusID} {
			if a := d.Attributes[resourceapi.QualifiedName(attr)]; a.StringValue == nil || *a.StringValue != want {
				t.Errorf("device %s: %s = %+v, want %q", d.Name, attr, a, want)
			}
		}
		if a := d.Attributes[draE2ENUMANode]; a.IntValue == nil || *a.IntValue != int64(g.NUMANode) {
			t.Errorf("device %s: %s = %+v, want %d", d.Name, draE2ENUMANode, a, g.NUMANode)
		}
	}

	// NIC a shares GPU 3's PCIe root; NIC b sits under a root of its own.
	gpu3 := gpus[3]
	draE2ENICSlice(t, api, n.name, map[string]string{"a": gpu3.PCIeRoot, "b": "pci0000:f0"})
	draE2ECreateClasses(t, api, n.rules)
	draE2EDriverClass(t, api, draE2EAnyClass, draE2EDriver)
	draE2EDriverClass(t, api, "nic.e2e.example.com", draE2ENICDriver)
	harness.StartScheduler(t, api)

	aligned := func(name, port string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{
					{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: draE2EAnyClass,
						Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: draE2EAttr("type") + ` == "gpu"`}}}}},
					{Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "nic.e2e.example.com",
						Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
							Expression: fmt.Sprintf("device.attributes[%q].port == %q", draE2ENICDriver, port)}}}}},
				},
				Constraints: []resourceapi.DeviceConstraint{{Requests: []string{"gpu", "nic"}, MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(draE2EPCIeRoot))}},
			}},
		}
	}

	t.Run("GPUAndNICUnderOneRoot", func(t *testing.T) {
		draE2ECreateClaim(t, api, aligned("gpu-nic-aligned", "a"))
		got := map[string]string{}
		for _, r := range draE2EResults(t, api, "gpu-nic-aligned") {
			got[r.Request] = r.Driver + "/" + r.Device
		}
		want := map[string]string{"gpu": draE2EDriver + "/" + draE2EDeviceName(gpu3.UUID), "nic": draE2ENICDriver + "/nic-a"}
		if len(got) != 2 || got["gpu"] != want["gpu"] || got["nic"] != want["nic"] {
			t.Errorf("allocated %v, want GPU 3 and NIC a under PCIe root %s: %v", got, gpu3.PCIeRoot, want)
		}
	})

	t.Run("NoCommonRootStaysPending", func(t *testing.T) {
		draE2ECreateClaim(t, api, aligned("gpu-nic-apart", "b"))
		draE2EWaitUnschedulable(t, api, "gpu-nic-apart")
	})

	t.Run("FirstAvailableSecondChoice", func(t *testing.T) {
		// The any class holds MIG devices too, which have no product:
		// the type comes first, or CEL fails on them.
		sub := func(name, cel string) resourceapi.DeviceSubRequest {
			cel = draE2EAttr("type") + ` == "gpu" && ` + cel
			return resourceapi.DeviceSubRequest{Name: name, DeviceClassName: draE2EAnyClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: cel}}}}
		}
		draE2ECreateClaim(t, api, &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "h100-else-a100"},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "gpu",
				FirstAvailable: []resourceapi.DeviceSubRequest{
					sub("h100", draE2EAttr("product")+`.matches("H100")`),
					sub("a100-40gb", draE2EAttr("product")+` == "NVIDIA A100-SXM4-40GB"`),
				},
			}}}},
		})
		res := draE2EResults(t, api, "h100-else-a100")
		if want := draE2EDeviceName(gpus[4].UUID); len(res) != 1 || res[0].Request != "gpu/a100-40gb" || res[0].Device != want {
			t.Errorf("allocated %+v, want subrequest gpu/a100-40gb with GPU 4 (%s)", res, want)
		}
	})

	t.Run("ImplicitExtendedResource", func(t *testing.T) {
		// Every class serves deviceclass.resource.kubernetes.io/<class>.
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		res := "deviceclass.resource.kubernetes.io/gpu.example.com.featureplug.io"
		if _, err := api.Client.CoreV1().Pods(draE2ENamespace).Create(ctx, draE2EPod("implicit", res, 1, ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := draE2EWaitPod(t, api, "implicit", "bound with the claim the scheduler made", func(p *corev1.Pod) bool {
			return p.Spec.NodeName != "" && p.Status.ExtendedResourceClaimStatus != nil
		})
		devs := draE2EAllocated(t, api, n.name, p.Status.ExtendedResourceClaimStatus.ResourceClaimName)
		// GPU 4, the class's other device, went to the prioritized list.
		if want := draE2EDeviceName(gpus[5].UUID); len(devs) != 1 || devs[0] != want {
			t.Errorf("pod asking for %s got %v, want GPU 5 (%s, example.com/gpu)", res, devs, want)
		}
	})
}

// discoverInto runs `featureplug discover -o json` on a fake node and
// decodes its output into v.
func discoverInto(t *testing.T, fakeNode string, v any) {
	t.Helper()
	out, err := exec.Command(build.agent, "discover", "--fake-node", fakeNode, "-o", "json").Output()
	if err != nil {
		t.Fatalf("featureplug discover --fake-node %s: %v", fakeNode, err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("decoding featureplug discover --fake-node %s: %v", fakeNode, err)
	}
}
