package rules

import (
	"reflect"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// testVFIO returns a VFIO device: an L40S on vfio-pci alone in its group.
func testVFIO(addr string, group, numa int) discovery.VFIODevice {
	return discovery.VFIODevice{
		PCIAddress: addr, VendorID: "10de", DeviceID: "26b9", Class: "0302",
		Product: "NVIDIA L40S", DeviceName: "AD102GL_L40S", Family: "ada-lovelace",
		Driver: "vfio-pci", DriverOverride: "vfio-pci", IOMMUGroup: group, NUMANode: numa,
	}
}

// audio is the HD audio function of a card, bound to driver.
func audio(addr, driver string) discovery.PCIFunction {
	return discovery.PCIFunction{Address: addr, VendorID: "10de", DeviceID: "22ba", Class: "0403", Driver: driver}
}

const vfioRules = `- name: containers
  devices: gpu
  resource: nvidia.com/gpu
- name: vms
  devices: vfio
  resource: 'nvidia.com/{{ .device_name }}'
`

// TestPlanVFIO checks that VFIO devices become Plan.VFIO resources with
// what serving needs, apart from the resources for containers.
func TestPlanVFIO(t *testing.T) {
	rs := mustParse(t, vfioRules)
	withAudio := testVFIO("0000:47:00.0", 34, 0)
	withAudio.GroupMembers = []discovery.PCIFunction{audio("0000:47:00.1", "vfio-pci")}
	unbound := testVFIO("0000:57:00.0", 35, 1)
	unbound.Driver = ""
	withCDev := testVFIO("0000:0a:00.0", 36, 0)
	withCDev.CDev = "vfio2"
	inv := &discovery.Inventory{
		DriverVersion: "570.86.15", CUDADriverVersion: "12.8", NVMLVersion: "12.570.86.15",
		GPUs: []discovery.GPU{testGPU(0, "NVIDIA H100 80GB HBM3")},
		VFIO: []discovery.VFIODevice{withCDev, withAudio, unbound},
	}
	p, err := rs.Plan(inv, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := plan.ValidatePlan(p); err != nil {
		t.Errorf("ValidatePlan: %v", err)
	}
	if len(p.Resources) != 1 || p.Resources[0].Name != "nvidia.com/gpu" {
		t.Fatalf("Resources = %+v, want nvidia.com/gpu alone", p.Resources)
	}
	want := []plan.Resource{{Name: "nvidia.com/AD102GL_L40S", Sharing: plan.Sharing{Strategy: plan.SharingNone, Replicas: 1}, Devices: []plan.Device{
		{ID: "0000:0a:00.0", Kind: plan.DeviceVFIO, GPUUUID: "0000:0a:00.0", GPUIndex: -1, NUMANode: 0, Rule: "vms", VFIO: &plan.VFIODevice{
			PCIAddress: "0000:0a:00.0", IOMMUGroup: 36, GroupDevices: 1, Driver: "vfio-pci", VendorID: "10de", DeviceID: "26b9",
			DevicePaths: []string{"/dev/vfio/vfio", "/dev/vfio/36", "/dev/iommu", "/dev/vfio/devices/vfio2"}}},
		{ID: "0000:47:00.0", Kind: plan.DeviceVFIO, GPUUUID: "0000:47:00.0", GPUIndex: -1, NUMANode: 0, Rule: "vms", VFIO: &plan.VFIODevice{
			PCIAddress: "0000:47:00.0", IOMMUGroup: 34, GroupDevices: 2, Driver: "vfio-pci", VendorID: "10de", DeviceID: "26b9",
			DevicePaths: []string{"/dev/vfio/vfio", "/dev/vfio/34"}}},
		{ID: "0000:57:00.0", Kind: plan.DeviceVFIO, GPUUUID: "0000:57:00.0", GPUIndex: -1, NUMANode: 1, Rule: "vms", VFIO: &plan.VFIODevice{
			PCIAddress: "0000:57:00.0", IOMMUGroup: 35, GroupDevices: 1, Driver: "", VendorID: "10de", DeviceID: "26b9",
			DevicePaths: []string{"/dev/vfio/vfio", "/dev/vfio/35"}}},
	}}}
	if sharing := p.VFIO[0].Sharing; !sharing.Same(want[0].Sharing) {
		t.Errorf("VFIO sharing = %v, want none", sharing)
	}
	p.VFIO[0].Sharing = want[0].Sharing
	if !reflect.DeepEqual(p.VFIO, want) {
		t.Errorf("VFIO:\n got %+v\nwant %+v", p.VFIO, want)
	}
	d := p.Decisions[len(p.Decisions)-1]
	if d.Kind != plan.DeviceVFIO || d.Device != "0000:57:00.0" || d.Resource != "nvidia.com/AD102GL_L40S" || d.Description != "VFIO NVIDIA L40S" ||
		d.Sharing == nil || len(d.Skipped) != 1 || d.Skipped[0].Reason != "devices: gpu (device is a vfio device)" {
		t.Errorf("last decision = %+v", d)
	}
	if got := plan.KubeVirtEnvVar(p.VFIO[0].Name); got != "PCI_RESOURCE_NVIDIA_COM_AD102GL_L40S" {
		t.Errorf("KubeVirtEnvVar = %q", got)
	}
}

// TestVFIOGroups checks the IOMMU group decision: a group whose other
// devices let VFIO open it is passed through as one device; one holding a
// device the host keeps, another GPU, or no group at all is refused with
// the reason.
func TestVFIOGroups(t *testing.T) {
	bridge := discovery.PCIFunction{Address: "0000:40:01.0", VendorID: "8086", DeviceID: "352a", Class: "0604", Driver: "pcieport"}
	for _, tt := range []struct {
		name    string
		members []discovery.PCIFunction
		group   int
		problem string // "" when advertised
	}{
		{"alone", nil, 34, ""},
		{"audio on vfio-pci", []discovery.PCIFunction{audio("0000:47:00.1", "vfio-pci")}, 34, ""},
		{"audio without driver, bridge on pcieport", []discovery.PCIFunction{audio("0000:47:00.1", ""), bridge}, 34, ""},
		{"audio on pci-stub", []discovery.PCIFunction{audio("0000:47:00.1", "pci-stub")}, 34, ""},
		{"audio kept by the host", []discovery.PCIFunction{audio("0000:47:00.1", "snd_hda_intel")}, 34,
			"IOMMU group 34 cannot be passed through: 1 other device is bound to a host driver; bind every device of the group to vfio-pci, or leave it without a driver (featureplug discover lists its devices and their drivers, as does /sys/kernel/iommu_groups/34/devices)"},
		{"a NIC on its driver and the audio", []discovery.PCIFunction{audio("0000:47:00.1", "snd_hda_intel"),
			{Address: "0000:48:00.0", VendorID: "15b3", DeviceID: "1021", Class: "0200", Driver: "mlx5_core"}}, 34,
			"IOMMU group 34 cannot be passed through: 2 other devices are bound to a host driver"},
		{"another GPU", []discovery.PCIFunction{{Address: "0000:48:00.0", VendorID: "10de", DeviceID: "26b9", Class: "0302", Driver: "vfio-pci"}}, 34,
			"IOMMU group 34 holds 2 GPUs: VFIO gives a whole group to one VM, so they cannot go to different VMs and none is advertised; split the group (ACS on the PCIe switch or root port)"},
		{"no IOMMU", nil, discovery.NoIOMMUGroup,
			"in no IOMMU group: the host runs without an IOMMU; enable it (intel_iommu=on or amd_iommu=on"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := testVFIO("0000:47:00.0", tt.group, 0)
			d.GroupMembers = tt.members
			inv := &discovery.Inventory{VFIO: []discovery.VFIODevice{d}}
			p, err := mustParse(t, vfioRules).Plan(inv, nil)
			if err != nil {
				t.Fatal(err)
			}
			dec := p.Decisions[0]
			if tt.problem == "" {
				if dec.Problem != "" || len(p.VFIO) != 1 || len(p.Problems) != 0 {
					t.Errorf("not advertised: problem %q, VFIO %+v", dec.Problem, p.VFIO)
				}
				return
			}
			if !strings.Contains(dec.Problem, `r.yaml:7: rules[1] "vms": VFIO NVIDIA L40S (0000:47:00.0): `+tt.problem) || dec.Resource != "" || dec.Rule != "vms" {
				t.Errorf("decision %+v, want problem %q", dec, tt.problem)
			}
			if len(p.VFIO) != 0 || len(p.Problems) != 1 || p.Problems[0].Message != dec.Problem || p.Problems[0].Resource != "nvidia.com/AD102GL_L40S" {
				t.Errorf("VFIO %+v, problems %+v; want the device left out as a problem", p.VFIO, p.Problems)
			}
		})
	}
}

// TestVFIOCannotBeShared checks that sharing on a devices: vfio rule is a
// load error naming the rule and field.
func TestVFIOCannotBeShared(t *testing.T) {
	for _, sharing := range []string{"{strategy: time-slicing, replicas: 2}", "{strategy: mps, replicas: 2}"} {
		_, err := Parse("r.yaml", []byte(header+"- name: vm\n  devices: vfio\n  resource: example.com/vm\n  sharing: "+sharing+"\n"))
		want := `r.yaml:7: rules[0] "vm": sharing.strategy: devices: vfio cannot be shared: a GPU passed through to a virtual machine belongs to that VM alone; remove sharing`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("sharing %s: %v, want %q", sharing, err, want)
		}
	}
	if _, err := Parse("r.yaml", []byte(header+"- name: vm\n  devices: vfio\n  resource: example.com/vm\n  sharing: {strategy: none}\n")); err != nil {
		t.Errorf("sharing none: %v", err)
	}
}

// TestVFIOServe checks that a devices: vfio rule takes serve: dra and
// serve: device-plugin, and that the rule's choice reaches the plan.
func TestVFIOServe(t *testing.T) {
	for _, serve := range []plan.Serve{plan.ServeDRA, plan.ServeDevicePlugin} {
		rs, err := Parse("r.yaml", []byte(header+"- name: vm\n  devices: vfio\n  resource: example.com/vm\n  serve: "+string(serve)+"\n"))
		if err != nil {
			t.Fatalf("serve: %s: %v", serve, err)
		}
		if got := rs.Views()[0].Serve; got != serve {
			t.Errorf("serve: %s: the rule serves %q", serve, got)
		}
	}
}

// TestVFIOAndContainersShareNoName checks that one resource name cannot
// serve both containers and VMs: a load error for literal names, a plan
// error for a template.
func TestVFIOAndContainersShareNoName(t *testing.T) {
	_, err := Parse("r.yaml", []byte(header+"- name: c\n  devices: gpu\n  resource: example.com/gpu\n- name: vm\n  devices: vfio\n  resource: example.com/gpu\n"))
	want := `r.yaml:9: rules[1] "vm": resource: resource "example.com/gpu" is also given by rules[0] "c" to whole GPUs; a resource serves containers or virtual machines, not both`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("literal names: %v, want %q", err, want)
	}
	rs := mustParse(t, "- name: c\n  devices: gpu\n  resource: example.com/l40s\n- name: vm\n  devices: vfio\n  resource: 'example.com/{{ .family | trimPrefix \"ada-lovelace\" }}l40s'\n")
	inv := &discovery.Inventory{GPUs: []discovery.GPU{testGPU(0, "NVIDIA H100 80GB HBM3")}, VFIO: []discovery.VFIODevice{testVFIO("0000:47:00.0", 34, 0)}}
	_, err = rs.Plan(inv, nil)
	if err == nil || !strings.Contains(err.Error(), `rules[1] "vm": resource: resource "example.com/l40s" of VFIO NVIDIA L40S is also given by rules[0] "c" to whole GPUs`) {
		t.Errorf("template: %v, want a plan error naming both rules", err)
	}
}

// TestVFIOFeatureWarnings checks the warnings for terms a rule's devices
// never see, and that a devices: vfio rule matches on nvidia.vfio.
func TestVFIOFeatureWarnings(t *testing.T) {
	rs, err := Parse("r.yaml", []byte(header+`- name: vm-gpu-feature
  devices: vfio
  matchFeatures:
  - feature: nvidia.gpu
    matchExpressions:
      product: {op: In, value: ["NVIDIA L40S"]}
  resource: example.com/never
- name: container-vfio-feature
  devices: gpu
  matchFeatures:
  - feature: nvidia.vfio
    matchExpressions:
      iommu.group: {op: Gt, value: ["0"]}
  resource: example.com/never-either
- name: vm-l40s
  devices: vfio
  matchFeatures:
  - feature: nvidia.vfio
    matchExpressions:
      product: {op: In, value: ["NVIDIA L40S"]}
      iommu.group.devices: {op: Lt, value: ["2"]}
  resource: example.com/l40s-vm
`))
	if err != nil {
		t.Fatal(err)
	}
	warnings := strings.Join(rs.Warnings(), "\n")
	for _, want := range []string{
		`rules[0] "vm-gpu-feature": matchFeatures[0].feature: a devices: vfio rule sees no nvidia.gpu instance (NVML does not see GPUs bound to vfio-pci), so the term never matches; match nvidia.vfio (have "nvidia.gpu")`,
		`rules[1] "container-vfio-feature": matchFeatures[0].feature: a devices: gpu rule sees no nvidia.vfio instance, so the term never matches (have "nvidia.vfio")`,
	} {
		if !strings.Contains(warnings, want) {
			t.Errorf("warnings lack %q:\n%s", want, warnings)
		}
	}
	if strings.Contains(warnings, "vm-l40s") {
		t.Errorf("a good devices: vfio rule warned:\n%s", warnings)
	}
	alone, withAudio := testVFIO("0000:47:00.0", 34, 0), testVFIO("0000:57:00.0", 35, 0)
	withAudio.GroupMembers = []discovery.PCIFunction{audio("0000:57:00.1", "vfio-pci")}
	p, err := rs.Plan(&discovery.Inventory{VFIO: []discovery.VFIODevice{alone, withAudio}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.VFIO) != 1 || len(p.VFIO[0].Devices) != 1 || p.VFIO[0].Devices[0].ID != alone.PCIAddress {
		t.Errorf("VFIO = %+v, want example.com/l40s-vm with the card alone in its group", p.VFIO)
	}
	if got := p.Decisions[1].Skipped; len(got) != 3 || got[2].Reason != `nvidia.vfio.iommu.group.devices: Lt 2 did not match "2"` {
		t.Errorf("skipped of the card with audio = %+v", got)
	}
}

// TestExplainVFIO checks the explanation of VFIO devices: their group and
// device nodes, a refused one's problem, the kinds of rules skipped, and
// the VFIO resource table with KubeVirt's pciVendorSelector.
func TestExplainVFIO(t *testing.T) {
	rs, err := Load("none")
	if err != nil {
		t.Fatal(err)
	}
	held := testVFIO("0000:57:00.0", 35, 1)
	held.GroupMembers = []discovery.PCIFunction{audio("0000:57:00.1", "snd_hda_intel")}
	withAudio := testVFIO("0000:47:00.0", 34, 0)
	withAudio.GroupMembers = []discovery.PCIFunction{audio("0000:47:00.1", "vfio-pci")}
	inv := &discovery.Inventory{
		DriverVersion: "570.86.15", CUDADriverVersion: "12.8", NVMLVersion: "12.570.86.15",
		GPUs: []discovery.GPU{withMIG(testGPU(0, "NVIDIA A100-SXM4-40GB"), "3g.20gb")},
		VFIO: []discovery.VFIODevice{withAudio, held},
	}
	p, err := rs.Plan(inv, nil)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteExplanation(&b, p); err != nil {
		t.Fatal(err)
	}
	want := `GPU 0 NVIDIA A100-SXM4-40GB  GPU-00000000-0000-0000-0000-000000000000
  resource  none: MIG is enabled, so only its MIG devices can be claimed

GPU 0 MIG 0 (3g.20gb)  MIG-00000000-0000-0000-0000-000000000000
  resource  none: no rule matched
  (2 rules for devices: gpu, vfio skipped)

VFIO NVIDIA L40S  0000:47:00.0
  resource  nvidia.com/AD102GL_L40S
  rule      vfio
  sharing   none
  vfio      IOMMU group 34 (2 devices, passed through together), NUMA 0, vfio-pci
  devices   /dev/vfio/vfio /dev/vfio/34
  (1 rule for devices: gpu skipped)

VFIO NVIDIA L40S  0000:57:00.0
  resource  none: left out
  rule      vfio
  problem   builtin:none:14: rules[1] "vfio": VFIO NVIDIA L40S (0000:57:00.0): IOMMU group 35 cannot be passed through: 1 other device is bound to a host driver; bind every device of the group to vfio-pci, or leave it without a driver (featureplug discover lists its devices and their drivers, as does /sys/kernel/iommu_groups/35/devices)
  (1 rule for devices: gpu skipped)

1 device left out (problem above); the rest is served

no resources for containers
VFIO RESOURCE            DEVICES       PCIVENDORSELECTOR
nvidia.com/AD102GL_L40S  0000:47:00.0  10DE:26B9
`
	if got := b.String(); got != want {
		t.Errorf("explanation:\n%s\nwant:\n%s", got, want)
	}
	if err := plan.ValidatePlan(p); err != nil {
		t.Errorf("ValidatePlan: %v", err)
	}
}
