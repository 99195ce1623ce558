package fakenode_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/fakenode"
)

// linkMatrix reads what connects every pair of GPUs: "NV<n>/" when NVLink
// lanes connect them (directly, or through NVSwitches both reach: the
// smaller lane count), then the PCIe level as nvidia-smi topo -m names it.
func linkMatrix(t *testing.T, lib nvml.Interface) []string {
	t.Helper()
	count, _ := lib.DeviceGetCount()
	devs := make([]nvml.Device, count)
	bus := map[string]int{}
	for i := range devs {
		devs[i], _ = lib.DeviceGetHandleByIndex(i)
		pci, _ := devs[i].GetPciInfo()
		bus[cString(pci.BusId[:])] = i
	}
	direct := make([]map[int]int, count)
	switches := make([]map[string]int, count)
	for i, d := range devs {
		direct[i], switches[i] = map[int]int{}, map[string]int{}
		for l := range nvml.NVLINK_MAX_LINKS {
			state, ret := d.GetNvLinkState(l)
			if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
				break
			}
			if ret != nvml.SUCCESS {
				t.Fatalf("GPU %d link %d: %v", i, l, ret)
			}
			if state != nvml.FEATURE_ENABLED {
				continue
			}
			remote, _ := d.GetNvLinkRemotePciInfo(l)
			kind, _ := d.GetNvLinkRemoteDeviceType(l)
			id := cString(remote.BusId[:])
			switch kind {
			case nvml.NVLINK_DEVICE_TYPE_GPU:
				direct[i][bus[id]]++
			case nvml.NVLINK_DEVICE_TYPE_SWITCH:
				switches[i][id]++
			}
		}
	}
	levels := map[nvml.GpuTopologyLevel]string{
		nvml.TOPOLOGY_SINGLE: "PIX", nvml.TOPOLOGY_MULTIPLE: "PXB", nvml.TOPOLOGY_HOSTBRIDGE: "PHB",
		nvml.TOPOLOGY_NODE: "NODE", nvml.TOPOLOGY_SYSTEM: "SYS",
	}
	rows := make([]string, count)
	for i := range devs {
		var cells []string
		for j := range devs {
			if i == j {
				cells = append(cells, "X")
				continue
			}
			lanes := direct[i][j]
			for sw, n := range switches[i] {
				lanes += min(n, switches[j][sw])
			}
			level, ret := devs[i].GetTopologyCommonAncestor(devs[j])
			if ret != nvml.SUCCESS {
				t.Fatalf("topology %d-%d: %v", i, j, ret)
			}
			cell := levels[level]
			if lanes > 0 {
				cell = fmt.Sprintf("NV%d/%s", lanes, cell)
			}
			cells = append(cells, cell)
		}
		rows[i] = strings.Join(cells, " ")
	}
	return rows
}

func cString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// TestTopology checks the link matrix of bundled and test nodes.
func TestTopology(t *testing.T) {
	tests := []struct {
		node string
		want []string
	}{
		{"dgx-a100", []string{
			"X NV12/PXB NV12/NODE NV12/NODE NV12/SYS NV12/SYS NV12/SYS NV12/SYS",
			"NV12/PXB X NV12/NODE NV12/NODE NV12/SYS NV12/SYS NV12/SYS NV12/SYS",
			"NV12/NODE NV12/NODE X NV12/PXB NV12/SYS NV12/SYS NV12/SYS NV12/SYS",
			"NV12/NODE NV12/NODE NV12/PXB X NV12/SYS NV12/SYS NV12/SYS NV12/SYS",
			"NV12/SYS NV12/SYS NV12/SYS NV12/SYS X NV12/PXB NV12/NODE NV12/NODE",
			"NV12/SYS NV12/SYS NV12/SYS NV12/SYS NV12/PXB X NV12/NODE NV12/NODE",
			"NV12/SYS NV12/SYS NV12/SYS NV12/SYS NV12/NODE NV12/NODE X NV12/PXB",
			"NV12/SYS NV12/SYS NV12/SYS NV12/SYS NV12/NODE NV12/NODE NV12/PXB X",
		}},
		{"dgx-h100", []string{
			"X NV18/NODE NV18/NODE NV18/NODE NV18/SYS NV18/SYS NV18/SYS NV18/SYS",
			"NV18/NODE X NV18/NODE NV18/NODE NV18/SYS NV18/SYS NV18/SYS NV18/SYS",
			"NV18/NODE NV18/NODE X NV18/NODE NV18/SYS NV18/SYS NV18/SYS NV18/SYS",
			"NV18/NODE NV18/NODE NV18/NODE X NV18/SYS NV18/SYS NV18/SYS NV18/SYS",
			"NV18/SYS NV18/SYS NV18/SYS NV18/SYS X NV18/NODE NV18/NODE NV18/NODE",
			"NV18/SYS NV18/SYS NV18/SYS NV18/SYS NV18/NODE X NV18/NODE NV18/NODE",
			"NV18/SYS NV18/SYS NV18/SYS NV18/SYS NV18/NODE NV18/NODE X NV18/NODE",
			"NV18/SYS NV18/SYS NV18/SYS NV18/SYS NV18/NODE NV18/NODE NV18/NODE X",
		}},
		{"hgx-b200", []string{
			"X NV18/PIX NV18/NODE NV18/NODE NV18/SYS NV18/SYS NV18/SYS NV18/SYS",
			"NV18/PIX X NV18/NODE NV18/NODE NV18/SYS NV18/SYS NV18/SYS NV18/SYS",
			"NV18/NODE NV18/NODE X NV18/PIX NV18/SYS NV18/SYS NV18/SYS NV18/SYS",
			"NV18/NODE NV18/NODE NV18/PIX X NV18/SYS NV18/SYS NV18/SYS NV18/SYS",
			"NV18/SYS NV18/SYS NV18/SYS NV18/SYS X NV18/PIX NV18/NODE NV18/NODE",
			"NV18/SYS NV18/SYS NV18/SYS NV18/SYS NV18/PIX X NV18/NODE NV18/NODE",
			"NV18/SYS NV18/SYS NV18/SYS NV18/SYS NV18/NODE NV18/NODE X NV18/PIX",
			"NV18/SYS NV18/SYS NV18/SYS NV18/SYS NV18/NODE NV18/NODE NV18/PIX X",
		}},
		{"h100-nvl", []string{
			"X NV12/NODE SYS SYS",
			"NV12/NODE X SYS SYS",
			"SYS SYS X NV12/NODE",
			"SYS SYS NV12/NODE X",
		}},
		{"l40s-pcie", []string{"X NODE SYS SYS", "NODE X SYS SYS", "SYS SYS X NODE", "SYS SYS NODE X"}},
		{"a100-80gb-mixed", []string{"X NV4/NODE", "NV4/NODE X"}},
		{"workstation", []string{"X"}},
		{"testdata/topology.yaml", []string{
			"X NV2/NODE NV1/NODE PHB",
			"NV2/NODE X NV1/PIX NV6/SYS",
			"NV1/NODE NV1/PIX X SYS",
			"PHB NV6/SYS SYS X",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.node, func(t *testing.T) {
			n, err := fakenode.Open(tt.node)
			if err != nil {
				t.Fatal(err)
			}
			got := linkMatrix(t, n.NVML())
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("links:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestNVLinkLanes checks the per-lane answers: connected lanes, spare lanes,
// lanes past the GPU's last, and GPUs without NVLink.
func TestNVLinkLanes(t *testing.T) {
	mixed, _ := fakenode.Named("a100-80gb-mixed")
	dgx, _ := fakenode.Named("dgx-a100")
	ws, _ := fakenode.Named("workstation")
	gpu := func(n *fakenode.Node, i int) nvml.Device {
		d, _ := n.NVML().DeviceGetHandleByIndex(i)
		return d
	}
	tests := []struct {
		name   string
		dev    nvml.Device
		link   int
		state  nvml.EnableState
		ret    nvml.Return
		remote string
		kind   nvml.IntNvLinkDeviceType
		pciID  uint32
	}{
		{"direct lane", gpu(mixed, 0), 3, nvml.FEATURE_ENABLED, nvml.SUCCESS, "00000000:17:00.0", nvml.NVLINK_DEVICE_TYPE_GPU, 0x20B210DE},
		{"spare lane", gpu(mixed, 0), 4, nvml.FEATURE_DISABLED, nvml.SUCCESS, "", 0, 0},
		{"past the last lane", gpu(mixed, 0), 12, nvml.FEATURE_DISABLED, nvml.ERROR_INVALID_ARGUMENT, "", 0, 0},
		{"switch lane", gpu(dgx, 2), 7, nvml.FEATURE_ENABLED, nvml.SUCCESS, "00000000:1C:00.0", nvml.NVLINK_DEVICE_TYPE_SWITCH, 0x1AF110DE},
		{"no NVLink", gpu(ws, 0), 0, nvml.FEATURE_DISABLED, nvml.ERROR_NOT_SUPPORTED, "", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state, ret := tt.dev.GetNvLinkState(tt.link)
			if state != tt.state || ret != tt.ret {
				t.Fatalf("state = %v, %v; want %v, %v", state, ret, tt.state, tt.ret)
			}
			remote, ret := tt.dev.GetNvLinkRemotePciInfo(tt.link)
			kind, _ := tt.dev.GetNvLinkRemoteDeviceType(tt.link)
			if tt.remote == "" {
				if ret == nvml.SUCCESS {
					t.Errorf("remote PCI info of an unconnected lane: %+v", remote)
				}
				return
			}
			if got := cString(remote.BusId[:]); got != tt.remote || kind != tt.kind || remote.PciDeviceId != tt.pciID {
				t.Errorf("remote = %s %#x kind %v; want %s %#x kind %v", got, remote.PciDeviceId, kind, tt.remote, tt.pciID, tt.kind)
			}
		})
	}
}

// TestPCIInfo checks the PCI info format NVML uses.
func TestPCIInfo(t *testing.T) {
	n, _ := fakenode.Named("dgx-h100")
	dev, _ := n.NVML().DeviceGetHandleByIndex(2)
	pci, ret := dev.GetPciInfo()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if got := cString(pci.BusId[:]); got != "00000000:27:00.0" {
		t.Errorf("BusId = %q", got)
	}
	if got := cString(pci.BusIdLegacy[:]); got != "0000:27:00.0" {
		t.Errorf("BusIdLegacy = %q", got)
	}
	if pci.Bus != 0x27 || pci.Domain != 0 || pci.Device != 0 || pci.PciDeviceId != 0x233010DE {
		t.Errorf("PCI info = %+v", pci)
	}
	for _, id := range []string{"00000000:27:00.0", "0000:27:00.0", "0000:27:00.0"} {
		if h, ret := n.NVML().DeviceGetHandleByPciBusId(id); ret != nvml.SUCCESS || h != dev {
			t.Errorf("DeviceGetHandleByPciBusId(%s) = %v, %v", id, h, ret)
		}
	}
}
