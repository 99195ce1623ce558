package deviceplugin

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// deviceSet is everything a server derives from one plan.Resource and the
// plan's link matrix, once per Apply: the logical devices it advertises
// (replicas expanded), lookup tables and the pairwise link scores that
// GetPreferredAllocation uses. It never changes after it is built, so gRPC
// handlers read it without locks.
type deviceSet struct {
	resource plan.Resource
	links    discovery.LinkMatrix
	// replicas is the number of logical devices per physical device; 1
	// means IDs are the plain device IDs.
	replicas int
	// physical are the resource's devices in plan order (GPU index, then
	// MIG index).
	physical []plan.Device
	// logical are the advertised devices: physical ones, or their replicas
	// in order <id>::0 .. <id>::<replicas-1>.
	logical []logicalDevice
	// byID maps a logical ID to its position in logical.
	byID map[string]int
	// score[i][j] is the link score between physical devices i and j.
	score [][]int
	// numa[i] is a dense number for the NUMA node of physical device i.
	numa []int
	// numaCount is the number of distinct NUMA values in numa.
	numaCount int
	// vfio is set for GPUs passed through to virtual machines (vfio.go).
	vfio bool
}

// logicalDevice is one device ID advertised to the kubelet.
type logicalDevice struct {
	id string
	// phys is the position of the physical device in deviceSet.physical.
	phys int
	// replica is the replica number, or -1 for an unshared device.
	replica int
}

// validateResource checks the parts of a plan resource the plugin relies on.
func validateResource(i int, r *plan.Resource) error {
	var errs []error
	if err := plan.ValidateResourceName(r.Name); err != nil {
		errs = append(errs, fmt.Errorf("resources[%d].name: %w", i, err))
	}
	for _, e := range r.Sharing.Validate(field.NewPath("sharing")) {
		errs = append(errs, fmt.Errorf("resources[%d] (%s).%w", i, r.Name, e))
	}
	seen := make(map[string]bool, len(r.Devices))
	for j, d := range r.Devices {
		if err := validateDeviceName(d.ID); err != nil {
			errs = append(errs, fmt.Errorf("resources[%d] (%s).devices[%d].id: %w", i, r.Name, j, err))
		}
		if err := validateDeviceName(d.Index); err != nil {
			errs = append(errs, fmt.Errorf("resources[%d] (%s).devices[%d].index: %w", i, r.Name, j, err))
		}
		if d.GPUUUID == "" {
			errs = append(errs, fmt.Errorf("resources[%d] (%s).devices[%d].gpuUUID: empty", i, r.Name, j))
		}
		if seen[d.ID] {
			errs = append(errs, fmt.Errorf("resources[%d] (%s).devices[%d].id: %q appears twice", i, r.Name, j, d.ID))
		}
		seen[d.ID] = true
	}
	return errors.Join(errs...)
}

// newDeviceSet derives the device set of a validated resource.
func newDeviceSet(r plan.Resource, links discovery.LinkMatrix) *deviceSet {
	ds := &deviceSet{
		resource: r,
		links:    links,
		replicas: r.Sharing.DeviceReplicas(),
		physical: r.Devices,
		vfio:     isVFIO(&r),
	}
	n := len(r.Devices)
	ds.logical = make([]logicalDevice, 0, n*ds.replicas)
	for p, d := range r.Devices {
		if ds.replicas == 1 {
			ds.logical = append(ds.logical, logicalDevice{id: d.ID, phys: p, replica: -1})
			continue
		}
		for k := 0; k < ds.replicas; k++ {
			ds.logical = append(ds.logical, logicalDevice{id: d.ID + replicaSeparator + strconv.Itoa(k), phys: p, replica: k})
		}
	}
	ds.byID = make(map[string]int, len(ds.logical))
	for i, l := range ds.logical {
		ds.byID[l.id] = i
	}
	ds.score = make([][]int, n)
	for i := range n {
		ds.score[i] = make([]int, n)
		for j := range n {
			if i != j {
				ds.score[i][j] = links.Score(r.Devices[i].GPUIndex, r.Devices[j].GPUIndex)
			}
		}
	}
	dense := map[int]int{}
	ds.numa = make([]int, n)
	for i, d := range r.Devices {
		v, ok := dense[d.NUMANode]
		if !ok {
			v = len(dense)
			dense[d.NUMANode] = v
		}
		ds.numa[i] = v
	}
	ds.numaCount = len(dense)
	return ds
}

// sameAs reports whether the set was built from an identical resource and
// link matrix, so a new plan can keep the running set.
func (ds *deviceSet) sameAs(r plan.Resource, links discovery.LinkMatrix) bool {
	return equalResource(ds.resource, r) && equalLinks(ds.links, links)
}

// equalResource compares two plan resources field by field.
func equalResource(a, b plan.Resource) bool {
	if a.Name != b.Name || !a.Sharing.Equal(b.Sharing) {
		return false
	}
	return slices.EqualFunc(a.Devices, b.Devices, equalDevice)
}

// equalLinks compares two link matrices.
func equalLinks(a, b discovery.LinkMatrix) bool {
	return slices.EqualFunc(a, b, func(x, y []discovery.Link) bool { return slices.Equal(x, y) })
}

// healthFunc reports whether a physical device is unhealthy now.
type healthFunc func(d *plan.Device) bool

// apiDevices builds the ListAndWatch device list and counts the unhealthy
// logical devices. bad[p] says physical device p is Unhealthy; bad is nil
// when every device is healthy.
func (ds *deviceSet) apiDevices(unhealthy healthFunc) (out []*pluginapi.Device, bad []bool, nbad int) {
	if unhealthy != nil {
		for i := range ds.physical {
			if unhealthy(&ds.physical[i]) {
				if bad == nil {
					bad = make([]bool, len(ds.physical))
				}
				bad[i] = true
			}
		}
	}
	topo := make([]*pluginapi.TopologyInfo, len(ds.physical))
	for i, d := range ds.physical {
		if d.NUMANode != discovery.NoNUMANode && d.NUMANode >= 0 {
			topo[i] = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(d.NUMANode)}}}
		}
	}
	out = make([]*pluginapi.Device, len(ds.logical))
	for i, l := range ds.logical {
		h := pluginapi.Healthy
		if bad != nil && bad[l.phys] {
			h = pluginapi.Unhealthy
			nbad++
		}
		out[i] = &pluginapi.Device{ID: l.id, Health: h, Topology: topo[l.phys]}
	}
	return out, bad, nbad
}

// sameAPIDevices reports whether two ListAndWatch lists are equal, so an
// update that changes nothing the kubelet sees is not pushed.
func sameAPIDevices(a, b []*pluginapi.Device) bool {
	return slices.EqualFunc(a, b, func(x, y *pluginapi.Device) bool {
		if x.ID != y.ID || x.Health != y.Health || (x.Topology == nil) != (y.Topology == nil) {
			return false
		}
		if x.Topology == nil {
			return true
		}
		return slices.EqualFunc(x.Topology.Nodes, y.Topology.Nodes, func(p, q *pluginapi.NUMANode) bool { return p.ID == q.ID })
	})
}
