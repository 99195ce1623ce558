package e2e

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/test/harness"
)

// The VFIO resource of the bundled l40s-vfio node under the KubeVirt
// example rules, and the variable KubeVirt reads its PCI addresses from.
const (
	vfioL40S    = "nvidia.com/AD102GL_L40S"
	vfioL40SEnv = "PCI_RESOURCE_NVIDIA_COM_AD102GL_L40S"
)

// vfioGroups are the IOMMU groups of the l40s-vfio node's GPUs on
// vfio-pci, by PCI address; 0000:47:00.0 shares its group with its audio
// function.
var vfioGroups = map[string]string{"0000:47:00.0": "34", "0000:57:00.0": "35", "0000:67:00.0": "36", "0000:77:00.0": "37"}

// TestVFIOKubelet runs the agent on the l40s-vfio fake node (four L40S on
// nvidia, four on vfio-pci) with the KubeVirt example rules against the
// kubelet's own device manager: both kinds are served from one rules file;
// a VM's allocation gets the VFIO device nodes of exactly its GPUs' groups
// and KubeVirt's PCI_RESOURCE variable with exactly their addresses, on one
// NUMA node, and the next VM's the other two; a container's allocation
// keeps NVIDIA's answer.
func TestVFIOKubelet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug against the kubelet's device manager")
	}
	peer, _, _ := startVFIOKubelet(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	vm, err := peer.Allocate(ctx, "vm-a", "compute", vfioL40S, 2)
	if err != nil {
		t.Fatal(err)
	}
	ids := vm.DeviceIDs[vfioL40S]
	if !slices.Equal(ids, []string{"0000:47:00.0", "0000:57:00.0"}) {
		t.Errorf("VM got %v, want the two GPUs of NUMA node 0", ids)
	}
	wantDevices := []harness.DeviceNode{{ContainerPath: "/dev/vfio/vfio", HostPath: "/dev/vfio/vfio", Permissions: "mrw"}}
	for _, id := range ids {
		p := "/dev/vfio/" + vfioGroups[id]
		wantDevices = append(wantDevices, harness.DeviceNode{ContainerPath: p, HostPath: p, Permissions: "mrw"})
	}
	slices.SortFunc(wantDevices, func(a, b harness.DeviceNode) int { return strings.Compare(a.ContainerPath, b.ContainerPath) })
	if !slices.Equal(vm.Devices, wantDevices) {
		t.Errorf("VM device nodes = %+v, want %+v", vm.Devices, wantDevices)
	}
	if got := vm.Envs[vfioL40SEnv]; got != strings.Join(ids, ",") || len(vm.Envs) != 1 {
		t.Errorf("VM environment = %v, want only %s=%s", vm.Envs, vfioL40SEnv, strings.Join(ids, ","))
	}
	if len(vm.CDIDevices) != 0 || len(vm.Mounts) != 0 || len(vm.Annotations) != 0 {
		t.Errorf("VM allocation has CDI devices %v, mounts %v, annotations %v", vm.CDIDevices, vm.Mounts, vm.Annotations)
	}
	ctr, err := peer.Allocate(ctx, "ctr-a", "cuda", "nvidia.com/gpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	if ctr.Envs["NVIDIA_VISIBLE_DEVICES"] == "" || len(ctr.Devices) != 0 || ctr.Envs[vfioL40SEnv] != "" {
		t.Errorf("container allocation = %+v, want NVIDIA_VISIBLE_DEVICES and no VFIO", ctr)
	}

	again, err := peer.Allocate(ctx, "vm-b", "compute", vfioL40S, 2)
	if err != nil {
		t.Fatal(err)
	}
	if ids := again.DeviceIDs[vfioL40S]; !slices.Equal(ids, []string{"0000:67:00.0", "0000:77:00.0"}) || again.Envs[vfioL40SEnv] != strings.Join(ids, ",") {
		t.Errorf("second VM got %v with %s=%q", ids, vfioL40SEnv, again.Envs[vfioL40SEnv])
	}
}

// startVFIOKubelet starts the kubelet's device manager and the agent on the
// l40s-vfio fake node with the KubeVirt example rules, its sysfs tree in a
// directory of the test's, and waits for both kinds to be served. It
// returns the peer, the tree's root and the agent.
func startVFIOKubelet(t *testing.T) (*harness.KubeletPeer, string, *agent) {
	t.Helper()
	rules, err := filepath.Abs("../../manifests/examples/rules/kubevirt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kubeletDir := shortTempDir(t)
	peer := harness.StartKubeletPeer(t, kubeletDir)
	sysfs := t.TempDir()
	a := startAgent(t, agentSpec{
		Node: "vfio-kubelet", FakeNode: "l40s-vfio", Rules: rules, KubeletDir: kubeletDir,
		Extra: []string{"--sysfs-root", sysfs, "--rediscover-interval", "1h", "--vfio-health-interval", "1s"},
	})
	waitCapacities(t, peer, map[string]int64{"nvidia.com/gpu": 4, vfioL40S: 4})
	return peer, sysfs, a
}
