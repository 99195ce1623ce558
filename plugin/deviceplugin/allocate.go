package deviceplugin

import (
	"crypto/rand"
	"fmt"
	"path"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/featureplug/featureplug/rules/plan"
)

// Names the container runtime and CUDA read.
const (
	// EnvVisibleDevices lists the devices for the NVIDIA container runtime.
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// VolumeMountRoot is where the volume-mounts strategy lists devices.
	VolumeMountRoot = "/var/run/nvidia-container-devices"
	// volumeMountHostPath is the host side of every device-list mount.
	volumeMountHostPath = "/dev/null"
	// EnvMPSPipeDirectory points MPS clients at the control daemon.
	EnvMPSPipeDirectory = plan.EnvMPSPipeDirectory
	// EnvMPSActiveThreadPercentage limits a client's share of the SMs.
	EnvMPSActiveThreadPercentage = plan.EnvMPSActiveThreadPercentage
	// EnvMPSPinnedDeviceMemLimit limits a client's device memory.
	EnvMPSPinnedDeviceMemLimit = plan.EnvMPSPinnedDeviceMemLimit
	// cdiAnnotationPlugin is the plugin part of CDI annotation keys.
	cdiAnnotationPlugin = "featureplug"
)

// allocation is the physical side of one container request.
type allocation struct {
	// phys are the positions of the physical devices, in plan order.
	phys []int
	// count[i] is the number of logical devices (replicas) taken on
	// phys[i].
	count []int
}

// resolve maps a container request's device IDs to physical devices.
// Unknown and repeated IDs are InvalidArgument, as are requests that break
// failRequestsGreaterThanOne; a device that is Unhealthy now (bad[phys],
// bad may be nil) is FailedPrecondition. Errors name at most a handful of
// IDs.
func (ds *deviceSet) resolve(ids []string, bad []bool) (allocation, error) {
	name := ds.resource.Name
	if len(ids) == 0 {
		return allocation{}, status.Errorf(codes.InvalidArgument, "resource %s: container request names no devices", name)
	}
	if len(ids) > len(ds.logical) {
		// More IDs than the resource has: some are unknown or repeated.
		return allocation{}, status.Errorf(codes.InvalidArgument, "resource %s: container request names %d device IDs, more than the %d the resource has", name, len(ids), len(ds.logical))
	}
	var unknown, dups, sick idSample
	// Small requests on small sets (the common case) keep their
	// bookkeeping on the stack: Allocate is on the pod start path.
	var physBuf, seenBuf [16]int
	var perPhys []int
	if n := len(ds.physical); n <= len(physBuf) {
		perPhys = physBuf[:n]
	} else {
		perPhys = make([]int, n)
	}
	seenList := seenBuf[:0]
	var seenMap map[int]struct{}
	if len(ids) > len(seenBuf) {
		seenMap = make(map[int]struct{}, len(ids))
	}
	nseen := 0
	for _, id := range ids {
		i, ok := ds.byID[id]
		if !ok {
			unknown.add(id)
			continue
		}
		again := false
		if seenMap != nil {
			_, again = seenMap[i]
			seenMap[i] = struct{}{}
		} else {
			again = slices.Contains(seenList, i)
			seenList = append(seenList, i)
		}
		if again {
			dups.add(id)
			continue
		}
		nseen++
		p := ds.logical[i].phys
		if bad != nil && bad[p] {
			sick.add(id)
		}
		perPhys[p]++
	}
	switch {
	case unknown.n > 0:
		return allocation{}, status.Errorf(codes.InvalidArgument, "resource %s: %s", name, unknown.describe("unknown"))
	case dups.n > 0:
		return allocation{}, status.Errorf(codes.InvalidArgument, "resource %s: %s (each device may be named once per container)", name, dups.describe("repeated"))
	case sick.n > 0:
		return allocation{}, status.Errorf(codes.FailedPrecondition, "resource %s: %s (the device failed a health check and is advertised Unhealthy)", name, sick.describe("unhealthy"))
	}
	if ds.replicas > 1 && ds.resource.Sharing.OneReplicaPerContainer() && nseen > 1 {
		return allocation{}, status.Errorf(codes.InvalidArgument,
			"resource %s: request for %d shared devices (%s), but the resource allows one per container (failRequestsGreaterThanOne)", name, nseen, idList("requested", ids, len(ids)))
	}
	var a allocation
	for p, n := range perPhys {
		if n > 0 {
			a.phys = append(a.phys, p)
			a.count = append(a.count, n)
		}
	}
	return a, nil
}

// containerResponse builds the Allocate answer for one container, with
// every device taken as healthy.
func (ds *deviceSet) containerResponse(ids []string, o *Options) (*pluginapi.ContainerAllocateResponse, error) {
	return ds.allocate(ids, o, nil)
}

// allocate builds the Allocate answer for one container; bad[p] (bad may
// be nil) says physical device p is Unhealthy now, and a request naming
// one is refused.
func (ds *deviceSet) allocate(ids []string, o *Options, bad []bool) (*pluginapi.ContainerAllocateResponse, error) {
	a, err := ds.resolve(ids, bad)
	if err != nil {
		return nil, err
	}
	if ds.vfio {
		return ds.vfioResponse(a), nil
	}
	names := make([]string, len(a.phys))
	for i, p := range a.phys {
		d := &ds.physical[p]
		if o.DeviceIDStrategy == DeviceIDIndex {
			names[i] = d.Index
		} else {
			names[i] = d.ID
		}
	}
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
	if o.has(DeviceListEnvVar) {
		resp.Envs[EnvVisibleDevices] = strings.Join(names, ",")
	}
	if o.has(DeviceListVolumeMounts) {
		resp.Envs[EnvVisibleDevices] = VolumeMountRoot
		for _, n := range names {
			resp.Mounts = append(resp.Mounts, &pluginapi.Mount{
				ContainerPath: path.Join(VolumeMountRoot, n),
				HostPath:      volumeMountHostPath,
				ReadOnly:      true,
			})
		}
	}
	if o.has(DeviceListCDIAnnotations) || o.has(DeviceListCDICRI) {
		if err := addCDI(resp, names, o); err != nil {
			return nil, status.Errorf(codes.Internal, "resource %s: %v", ds.resource.Name, err)
		}
	}
	if spec, _ := ds.resource.Sharing.Spec(); spec.Container != nil {
		ds.addEdits(resp, spec.Container(ds.sharedAllocation(a, o)))
	}
	return resp, nil
}

// addCDI adds the CDI devices as annotations and/or CRI CDI devices.
func addCDI(resp *pluginapi.ContainerAllocateResponse, names []string, o *Options) error {
	vendor, class, _ := strings.Cut(o.CDIKind, "/")
	devices := make([]string, len(names))
	for i, n := range names {
		devices[i] = parser.QualifiedName(vendor, class, n)
	}
	if o.has(DeviceListCDIAnnotations) {
		// Keys must be unique among all annotations of a container, which
		// may hold several resources: a random response ID makes them so.
		ann, err := cdiapi.UpdateAnnotations(map[string]string{}, cdiAnnotationPlugin, rand.Text(), devices)
		if err != nil {
			return fmt.Errorf("CDI annotations for %q: %w", devices, err)
		}
		resp.Annotations = make(map[string]string, len(ann))
		for k, v := range ann {
			resp.Annotations[o.CDIAnnotationPrefix+strings.TrimPrefix(k, cdiapi.AnnotationPrefix)] = v
		}
	}
	if o.has(DeviceListCDICRI) {
		for _, d := range devices {
			resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: d})
		}
	}
	return nil
}

// sharedAllocation describes a container's allocation to its sharing
// strategy's container edits (plan.StrategySpec.Container): the physical
// devices in index order, which are the container's CUDA ordinals as it
// sees only those, and the MPS layout of Options.
func (ds *deviceSet) sharedAllocation(a allocation, o *Options) plan.Allocation {
	devs := make([]plan.AllocatedDevice, len(a.phys))
	for i, p := range a.phys {
		devs[i] = plan.AllocatedDevice{MemoryMiB: ds.physical[p].MemoryMiB, Replicas: a.count[i]}
	}
	return plan.Allocation{Resource: ds.resource.Name, Sharing: ds.resource.Sharing, Devices: devs, MPS: o.MPSLayout()}
}

// addEdits copies a strategy's container edits into the response.
func (ds *deviceSet) addEdits(resp *pluginapi.ContainerAllocateResponse, e plan.ContainerEdits) {
	for k, v := range e.Env {
		resp.Envs[k] = v
	}
	for _, m := range e.Mounts {
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
}
