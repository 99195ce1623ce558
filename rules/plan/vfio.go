package plan

import (
	"fmt"
	"strings"
)

// VFIODevice is what serving one GPU passed through to a virtual machine
// needs, read by discovery from sysfs once per discovery, so that Allocate
// and health checks read no sysfs.
type VFIODevice struct {
	// PCIAddress is the GPU's PCI address ("0000:c1:00.0"): what
	// KubeVirt's PCI_RESOURCE_<NAME> variable lists (KubeVirtEnvVar).
	PCIAddress string `json:"pciAddress"`
	// IOMMUGroup is the GPU's IOMMU group: the unit VFIO hands to one VM.
	IOMMUGroup int `json:"iommuGroup"`
	// DevicePaths are the device nodes the VM's container needs, as host
	// paths: /dev/vfio/vfio and /dev/vfio/<group>, and /dev/iommu with
	// /dev/vfio/devices/vfioN when the kernel offers iommufd.
	DevicePaths []string `json:"devicePaths"`
	// GroupDevices is the number of devices in the IOMMU group, the GPU
	// included. The VM holds the others (the GPU's audio function) with
	// the GPU, through the same /dev/vfio/<group>, but the environment
	// lists the GPU alone: KubeVirt assigns each listed address to a
	// requested device.
	GroupDevices int `json:"groupDevices"`
	// Driver is the driver the GPU is bound to ("vfio-pci"); "" while it
	// is unbound, when serving must report it Unhealthy.
	Driver string `json:"driver,omitempty"`
	// VendorID and DeviceID are the PCI IDs ("10de", "26b9"), what
	// KubeVirt's pciVendorSelector matches.
	VendorID string `json:"vendorID"`
	DeviceID string `json:"deviceID"`
}

// KubeVirtEnvVarPrefix starts the environment variable through which a
// device plugin hands KubeVirt the PCI addresses of a resource's allocated
// devices.
const KubeVirtEnvVarPrefix = "PCI_RESOURCE_"

// KubeVirtEnvVar returns the variable KubeVirt reads the PCI addresses
// (comma-separated) of a resource's devices from: PCI_RESOURCE_ and the
// resource name upper-cased with '/' and '.' as '_', as KubeVirt's
// ResourceNameToEnvVar writes it. nvidia.com/GH100_H100_SXM5_80GB gives
// PCI_RESOURCE_NVIDIA_COM_GH100_H100_SXM5_80GB.
func KubeVirtEnvVar(resource string) string {
	return KubeVirtEnvVarPrefix + strings.NewReplacer("/", "_", ".", "_").Replace(strings.ToUpper(resource))
}

// VFIOResource returns the VFIO resource with the given name.
func (p *Plan) VFIOResource(name string) (*Resource, bool) {
	for i := range p.VFIO {
		if p.VFIO[i].Name == name {
			return &p.VFIO[i], true
		}
	}
	return nil, false
}

// validateVFIO checks what ValidatePlan checks of the VFIO resources, and
// that they hold VFIO devices only, unshared, under names Resources does
// not use.
func validateVFIO(p *Plan) []error {
	var errs []error
	names := make(map[string]bool, len(p.Resources))
	for _, r := range p.Resources {
		names[r.Name] = true
	}
	for i := range p.VFIO {
		r := &p.VFIO[i]
		if err := ValidateResourceName(r.Name); err != nil {
			errs = append(errs, fmt.Errorf("vfio resource %d: %w", i, err))
		}
		if names[r.Name] {
			errs = append(errs, fmt.Errorf("resource %s is both a VFIO resource and a resource for containers", r.Name))
		}
		if r.Sharing.DeviceReplicas() > 1 {
			errs = append(errs, fmt.Errorf("vfio resource %s: sharing %s: a GPU passed through to a VM cannot be shared", r.Name, r.Sharing.String()))
		}
		for _, d := range r.Devices {
			if d.Kind != DeviceVFIO || d.VFIO == nil {
				errs = append(errs, fmt.Errorf("vfio resource %s: device %s is a %s device without VFIO details", r.Name, d.ID, d.Kind))
			}
		}
		if err := CheckResourceCaps(r); err != nil {
			errs = append(errs, err)
		}
	}
	for _, r := range p.Resources {
		for _, d := range r.Devices {
			if d.Kind == DeviceVFIO {
				errs = append(errs, fmt.Errorf("resource %s: VFIO device %s belongs in the plan's VFIO resources", r.Name, d.ID))
			}
		}
	}
	return errs
}
