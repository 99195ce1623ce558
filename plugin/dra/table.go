// Package dra serves a plan's DRA resources through Kubernetes Dynamic
// Resource Allocation as driver gpu.featureplug.io: it publishes the
// node's devices in a ResourceSlice (typed attributes from
// discovery/draattr, memory as capacity, health as taints) and answers the
// kubelet's DRA plugin API, preparing a claim's devices as CDI device IDs
// (admin-access requests' too, counted as no one's), checkpointing
// prepared claims in the state directory and writing their
// status.devices; it streams the devices' health to the kubelet
// (DRAResourceHealth), which shows it in the pods' status. Two agents of a
// DaemonSet update serve side by side on sockets named after their pods
// and share the checkpoint.
//
// A resource is served here only when its plan.Resource.Serve is
// plan.ServeDRA; the device-plugin sink leaves such resources alone, so a
// device is offered through exactly one API. Sink (the ResourceSlice and
// the Table) and NodeSink (the kubelet-facing Node) are the agent's
// outputs over it.
//
// The kubelet side is written here rather than with
// k8s.io/dynamic-resource-allocation/kubeletplugin, for a measured
// reason: kubeletplugin takes client-go's kubernetes.Interface, which
// links the typed client of every API group. Built as the Dockerfile
// builds it (stripped, noclaimexplain), the agent is 34.7 MB, and 62.5 MB
// with kubeletplugin and a clientset linked in, over the 40 MB goal;
// `featureplug version` alone then peaks at 61 MiB resident instead of
// 37.6 MiB. What the library gives (registration, the DRA and health
// services, a checkpoint of prepared claims) is a few hundred lines here.
// The kubelet APIs served, most recent first, as the 1.37 kubelet picks
// them: DRAPlugin v1 and v1beta1 (k8s.io/kubelet/pkg/apis/dra), and
// DRAResourceHealth v1 and v1alpha1 (pkg/apis/dra-health), registered
// through pluginregistration v1; TestServesEveryKubeletDRAVersion fails
// when the linked k8s.io/kubelet gains a version not served.
package dra

import (
	"github.com/featureplug/featureplug/rules/plan"
)

// DriverName is the DRA driver featureplug publishes devices as.
const DriverName = "gpu.featureplug.io"

// Device is one device the DRA sink publishes, and what preparing it
// gives a container.
type Device struct {
	// Name is the device's name in the ResourceSlice (a DNS label,
	// stable across restarts: see draattr.DeviceName).
	Name string
	// Resource is the resource name the rules gave the device.
	Resource string
	// Sharing is the sharing of that resource.
	Sharing plan.Sharing
	// Device is the plan's device.
	Device plan.Device
	// CDIDevices are the fully qualified CDI device names
	// ("vendor/class=name") the container runtime resolves to the
	// device's edits.
	CDIDevices []string
	// PCIBusID and Product are the physical GPU's PCI address and product
	// name (a MIG device's parent's), for the claims' status.devices.
	PCIBusID, Product string
	// Unhealthy is why the device is held unhealthy, the value of its
	// TaintUnhealthy taint ("xid-79"); "" while it is healthy. The
	// kubelet learns it through DRAResourceHealth (health.go).
	Unhealthy string
}

// Table is the set of devices the DRA sink currently publishes, by
// name. A Table never changes once made: the sink swaps in a new one
// for each plan, and the kubelet-side server reads the latest.
type Table struct {
	byName map[string]Device
}

// NewTable returns a table of devs.
func NewTable(devs []Device) *Table {
	t := &Table{byName: make(map[string]Device, len(devs))}
	for _, d := range devs {
		t.byName[d.Name] = d
	}
	return t
}

// Lookup returns the device with the given ResourceSlice name.
func (t *Table) Lookup(name string) (Device, bool) {
	if t == nil {
		return Device{}, false
	}
	d, ok := t.byName[name]
	return d, ok
}

// Len returns how many devices the table holds.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.byName)
}
