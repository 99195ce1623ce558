package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/featureplug/featureplug/test/harness"
)

// NVIDIA's DRA driver as the tests meet it: its driver name (also its
// attribute domain) and the DeviceClass its Helm chart installs
// (deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-gpu.yaml).
const draE2ENVIDIADriver = "gpu.nvidia.com"

func draE2ENVIDIAGPUClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu.nvidia.com"},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}},
			ExtendedResourceName: ptr.To("nvidia.com/gpu"),
		},
	}
}

// draE2EClassClaim is a claim for one device of a class that the CEL
// expression selects ("" for none).
func draE2EClassClaim(name, class, cel string) *resourceapi.ResourceClaim {
	req := &resourceapi.ExactDeviceRequest{DeviceClassName: class}
	if cel != "" {
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: cel}}}
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: req}}}},
	}
}

// draE2ENVIDIARules are draE2ERules with NVIDIA compatibility on.
func draE2ENVIDIARules() string {
	return strings.Replace(draE2ERules(""), "kind: ResourceRules\n", "kind: ResourceRules\ndra:\n  compatibility: nvidia\n", 1)
}

// TestDRANVIDIACompatibility runs featureplug with dra.compatibility:
// nvidia on the six-GPU fake node, with the classes `featureplug dra
// classes` makes (NVIDIA's gpu.nvidia.com and mig.nvidia.com among them)
// and the real kube-scheduler: claims written for NVIDIA's DRA driver
// (a gpu.nvidia.com claim selecting productName, one comparing
// cudaComputeCapability with semver, a mig.nvidia.com claim selecting
// profile) are allocated featureplug's devices, named as NVIDIA's driver
// names them, and the kubelet prepares one by that name.
func TestDRANVIDIACompatibility(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, kube-scheduler and featureplug")
	}
	api := harness.StartAPIServer(t)
	draE2EEnsureServiceAccount(t, api)
	n := draE2EStartNode(t, api, "dra-nvidia", draE2ENVIDIARules())
	n.draE2EStartAgent(t, "dra", "")
	n.draE2EWaitRegistered(t)
	slice := n.draE2EWaitSlice(t, map[string]int{draE2EA100: 3, draE2EOther: 2, draE2EMIG: 2})
	gpus := draE2EGPUs(t)
	for _, d := range slice.Spec.Devices {
		if !strings.HasPrefix(d.Name, "gpu-") || strings.Contains(d.Name, "-mig-") != (d.Attributes["gpu.nvidia.com/type"].StringValue != nil && *d.Attributes["gpu.nvidia.com/type"].StringValue == "mig") {
			t.Errorf("device %s: not named as NVIDIA's driver names it (gpu-<minor>, gpu-<minor>-mig-...)", d.Name)
		}
		if _, ok := d.Attributes["product"]; ok {
			t.Errorf("device %s carries product besides gpu.nvidia.com/productName", d.Name)
		}
	}
	classes := draE2ECreateClasses(t, api, n.rules)
	var names []string
	for _, c := range classes {
		names = append(names, c.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "gpu.nvidia.com mig.nvidia.com") {
		t.Fatalf("classes %v, want NVIDIA's gpu.nvidia.com and mig.nvidia.com", names)
	}
	harness.StartScheduler(t, api)

	attr := func(name string) string { return fmt.Sprintf("device.attributes[%q].%s", draE2ENVIDIADriver, name) }
	for _, c := range []struct {
		claim, class, cel string
		want              string // device name, or a prefix ending in "-"
	}{
		{"nvidia-product", "gpu.nvidia.com", attr("productName") + ` == "NVIDIA A100-SXM4-40GB"`, fmt.Sprintf("gpu-%d", gpus[4].Minor)},
		{"nvidia-cc", "gpu.nvidia.com", attr("cudaComputeCapability") + `.compareTo(semver("8.9.0")) >= 0`, fmt.Sprintf("gpu-%d", gpus[5].Minor)},
		{"nvidia-mig", "mig.nvidia.com", attr("profile") + ` == "3g.40gb"`, fmt.Sprintf("gpu-%d-mig-3g40gb-", gpus[0].Minor)},
	} {
		t.Run(c.claim, func(t *testing.T) {
			draE2ECreateClaim(t, api, draE2EClassClaim(c.claim, c.class, c.cel))
			res := draE2EResults(t, api, c.claim)
			if len(res) != 1 || res[0].Driver != draE2EDriver || res[0].Pool != n.name ||
				!(res[0].Device == c.want || strings.HasSuffix(c.want, "-") && strings.HasPrefix(res[0].Device, c.want)) {
				t.Fatalf("claim for %s selecting %s got %+v, want featureplug's %s", c.class, c.cel, res, c.want)
			}
		})
	}

	t.Run("PreparedByNVIDIAName", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		p, err := api.Client.CoreV1().Pods(draE2ENamespace).Get(ctx, "pod-nvidia-product", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := n.kubelet.PreparePod(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		draE2ECheckCDI(t, n.cdiDir, ids["main"], []string{gpus[4].UUID}, draE2EOther)
	})
}

// TestDRANVIDIAClassNotShadowed installs NVIDIA's gpu.nvidia.com class
// and a node of NVIDIA's driver first, then runs featureplug without
// NVIDIA compatibility: `featureplug dra classes --kubeconfig` refuses
// rules whose class would take nvidia.com/gpu from NVIDIA's class, and for
// rules that do not, prints classes none of which touches NVIDIA's; with
// them applied, claims for gpu.nvidia.com get NVIDIA's GPU and, once it is
// taken, stay Pending rather than get one of featureplug's.
func TestDRANVIDIAClassNotShadowed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, kube-scheduler and featureplug")
	}
	api := harness.StartAPIServer(t)
	draE2EEnsureServiceAccount(t, api)
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitTimeout)
	defer cancel()
	nvidiaClass, err := api.Client.ResourceV1().DeviceClasses().Create(ctx, draE2ENVIDIAGPUClass(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A node of NVIDIA's driver, with one H100 as its slice has it.
	if _, err := api.CreateNode(ctx, "nvidia-node"); err != nil {
		t.Fatal(err)
	}
	if err := harness.SetNodeReady(ctx, api, "nvidia-node"); err != nil {
		t.Fatal(err)
	}
	node := "nvidia-node"
	if _, err := api.Client.ResourceV1().ResourceSlices().Create(ctx, &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "nvidia-node-gpu.nvidia.com"},
		Spec: resourceapi.ResourceSliceSpec{Driver: draE2ENVIDIADriver, NodeName: &node,
			Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type":        {StringValue: ptr.To("gpu")},
				"productName": {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
			}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Rules naming whole GPUs nvidia.com/gpu: refused, nothing printed.
	noneRules := filepath.Join(shortTempDir(t), "none.yaml")
	writeFileAtomic(t, noneRules, []byte("apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\n"))
	cmd := exec.Command(build.agent, "dra", "classes", "--rules", noneRules, "--kubeconfig", api.KubeconfigPath)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err == nil || stdout.Len() != 0 ||
		!strings.Contains(stderr.String(), "would serve the extended resource nvidia.com/gpu, which the installed class gpu.nvidia.com of another driver serves") {
		t.Fatalf("dra classes --kubeconfig for rules serving nvidia.com/gpu: err %v, stdout %q, stderr:\n%s", err, stdout.String(), stderr.String())
	}

	// featureplug's own rules (example.com names): its classes, applied.
	n := draE2EStartNode(t, api, "dra-own", draE2ERules(""))
	n.draE2EStartAgent(t, "dra", "")
	n.draE2EWaitRegistered(t)
	n.draE2EWaitSlice(t, map[string]int{draE2EA100: 3, draE2EOther: 2, draE2EMIG: 2})
	out, err := exec.Command(build.agent, "dra", "classes", "--rules", n.rules, "--kubeconfig", api.KubeconfigPath).Output()
	if err != nil {
		t.Fatalf("dra classes --kubeconfig: %v", err)
	}
	if strings.Contains(string(out), "name: gpu.nvidia.com\n") || strings.Contains(string(out), "extendedResourceName: nvidia.com/gpu\n") {
		t.Fatalf("featureplug's classes take NVIDIA's name or extended resource:\n%s", out)
	}
	draE2ECreateClasses(t, api, n.rules)
	after, err := api.Client.ResourceV1().DeviceClasses().Get(ctx, "gpu.nvidia.com", metav1.GetOptions{})
	if err != nil || after.ResourceVersion != nvidiaClass.ResourceVersion || after.Labels["app.kubernetes.io/managed-by"] != "" {
		t.Fatalf("NVIDIA's class after featureplug's were applied: %+v (err %v), want it untouched", after, err)
	}
	harness.StartScheduler(t, api)

	draE2ECreateClaim(t, api, draE2EClassClaim("nvidia-1", "gpu.nvidia.com", ""))
	res := draE2EResults(t, api, "nvidia-1")
	if len(res) != 1 || res[0].Driver != draE2ENVIDIADriver || res[0].Device != "gpu-0" {
		t.Fatalf("claim for gpu.nvidia.com got %+v, want NVIDIA's gpu-0", res)
	}
	// NVIDIA's one GPU is taken: the next claim waits for it.
	draE2ECreateClaim(t, api, draE2EClassClaim("nvidia-2", "gpu.nvidia.com", ""))
	draE2EWaitUnschedulable(t, api, "nvidia-2")
	// featureplug's classes still serve featureplug's devices.
	draE2ECreateClaim(t, api, draE2EClassClaim("own", "gpu.example.com.featureplug.io", ""))
	if res := draE2EResults(t, api, "own"); len(res) != 1 || res[0].Driver != draE2EDriver {
		t.Fatalf("claim for featureplug's class got %+v", res)
	}
}
