package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/featureplug/featureplug/test/harness"
)

// draVFIORules serve the l40s-vfio node's GPUs on vfio-pci to VMs through
// DRA (KubeVirt's resource name) and its GPUs on nvidia to containers
// through DRA too.
const draVFIORules = `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: vms
  devices: vfio
  resource: 'nvidia.com/{{ .device_name }}'
  serve: dra
- name: containers
  devices: gpu
  resource: nvidia.com/gpu
  serve: dra
`

// draVFIOClass is the DeviceClass featureplug dra classes makes for
// vfioL40S.
const draVFIOClass = "ad102gl-l40s.nvidia.com.featureplug.io"

// TestDRAVFIO runs featureplug on the l40s-vfio fake node with rules that
// serve its VFIO GPUs through DRA, with the class `featureplug dra
// classes` makes, the real kube-scheduler and the kubelet's DRA manager: the
// slice holds the four VFIO GPUs with their PCI attributes next to the four
// container GPUs; a claim for the VFIO class is allocated a VFIO GPU, and
// Prepare returns the CDI ID of that GPU alone, which resolves to exactly
// its /dev/vfio/vfio and /dev/vfio/<group> and nothing of NVIDIA's
// (no driver libraries, no NVIDIA_VISIBLE_DEVICES); a GPU unbound from
// vfio-pci gets the unhealthy taint within the probe's period, and loses
// it when bound again.
func TestDRAVFIO(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, kube-scheduler and featureplug")
	}
	api := harness.StartAPIServer(t)
	draE2EEnsureServiceAccount(t, api)
	n := draE2EStartNode(t, api, "dra-vfio", draVFIORules)
	sysfs := t.TempDir()
	n.agent = startAgent(t, agentSpec{
		Node: n.name, FakeNode: "l40s-vfio", Rules: n.rules, Kubeconfig: api.KubeconfigPath, StateDir: n.stateDir,
		Extra: []string{"--serve", "dra", "--kubelet-registry-dir", n.regDir, "--dra-plugin-dir", n.pluginDir,
			"--cdi-spec-dir", n.cdiDir, "--cdi-kind", draE2ECDIKind, "--rediscover-interval", "1h",
			"--sysfs-root", sysfs, "--vfio-health-interval", "1s"},
	})
	n.draE2EWaitRegistered(t)
	slice := n.draE2EWaitSlice(t, map[string]int{vfioL40S: 4, "nvidia.com/gpu": 4})
	for _, d := range slice.Spec.Devices {
		if *d.Attributes[draE2EAttrResource].StringValue != vfioL40S {
			continue
		}
		addr := *d.Attributes["resource.kubernetes.io/pciBusID"].StringValue
		group, ok := vfioGroups[addr]
		if !ok || d.Name != "vfio-"+strings.NewReplacer(":", "-", ".", "-").Replace(addr) ||
			*d.Attributes["type"].StringValue != "vfio" || fmt.Sprint(*d.Attributes["iommuGroup"].IntValue) != group {
			t.Errorf("VFIO slice device %s: pciBusID %s, type %v, iommuGroup %v", d.Name, addr, d.Attributes["type"], d.Attributes["iommuGroup"])
		}
	}

	classes := draE2ECreateClasses(t, api, n.rules)
	if !slices.ContainsFunc(classes, func(c resourceapi.DeviceClass) bool {
		return c.Name == draVFIOClass && c.Spec.ExtendedResourceName == nil
	}) {
		t.Fatalf("featureplug dra classes made no class %s without an extended resource", draVFIOClass)
	}
	harness.StartScheduler(t, api)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-gpu", Namespace: draE2ENamespace},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: draVFIOClass},
		}}}},
	}
	if _, err := api.Client.ResourceV1().ResourceClaims(draE2ENamespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Client.CoreV1().Pods(draE2ENamespace).Create(ctx, draE2EPod("virt-launcher", "", 0, "vm-gpu"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := draE2EWaitPod(t, api, "virt-launcher", "bound", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
	devs := draE2EAllocated(t, api, n.name, "vm-gpu")
	if len(devs) != 1 || !strings.HasPrefix(devs[0], "vfio-") {
		t.Fatalf("the VFIO claim got %v, want one VFIO GPU", devs)
	}
	var addr string
	for a := range vfioGroups {
		if devs[0] == "vfio-"+strings.NewReplacer(":", "-", ".", "-").Replace(a) {
			addr = a
		}
	}
	ids, err := n.kubelet.PreparePod(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	want := "featureplug.io/vfio=" + addr
	if !slices.Equal(ids["main"], []string{want}) {
		t.Fatalf("Prepare gave %v, want exactly [%s]", ids, want)
	}
	draVFIOCheckCDI(t, n.cdiDir, want, []string{"/dev/vfio/" + vfioGroups[addr], "/dev/vfio/vfio"})

	// Unbinding a GPU from vfio-pci taints it; binding it again clears it.
	const gpu = "0000:77:00.0"
	driver := filepath.Join(sysfs, "sys/bus/pci/devices", gpu, "driver")
	target, err := os.Readlink(driver)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(driver); err != nil {
		t.Fatal(err)
	}
	n.draVFIOWaitTaint(t, "vfio-0000-77-00-0", "vfio-unbound")
	if err := os.Symlink(target, driver); err != nil {
		t.Fatal(err)
	}
	n.draVFIOWaitTaint(t, "vfio-0000-77-00-0", "")
}

// draVFIOCheckCDI checks that CDI ID id resolves through the specs in
// specDir to exactly the device nodes want (sorted) and nothing else, its
// spec carrying no edits for all of its devices.
func draVFIOCheckCDI(t *testing.T, specDir, id string, want []string) {
	t.Helper()
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(specDir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("CDI specs in %s do not load: %v", specDir, errs)
	}
	d := cache.GetDevice(id)
	if d == nil {
		t.Fatalf("CDI ID %s does not resolve (devices %v)", id, cache.ListDevices())
	}
	var nodes []string
	for _, dn := range d.ContainerEdits.DeviceNodes {
		nodes = append(nodes, dn.Path)
	}
	slices.Sort(nodes)
	e, common := d.ContainerEdits, d.GetSpec().ContainerEdits
	if !slices.Equal(nodes, want) || len(e.Env)+len(e.Mounts)+len(e.Hooks) != 0 ||
		len(common.Env)+len(common.Mounts)+len(common.Hooks)+len(common.DeviceNodes) != 0 {
		t.Errorf("CDI device %s: nodes %v, env %v, mounts %v, spec edits %+v; want only the nodes %v", id, nodes, e.Env, e.Mounts, common, want)
	}
}

// draVFIOWaitTaint waits until slice device name carries the unhealthy
// taint with value why, or none for "".
func (n *draE2ENode) draVFIOWaitTaint(t *testing.T, name, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := waitFor(ctx, func() (bool, string) {
		s, err := n.api.Client.ResourceV1().ResourceSlices().Get(ctx, draE2ESliceName(n.name), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, d := range s.Spec.Devices {
			if d.Name != name {
				continue
			}
			got := ""
			for _, taint := range d.Taints {
				if taint.Key == draE2EDriver+"/unhealthy" && taint.Effect == resourceapi.DeviceTaintEffectNoSchedule {
					got = taint.Value
				}
			}
			return got == why, fmt.Sprintf("taints %+v", d.Taints)
		}
		return false, "no device " + name
	}); err != nil {
		t.Fatalf("device %s: want unhealthy taint %q: %v", name, why, err)
	}
}
