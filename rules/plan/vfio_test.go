package plan

import (
	"strings"
	"testing"
)

func TestKubeVirtEnvVar(t *testing.T) {
	for in, want := range map[string]string{
		"nvidia.com/GH100_H100_SXM5_80GB": "PCI_RESOURCE_NVIDIA_COM_GH100_H100_SXM5_80GB",
		"nvidia.com/TU104GL_Tesla_T4":     "PCI_RESOURCE_NVIDIA_COM_TU104GL_TESLA_T4",
		"example.com/l40s-vm.v2":          "PCI_RESOURCE_EXAMPLE_COM_L40S-VM_V2",
	} {
		if got := KubeVirtEnvVar(in); got != want {
			t.Errorf("KubeVirtEnvVar(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestValidatePlanVFIO checks that ValidatePlan refuses a plan whose VFIO
// resources are shared, hold other devices, reuse a container resource's
// name, or whose container resources hold VFIO devices.
func TestValidatePlanVFIO(t *testing.T) {
	vfioDev := Device{ID: "0000:47:00.0", Kind: DeviceVFIO, GPUIndex: -1, VFIO: &VFIODevice{PCIAddress: "0000:47:00.0", IOMMUGroup: 34}}
	gpuDev := Device{ID: "GPU-0", Kind: DeviceGPU, GPUUUID: "GPU-0"}
	none := Sharing{Strategy: SharingNone, Replicas: 1}
	good := &Plan{
		Resources: []Resource{{Name: "nvidia.com/gpu", Sharing: none, Devices: []Device{gpuDev}}},
		VFIO:      []Resource{{Name: "nvidia.com/AD102GL_L40S", Sharing: none, Devices: []Device{vfioDev}}},
	}
	if err := ValidatePlan(good); err != nil {
		t.Fatalf("a good plan: %v", err)
	}
	for _, tt := range []struct {
		name string
		edit func(p *Plan)
		want string
	}{
		{"shared", func(p *Plan) { p.VFIO[0].Sharing = Sharing{Strategy: SharingTimeSlicing, Replicas: 2} }, "a GPU passed through to a VM cannot be shared"},
		{"a GPU among VFIO devices", func(p *Plan) { p.VFIO[0].Devices = append(p.VFIO[0].Devices, gpuDev) }, "device GPU-0 is a gpu device without VFIO details"},
		{"one name twice", func(p *Plan) { p.VFIO[0].Name = "nvidia.com/gpu" }, "resource nvidia.com/gpu is both a VFIO resource and a resource for containers"},
		{"a VFIO device for containers", func(p *Plan) { p.Resources[0].Devices = append(p.Resources[0].Devices, vfioDev) }, "VFIO device 0000:47:00.0 belongs in the plan's VFIO resources"},
		{"a bad name", func(p *Plan) { p.VFIO[0].Name = "AD102GL_L40S" }, `vfio resource 0: "AD102GL_L40S" is not an extended resource name`},
	} {
		p := &Plan{
			Resources: []Resource{{Name: "nvidia.com/gpu", Sharing: none, Devices: []Device{gpuDev}}},
			VFIO:      []Resource{{Name: "nvidia.com/AD102GL_L40S", Sharing: none, Devices: []Device{vfioDev}}},
		}
		tt.edit(p)
		if err := ValidatePlan(p); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

// TestCheckServesVFIO checks that a plan serving VFIO devices alone (a node
// whose GPUs are all on vfio-pci) serves something.
func TestCheckServesVFIO(t *testing.T) {
	p := &Plan{
		Decisions: []Decision{{Device: "0000:47:00.0", Kind: DeviceVFIO, Resource: "nvidia.com/AD102GL_L40S"}},
		VFIO:      []Resource{{Name: "nvidia.com/AD102GL_L40S", Devices: []Device{{ID: "0000:47:00.0", Kind: DeviceVFIO}}}},
	}
	if err := p.CheckServes(); err != nil {
		t.Errorf("CheckServes of a VFIO plan: %v", err)
	}
	p.VFIO[0].Devices = nil
	if err := p.CheckServes(); err == nil {
		t.Error("CheckServes of a plan serving nothing: no error")
	}
}
