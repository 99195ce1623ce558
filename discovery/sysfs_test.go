package discovery_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
)

// pciDev is one PCI function of a hand-made sysfs tree.
type pciDev struct {
	addr, vendor, device, class string
	driver, override            string // "" for none
	numa                        string // "" leaves the file out
	group                       int    // discovery.NoIOMMUGroup for none
	cdev                        string // vfio-dev entry, "" for none
}

// writeTree lays out devs under root as sysfs does.
func writeTree(t testing.TB, root string, devs ...pciDev) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range devs {
		dev := filepath.Join(root, "sys/devices/pci0000:00", d.addr)
		must(os.MkdirAll(dev, 0o755))
		files := map[string]string{"vendor": "0x" + d.vendor, "device": "0x" + d.device, "class": "0x" + d.class + "00"}
		if d.numa != "" {
			files["numa_node"] = d.numa
		}
		if d.override != "" {
			files["driver_override"] = d.override
		} else {
			files["driver_override"] = "(null)"
		}
		for name, content := range files {
			must(os.WriteFile(filepath.Join(dev, name), []byte(content+"\n"), 0o644))
		}
		link := func(target, at string) {
			must(os.MkdirAll(filepath.Dir(at), 0o755))
			must(os.Symlink(target, at))
		}
		link("../../../devices/pci0000:00/"+d.addr, filepath.Join(root, "sys/bus/pci/devices", d.addr))
		if d.driver != "" {
			link("../../../bus/pci/drivers/"+d.driver, filepath.Join(dev, "driver"))
		}
		if d.group != discovery.NoIOMMUGroup {
			g := strconv.Itoa(d.group)
			link("../../../kernel/iommu_groups/"+g, filepath.Join(dev, "iommu_group"))
			link("../../../../devices/pci0000:00/"+d.addr, filepath.Join(root, "sys/kernel/iommu_groups", g, "devices", d.addr))
		}
		if d.cdev != "" {
			must(os.MkdirAll(filepath.Join(dev, "vfio-dev", d.cdev), 0o755))
		}
	}
}

func TestReadSysfs(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root,
		// A GPU on nvidia: NVML's.
		pciDev{addr: "0000:07:00.0", vendor: "10de", device: "26b9", class: "0302", driver: "nvidia", numa: "0", group: 10},
		// An L40S on vfio-pci whose audio function the host keeps.
		pciDev{addr: "0000:47:00.0", vendor: "10de", device: "26b9", class: "0302", driver: "vfio-pci", override: "vfio-pci", numa: "1", group: 34, cdev: "vfio0"},
		pciDev{addr: "0000:47:00.1", vendor: "10de", device: "22ba", class: "0403", driver: "snd_hda_intel", numa: "1", group: 34},
		// Unbound, reserved for VFIO by driver_override; no NUMA node.
		pciDev{addr: "0000:57:00.0", vendor: "10de", device: "2330", class: "0302", override: "vfio-pci", numa: "-1", group: 35},
		// Unbound and not reserved: nobody's.
		pciDev{addr: "0000:67:00.0", vendor: "10de", device: "2330", class: "0302", numa: "0", group: 36},
		// A device ID outside the table, in VGA mode, on the Grace variant driver, without an IOMMU group.
		pciDev{addr: "0009:01:00.0", vendor: "10de", device: "2bb1", class: "0300", driver: "nvgrace_gpu_vfio_pci", numa: "0", group: discovery.NoIOMMUGroup},
		// An NVIDIA audio function on vfio-pci is no GPU; an Intel NIC is not NVIDIA's.
		pciDev{addr: "0000:77:00.1", vendor: "10de", device: "22ba", class: "0403", driver: "vfio-pci", numa: "0", group: 37},
		pciDev{addr: "0000:81:00.0", vendor: "8086", device: "1592", class: "0200", driver: "vfio-pci", numa: "1", group: 40},
	)
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "dev/iommu"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	got, err := discovery.ReadSysfs(root)
	if err != nil {
		t.Fatal(err)
	}
	want := &discovery.SysfsGPUs{
		NVIDIA: []string{"0000:07:00.0"},
		VFIO: []discovery.VFIODevice{{
			PCIAddress: "0000:47:00.0", VendorID: "10de", DeviceID: "26b9", Class: "0302",
			Product: "NVIDIA L40S", DeviceName: "AD102GL_L40S", Family: "ada-lovelace",
			Driver: "vfio-pci", DriverOverride: "vfio-pci", IOMMUGroup: 34, NUMANode: 1, CDev: "vfio0", PCIeRoot: "pci0000:00",
			GroupMembers: []discovery.PCIFunction{{Address: "0000:47:00.1", VendorID: "10de", DeviceID: "22ba", Class: "0403", Driver: "snd_hda_intel"}},
		}, {
			PCIAddress: "0000:57:00.0", VendorID: "10de", DeviceID: "2330", Class: "0302",
			Product: "NVIDIA H100 80GB HBM3", DeviceName: "GH100_H100_SXM5_80GB", Family: "hopper",
			DriverOverride: "vfio-pci", IOMMUGroup: 35, NUMANode: discovery.NoNUMANode, PCIeRoot: "pci0000:00",
		}, {
			PCIAddress: "0009:01:00.0", VendorID: "10de", DeviceID: "2bb1", Class: "0300",
			Product: "10de:2bb1", DeviceName: "2bb1", Family: discovery.Unknown,
			Driver: "nvgrace_gpu_vfio_pci", IOMMUGroup: discovery.NoIOMMUGroup, NUMANode: 0, PCIeRoot: "pci0000:00",
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadSysfs:\n got %+v\nwant %+v", got, want)
	}
	d := got.VFIO[0]
	if !d.Bound() || got.VFIO[1].Bound() {
		t.Errorf("Bound: %v, %v; want true, false", d.Bound(), got.VFIO[1].Bound())
	}
	if paths := d.DevicePaths(); !reflect.DeepEqual(paths, []string{"/dev/vfio/vfio", "/dev/vfio/34", "/dev/iommu", "/dev/vfio/devices/vfio0"}) {
		t.Errorf("DevicePaths = %v", paths)
	}
	if paths := got.VFIO[2].DevicePaths(); paths != nil {
		t.Errorf("DevicePaths without an IOMMU group = %v, want none", paths)
	}
	if d.GroupGPUs() != 1 || d.GroupHeld() != 1 {
		t.Errorf("GroupGPUs, GroupHeld = %d, %d; want 1, 1 (the audio function on snd_hda_intel)", d.GroupGPUs(), d.GroupHeld())
	}
}

// TestReadSysfsWithoutIOMMUFD checks that a vfio-dev entry alone (no
// /dev/iommu) gives no cdev: the container cannot use it.
func TestReadSysfsWithoutIOMMUFD(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, pciDev{addr: "0000:47:00.0", vendor: "10de", device: "26b9", class: "0302", driver: "vfio-pci", numa: "0", group: 34, cdev: "vfio0"})
	got, err := discovery.ReadSysfs(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.VFIO) != 1 || got.VFIO[0].CDev != "" {
		t.Errorf("VFIO = %+v, want one device without a cdev", got.VFIO)
	}
}

func TestReadSysfsErrors(t *testing.T) {
	if got, err := discovery.ReadSysfs(t.TempDir()); err != nil || len(got.VFIO)+len(got.NVIDIA) != 0 {
		t.Errorf("a root without sysfs: %+v, %v; want nothing, no error", got, err)
	}
	root := t.TempDir()
	writeTree(t, root, pciDev{addr: "0000:47:00.0", vendor: "10de", device: "26b9", class: "0302", driver: "vfio-pci", numa: "0", group: 34})
	bad := filepath.Join(root, "sys/devices/pci0000:00/0000:47:00.0/device")
	if err := os.WriteFile(bad, []byte("what\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := discovery.ReadSysfs(root)
	if err == nil || !strings.Contains(err.Error(), "0000:47:00.0/device") || !strings.Contains(err.Error(), `"what" is not a PCI ID`) {
		t.Errorf("a malformed device file: %v, want an error naming the file and value", err)
	}
}

func TestCheckVFIOOnly(t *testing.T) {
	nvmlErr := discovery.ErrNoDriver
	vfio := pciDev{addr: "0000:47:00.0", vendor: "10de", device: "26b9", class: "0302", driver: "vfio-pci", numa: "0", group: 34}
	onNVIDIA := pciDev{addr: "0000:07:00.0", vendor: "10de", device: "26b9", class: "0302", driver: "nvidia", numa: "0", group: 10}

	allVFIO := t.TempDir()
	writeTree(t, allVFIO, vfio)
	if err := discovery.CheckVFIOOnly(allVFIO, nvmlErr); err != nil {
		t.Errorf("every GPU on vfio-pci: %v, want nil", err)
	}
	both := t.TempDir()
	writeTree(t, both, vfio, onNVIDIA)
	err := discovery.CheckVFIOOnly(both, nvmlErr)
	if err == nil || !strings.Contains(err.Error(), "0000:07:00.0 are bound to the nvidia driver and need NVML") || !strings.Contains(err.Error(), nvmlErr.Error()) {
		t.Errorf("a GPU on nvidia: %v, want the NVML error naming it", err)
	}
	if err := discovery.CheckVFIOOnly(t.TempDir(), nvmlErr); err != nvmlErr {
		t.Errorf("no GPUs at all: %v, want the NVML error as it is", err)
	}
}

// TestKubeVirtDeviceName checks the names NVIDIA's kubevirt-gpu-device-plugin
// registers for PCI ID database names.
func TestKubeVirtDeviceName(t *testing.T) {
	for in, want := range map[string]string{
		"GH100 [H100 SXM5 80GB]": "GH100_H100_SXM5_80GB", // KubeVirt's and NVIDIA's own example
		"TU104GL [Tesla T4]":     "TU104GL_TESLA_T4",
		"GA100 [A100 PCIe 80GB]": "GA100_A100_PCIE_80GB",
		"GB100 [TS4 / B100]":     "GB100_TS4___B100",
		"GH100 [H100L 94GB]":     "GH100_H100L_94GB",
		"AD102GL [L40S]":         "AD102GL_L40S",
		"  GA100\t[A100X] 2.0  ": "GA100_A100X_2_0",
	} {
		if got := discovery.KubeVirtDeviceName(in); got != want {
			t.Errorf("KubeVirtDeviceName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestFakeNodeSysfsRoundTrip discovers the bundled l40s-vfio node's tree:
// four GPUs on vfio-pci, the first sharing its group with its audio
// function, and the four NVML GPUs on nvidia.
func TestFakeNodeSysfsRoundTrip(t *testing.T) {
	node, err := fakenode.Named("l40s-vfio")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := node.WriteSysfs(root); err != nil {
		t.Fatal(err)
	}
	got, err := discovery.ReadSysfs(root)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.NVIDIA, []string{"0000:07:00.0", "0000:17:00.0", "0000:27:00.0", "0000:37:00.0"}) {
		t.Errorf("NVIDIA = %v", got.NVIDIA)
	}
	var addrs, numa []string
	for _, d := range got.VFIO {
		addrs = append(addrs, d.PCIAddress)
		numa = append(numa, strconv.Itoa(d.NUMANode))
		if d.Product != "NVIDIA L40S" || !d.Bound() {
			t.Errorf("%s: %s, driver %q; want a bound NVIDIA L40S", d.PCIAddress, d.Product, d.Driver)
		}
	}
	if !reflect.DeepEqual(addrs, []string{"0000:47:00.0", "0000:57:00.0", "0000:67:00.0", "0000:77:00.0"}) || !reflect.DeepEqual(numa, []string{"0", "0", "1", "1"}) {
		t.Errorf("VFIO addresses %v, NUMA nodes %v", addrs, numa)
	}
	if m := got.VFIO[0].GroupMembers; len(m) != 1 || m[0].Class != "0403" || m[0].Driver != "vfio-pci" {
		t.Errorf("group members of the first VFIO GPU = %+v, want its audio function on vfio-pci", m)
	}
}

// BenchmarkReadSysfs reads the l40s-vfio tree: what each re-discovery adds
// on a node with GPUs on vfio-pci.
func BenchmarkReadSysfs(b *testing.B) {
	node, err := fakenode.Named("l40s-vfio")
	if err != nil {
		b.Fatal(err)
	}
	root := b.TempDir()
	if err := node.WriteSysfs(root); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := discovery.ReadSysfs(root); err != nil {
			b.Fatal(err)
		}
	}
}
