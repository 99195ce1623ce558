package labeler

import (
	"strconv"
	"strings"

	"github.com/featureplug/featureplug/discovery"
)

// Labels of the GPUs reserved for VFIO passthrough (Inventory.VFIO), in
// featureplug's own namespace: gpu-feature-discovery has none for them,
// and NVIDIA's nvidia.com/gpu.* labels describe the GPUs containers get.
// An admin selects the nodes for GPU virtual machines by them.
const (
	// LabelVFIOCount is the number of GPUs reserved for VFIO passthrough
	// (bound to vfio-pci, or unbound while their driver_override says
	// vfio-pci).
	LabelVFIOCount = "featureplug.io/vfio.count"
	// LabelVFIOProduct is their product, sanitized as nvidia.com/gpu.product
	// ("NVIDIA-L40S", "10de-2bb1" for a device ID featureplug does not
	// know): of the most of them on a node with several, ties going to the
	// product of the lowest PCI address.
	LabelVFIOProduct = "featureplug.io/vfio.product"
)

// vfioLabels adds LabelVFIOCount and LabelVFIOProduct on a node with VFIO
// devices.
func (l *labelSet) vfioLabels(inv *discovery.Inventory) {
	if len(inv.VFIO) == 0 {
		return
	}
	counts := make(map[string]int, 1)
	for i := range inv.VFIO {
		counts[inv.VFIO[i].Product]++
	}
	best := inv.VFIO[0].Product
	for i := range inv.VFIO {
		if p := inv.VFIO[i].Product; counts[p] > counts[best] {
			best = p
		}
	}
	l.set(LabelVFIOCount, strconv.Itoa(len(inv.VFIO)))
	// A device ID featureplug does not know is its product: 10de-2bb1.
	l.set(LabelVFIOProduct, productName(false, strings.ReplaceAll(best, ":", "-")))
}
