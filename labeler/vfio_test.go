package labeler

import (
	"maps"
	"testing"

	"github.com/featureplug/featureplug/discovery"
)

// TestVFIOLabels checks the VFIO labels: on a node without NVML they are
// the only labels; with several products the most common one is named,
// ties going to the lowest PCI address.
func TestVFIOLabels(t *testing.T) {
	dev := func(addr, product string) discovery.VFIODevice {
		return discovery.VFIODevice{PCIAddress: addr, Product: product}
	}
	for _, tt := range []struct {
		name string
		vfio []discovery.VFIODevice
		want map[string]string
	}{
		{"none", nil, map[string]string{}},
		{"one product", []discovery.VFIODevice{dev("0000:47:00.0", "NVIDIA L40S"), dev("0000:57:00.0", "NVIDIA L40S")},
			map[string]string{LabelVFIOCount: "2", LabelVFIOProduct: "NVIDIA-L40S"}},
		{"the most common", []discovery.VFIODevice{dev("0000:47:00.0", "NVIDIA L4"), dev("0000:57:00.0", "NVIDIA H100 80GB HBM3"), dev("0000:67:00.0", "NVIDIA H100 80GB HBM3")},
			map[string]string{LabelVFIOCount: "3", LabelVFIOProduct: "NVIDIA-H100-80GB-HBM3"}},
		{"a tie", []discovery.VFIODevice{dev("0000:47:00.0", "NVIDIA L4"), dev("0000:57:00.0", "10de:2bb1")},
			map[string]string{LabelVFIOCount: "2", LabelVFIOProduct: "NVIDIA-L4"}},
		{"an unknown device ID", []discovery.VFIODevice{dev("0000:47:00.0", "10de:2bb1")},
			map[string]string{LabelVFIOCount: "1", LabelVFIOProduct: "10de-2bb1"}},
	} {
		got := Labels(&discovery.Inventory{VFIO: tt.vfio}, nil, LabelOptions{})
		if !maps.Equal(got, tt.want) {
			t.Errorf("%s: labels %v, want %v", tt.name, got, tt.want)
		}
	}
}
