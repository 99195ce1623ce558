package e2e

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/featureplug/featureplug/test/harness"
)

// TestVFIOPublished runs the agent on the bundled l40s-vfio node (four
// L40S on nvidia, four on vfio-pci) against a real kube-apiserver and
// nfd-master: the NodeFeature carries an nvidia.vfio instance per GPU on
// vfio-pci, and nfd-master puts featureplug's VFIO labels on the Node
// beside gpu-feature-discovery's, which count the GPUs NVML sees.
func TestVFIOPublished(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, nfd-master and featureplug")
	}
	api := harness.StartAPIServer(t)
	c := &cluster{api: api, master: harness.StartNFDMaster(t, api, nfdMasterNode)}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := api.CreateNamespace(ctx, agentNamespace); err != nil {
		t.Fatal(err)
	}
	node := c.node(t, "vfio-node", nil)
	startAgent(t, agentSpec{
		Node:       node,
		FakeNode:   "l40s-vfio",
		Publish:    "nodefeature",
		Kubeconfig: api.KubeconfigPath,
		Namespace:  agentNamespace,
	})
	c.waitLabels(t, node, map[string]string{
		"featureplug.io/vfio.count":   "4",
		"featureplug.io/vfio.product": "NVIDIA-L40S",
		"nvidia.com/gpu.count":        "4",
		"nvidia.com/gpu.product":      "NVIDIA-L40S",
	})
	nf, err := api.NFD.NfdV1alpha1().NodeFeatures(agentNamespace).Get(ctx, nodeFeatureName(node), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vfio := nf.Spec.Features.Instances["nvidia.vfio"].Elements
	if len(vfio) != 4 {
		t.Fatalf("%d nvidia.vfio instances in the NodeFeature, want 4", len(vfio))
	}
	if a := vfio[0].Attributes; a["pci.bus"] != "0000:47:00.0" || a["device.name"] != "AD102GL_L40S" || a["iommu.group.devices"] != "2" {
		t.Errorf("first nvidia.vfio instance = %v", a)
	}
}
