package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/featureplug/featureplug/test/harness/internal/devicemanagerlink"
)

// KubeletSocketName is the registration socket's name inside the device-plugin
// directory, as on a real node (/var/lib/kubelet/device-plugins/kubelet.sock).
const KubeletSocketName = "kubelet.sock"

// pollInterval is how often the Wait helpers look again.
const pollInterval = 50 * time.Millisecond

// KubeletPeer is the kubelet's own device manager (k8s.io/kubernetes
// pkg/kubelet/cm/devicemanager, the code a real kubelet runs) serving the
// device-plugin registration socket in a directory of the test's choosing.
// Plugins register with it, it consumes their ListAndWatch streams, reports
// capacity the way the kubelet puts it in the Node status, and allocates
// devices to pod containers through the plugins' GetPreferredAllocation,
// Allocate and PreStartContainer calls.
type KubeletPeer struct {
	// Dir is the device-plugin directory: plugins put their sockets here.
	Dir string
	// SocketPath is the registration socket, Dir/kubelet.sock.
	SocketPath string
	// LogPath is the device manager's log file.
	LogPath string

	mgr     *devicemanager.ManagerImpl
	logger  klog.Logger
	logFile *os.File

	allocMu sync.Mutex // serializes allocations, as the kubelet's pod admission does
	podsMu  sync.Mutex // guards pods
	pods    map[types.UID]*v1.Pod
	stop    sync.Once
}

// StartKubeletPeer starts the kubelet's device manager with its registration
// socket at dir/kubelet.sock (dir is created if needed; the manager removes
// stale sockets from it on start, like the kubelet). It needs no root. The
// manager stops when the test ends.
func StartKubeletPeer(t testing.TB, dir string) *KubeletPeer {
	t.Helper()
	logFile, err := createLog(LogDir(t), "kubelet-peer")
	if err != nil {
		t.Fatalf("kubelet device manager: %v", err)
	}
	logPath := logFile.Name()
	p, err := startKubeletPeer(dir, logFile)
	if err != nil {
		t.Fatalf("starting the kubelet device manager in %s: %v", dir, err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("--- last %d lines of kubelet-peer log (%s):\n%s", logTailLines, logPath, fileTail(logPath, logTailLines))
		}
	})
	return p
}

func startKubeletPeer(dir string, logFile *os.File) (*KubeletPeer, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("resolving %q: %w", dir, err)
	}
	// A unix socket path must fit in sun_path (108 bytes with the NUL).
	sock := filepath.Join(dir, KubeletSocketName)
	if len(sock) > 107 {
		logFile.Close()
		return nil, fmt.Errorf("socket path %q is %d bytes, over the 107 a unix socket allows; use a shorter directory", sock, len(sock))
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("creating device-plugin directory: %w", err)
	}
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(logFile), textlogger.Verbosity(4)))
	mgr, err := devicemanagerlink.NewManager(logger, sock, nil, noAffinityStore{})
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("creating device manager: %w", err)
	}
	p := &KubeletPeer{
		Dir:        dir,
		SocketPath: sock,
		LogPath:    logFile.Name(),
		mgr:        mgr,
		logger:     logger,
		logFile:    logFile,
		pods:       make(map[types.UID]*v1.Pod),
	}
	if err := mgr.Start(logger, p.activePods, allSourcesReady{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting device manager: %w", err)
	}
	return p, nil
}

// Stop stops the registration server and disconnects every plugin, as a
// kubelet shutting down does. It is safe to call more than once.
func (p *KubeletPeer) Stop() {
	p.stop.Do(func() {
		if err := p.mgr.Stop(p.logger); err != nil {
			p.logger.Error(err, "Stopping device manager")
		}
		p.logFile.Close()
	})
}

// Capacity returns the resource's capacity (healthy and unhealthy devices)
// and allocatable count (healthy devices), as the kubelet would write them to
// the Node status now. A resource no plugin registered has 0, 0.
func (p *KubeletPeer) Capacity(resourceName string) (capacity, allocatable int64) {
	c, a, _ := p.mgr.GetCapacity(p.logger)
	if q, ok := c[v1.ResourceName(resourceName)]; ok {
		capacity = q.Value()
	}
	if q, ok := a[v1.ResourceName(resourceName)]; ok {
		allocatable = q.Value()
	}
	return capacity, allocatable
}

// Devices returns the healthy devices the resource's plugin advertises, by ID.
func (p *KubeletPeer) Devices(resourceName string) map[string]*pluginapi.Device {
	out := map[string]*pluginapi.Device{}
	for id, d := range p.mgr.GetAllocatableDevices(p.logger)[resourceName] {
		out[id] = d
	}
	return out
}

// WaitRegistered waits until a plugin for the resource has registered and
// advertised at least one device, healthy or not.
func (p *KubeletPeer) WaitRegistered(ctx context.Context, resourceName string) error {
	return poll(ctx, func() (bool, string, error) {
		c, _ := p.Capacity(resourceName)
		return c > 0, fmt.Sprintf("capacity of %s is %d", resourceName, c), nil
	})
}

// WaitCapacity waits until the resource's capacity and allocatable counts are
// exactly the wanted ones.
func (p *KubeletPeer) WaitCapacity(ctx context.Context, resourceName string, capacity, allocatable int64) error {
	return poll(ctx, func() (bool, string, error) {
		c, a := p.Capacity(resourceName)
		return c == capacity && a == allocatable,
			fmt.Sprintf("%s has capacity %d, allocatable %d (want %d, %d)", resourceName, c, a, capacity, allocatable), nil
	})
}

// Allocation is what a container got from device plugins: the device IDs per
// resource and the runtime options the kubelet would pass to the container
// runtime.
type Allocation struct {
	// DeviceIDs maps resource name to the sorted IDs allocated to the container.
	DeviceIDs map[string][]string
	// Envs holds the environment variables to set.
	Envs map[string]string
	// Mounts lists host paths mounted into the container.
	Mounts []Mount
	// Devices lists device nodes made available in the container.
	Devices []DeviceNode
	// Annotations holds the container annotations to set.
	Annotations map[string]string
	// CDIDevices lists fully qualified CDI device names.
	CDIDevices []string
}

// Mount is one mount of an Allocation.
type Mount struct {
	ContainerPath, HostPath string
	ReadOnly                bool
}

// DeviceNode is one device node of an Allocation.
type DeviceNode struct {
	ContainerPath, HostPath, Permissions string
}

// Allocate admits a pod with one container that requests n of the resource,
// and runs the kubelet's allocation for it: device choice (with the plugin's
// GetPreferredAllocation when it offers one), the plugin's Allocate and, when
// the plugin asks for it, PreStartContainer. The pod stays active, holding its
// devices, until RemovePod.
func (p *KubeletPeer) Allocate(ctx context.Context, podName, containerName, resourceName string, n int) (*Allocation, error) {
	q := resource.NewQuantity(int64(n), resource.DecimalSI)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: "default", UID: types.UID("uid-" + podName)},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: containerName,
			Resources: v1.ResourceRequirements{
				Limits:   v1.ResourceList{v1.ResourceName(resourceName): *q},
				Requests: v1.ResourceList{v1.ResourceName(resourceName): *q},
			},
		}}},
	}
	allocs, err := p.AllocatePod(ctx, pod)
	if err != nil {
		return nil, err
	}
	return allocs[containerName], nil
}

// AllocatePod admits pod and allocates devices to each of its init and app
// containers in the kubelet's order, returning each container's Allocation by
// name. The pod stays active, holding its devices, until RemovePod.
func (p *KubeletPeer) AllocatePod(ctx context.Context, pod *v1.Pod) (map[string]*Allocation, error) {
	if pod.UID == "" {
		return nil, fmt.Errorf("pod %s/%s has no UID", pod.Namespace, pod.Name)
	}
	p.allocMu.Lock()
	defer p.allocMu.Unlock()
	ctx = klog.NewContext(ctx, p.logger) // the manager logs through ctx's logger
	p.setPod(pod)
	out := map[string]*Allocation{}
	containers := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for i := range containers {
		c := &containers[i]
		if err := p.mgr.Allocate(ctx, pod, c, lifecycle.AddOperation); err != nil {
			p.deletePod(pod.UID)
			return nil, fmt.Errorf("allocating for pod %s container %s: %w", pod.Name, c.Name, err)
		}
		opts, err := p.mgr.GetDeviceRunContainerOptions(ctx, pod, c)
		if err != nil {
			p.deletePod(pod.UID)
			return nil, fmt.Errorf("getting run options for pod %s container %s: %w", pod.Name, c.Name, err)
		}
		out[c.Name] = newAllocation(p.mgr.GetDevices(string(pod.UID), c.Name), opts)
	}
	return out, nil
}

// RemovePod ends the pod: its devices become free for the next allocation,
// as when the kubelet no longer lists the pod as active.
func (p *KubeletPeer) RemovePod(podName string) {
	p.podsMu.Lock()
	defer p.podsMu.Unlock()
	for uid, pod := range p.pods {
		if pod.Name == podName {
			delete(p.pods, uid)
		}
	}
}

// activePods is the device manager's view of the pods on the node.
func (p *KubeletPeer) activePods() []*v1.Pod {
	p.podsMu.Lock()
	defer p.podsMu.Unlock()
	out := make([]*v1.Pod, 0, len(p.pods))
	for _, pod := range p.pods {
		out = append(out, pod)
	}
	return out
}

func (p *KubeletPeer) setPod(pod *v1.Pod) {
	p.podsMu.Lock()
	defer p.podsMu.Unlock()
	p.pods[pod.UID] = pod
}

func (p *KubeletPeer) deletePod(uid types.UID) {
	p.podsMu.Lock()
	defer p.podsMu.Unlock()
	delete(p.pods, uid)
}

func newAllocation(devs devicemanager.ResourceDeviceInstances, opts *devicemanager.DeviceRunContainerOptions) *Allocation {
	a := &Allocation{DeviceIDs: map[string][]string{}, Envs: map[string]string{}, Annotations: map[string]string{}}
	for res, ids := range devs {
		for id := range ids {
			a.DeviceIDs[res] = append(a.DeviceIDs[res], id)
		}
		sort.Strings(a.DeviceIDs[res])
	}
	if opts == nil {
		return a
	}
	for _, e := range opts.Envs {
		a.Envs[e.Name] = e.Value
	}
	for _, m := range opts.Mounts {
		a.Mounts = append(a.Mounts, Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	for _, d := range opts.Devices {
		a.Devices = append(a.Devices, DeviceNode{ContainerPath: d.PathInContainer, HostPath: d.PathOnHost, Permissions: d.Permissions})
	}
	for _, an := range opts.Annotations {
		a.Annotations[an.Name] = an.Value
	}
	for _, c := range opts.CDIDevices {
		a.CDIDevices = append(a.CDIDevices, c.Name)
	}
	// The device manager builds these from maps: sort for stable results.
	sort.Slice(a.Mounts, func(i, j int) bool { return a.Mounts[i].ContainerPath < a.Mounts[j].ContainerPath })
	sort.Slice(a.Devices, func(i, j int) bool { return a.Devices[i].ContainerPath < a.Devices[j].ContainerPath })
	sort.Strings(a.CDIDevices)
	return a
}

// allSourcesReady tells the device manager that the pod list is complete, so
// it frees the devices of pods that are no longer active.
type allSourcesReady struct{}

func (allSourcesReady) AddSource(string) {}
func (allSourcesReady) AllReady() bool   { return true }

var _ config.SourcesReady = allSourcesReady{}

// noAffinityStore is a topology manager store with no NUMA preference, as
// with the kubelet's default "none" topology policy.
type noAffinityStore struct{}

func (noAffinityStore) GetAffinity(klog.Logger, string, string) topologymanager.TopologyHint {
	return topologymanager.TopologyHint{}
}
func (noAffinityStore) GetPolicy() topologymanager.Policy { return topologymanager.NewNonePolicy() }
func (noAffinityStore) Name() string                      { return "none" }

var _ topologymanager.Store = noAffinityStore{}
