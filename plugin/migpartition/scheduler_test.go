package migpartition_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/discovery/migplace"
	"github.com/featureplug/featureplug/plugin/migpartition"
	"github.com/featureplug/featureplug/rules/plan"
)

const (
	testDriver = "gpu.featureplug.io"
	testNode   = "node-1"
	testClass  = "mig.gpu.featureplug.io"
)

// classes is a DeviceClassLister holding one class for the driver.
type classes struct{}

func (classes) List() ([]*resourceapi.DeviceClass, error) {
	c, _ := classes{}.Get(testClass)
	return []*resourceapi.DeviceClass{c}, nil
}

func (classes) Get(name string) (*resourceapi.DeviceClass, error) {
	if name != testClass {
		return nil, fmt.Errorf("no class %s", name)
	}
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: testClass},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", testDriver)}}}},
	}, nil
}

// scheduler allocates claims one at a time on a layout with the
// scheduler's own allocator (k8s.io/dynamic-resource-allocation's
// structured allocator, partitionable devices on), remembering what it
// allocated as kube-scheduler does.
type scheduler struct {
	t         *testing.T
	slices    []*resourceapi.ResourceSlice
	allocated sets.Set[structured.DeviceID]
	cache     *cel.Cache
	claims    int
}

func newScheduler(t *testing.T, l migpartition.Layout) *scheduler {
	s := &scheduler{t: t, allocated: sets.New[structured.DeviceID](), cache: cel.NewCache(100, cel.Features{})}
	for i, sl := range l.Slices {
		rs := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", testNode, i)},
			Spec: resourceapi.ResourceSliceSpec{
				Driver: testDriver, NodeName: ptr.To(testNode),
				Pool:           resourceapi.ResourcePool{Name: testNode, Generation: 1, ResourceSliceCount: int64(len(l.Slices))},
				SharedCounters: sl.SharedCounters, Devices: sl.Devices,
			},
		}
		s.slices = append(s.slices, rs)
	}
	return s
}

// allocate asks for one device whose resource attribute is resource; it
// returns the device name, or "" when the claim does not fit.
func (s *scheduler) allocate(resource string) string {
	s.t.Helper()
	s.claims++
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%d", s.claims), Namespace: "default", UID: "uid"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: testClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: fmt.Sprintf("device.attributes[%q].resource == %q", testDriver, resource)}}},
			},
		}}}},
	}
	ctx := context.Background()
	alloc, err := structured.NewAllocator(ctx, structured.Features{PartitionableDevices: true}, structured.AllocatedState{AllocatedDevices: s.allocated},
		classes{}, s.slices, s.cache)
	if err != nil {
		s.t.Fatal(err)
	}
	results, err := alloc.Allocate(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		s.t.Fatal(err)
	}
	if len(results) == 0 {
		return ""
	}
	d := results[0].Devices.Results[0]
	s.allocated.Insert(structured.MakeDeviceID(d.Driver, d.Pool, d.Device))
	return d.Device
}

// release frees an allocated device, as deleting its claim does.
func (s *scheduler) release(device string) {
	s.allocated.Delete(structured.MakeDeviceID(testDriver, testNode, device))
}

// decorate gives devices the resource attribute the claims select on.
func decorate(g *plan.DynamicGPU, p *plan.DynamicProfile, _ migplace.Placement, d *resourceapi.Device) {
	res := g.WholeGPU
	if p != nil {
		res = p.Resource
	}
	d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"resource": {StringValue: ptr.To(res)}}
}

// TestSchedulerAllocatesPlacements runs the scheduler's allocator on one
// H100's layout: pods asking for a 3g.40gb, a 2g.20gb and a 1g.10gb get
// placements that do not overlap, which NVML then creates; a claim that
// does not fit is refused until a claim is released; the whole GPU and
// MIG devices exclude each other; a second +me is refused.
func TestSchedulerAllocatesPlacements(t *testing.T) {
	g := dynamicGPU(t, "NVIDIA H100 80GB HBM3", 0, true)
	l := migpartition.Build([]plan.DynamicGPU{g}, migpartition.Options{Decorate: decorate})

	t.Run("three profiles on one GPU", func(t *testing.T) {
		s := newScheduler(t, l)
		var targets []migplace.Target
		for _, res := range []string{"nvidia.com/mig-3g.40gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-1g.10gb"} {
			name := s.allocate(res)
			a, ok := l.Lookup(name)
			if name == "" || !ok {
				t.Fatalf("%s: not allocated (%q)", res, name)
			}
			targets = append(targets, a.Target)
		}
		for i := range targets {
			for j := range i {
				if targets[i].Placement.Overlaps(targets[j].Placement) {
					t.Errorf("%s overlaps %s", targets[i], targets[j])
				}
			}
		}
		// NVML creates exactly those.
		node, err := fakenode.Parse("n.yaml", []byte("name: sched\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n  - product: H100-80GB-HBM3\n    mig: []\n"))
		if err != nil {
			t.Fatal(err)
		}
		dev, _ := node.NVML().DeviceGetHandleByIndex(0)
		for _, tg := range targets {
			info, _ := dev.GetGpuInstanceProfileInfo(tg.ProfileEnum)
			pl := tg.Placement.NVML()
			if _, ret := dev.CreateGpuInstanceWithPlacement(&info, &pl); ret != nvml.SUCCESS {
				t.Errorf("NVML refuses %s: %v", tg, ret)
			}
		}
		t.Logf("placed: %v, %v, %v", targets[0], targets[1], targets[2])
		if name := s.allocate("nvidia.com/gpu"); name != "" {
			t.Errorf("the whole GPU was allocated next to MIG devices: %s", name)
		}
		// 7 compute slices: 3+2+1 leave one, and one memory slice.
		last := s.allocate("nvidia.com/mig-1g.10gb")
		if last == "" {
			t.Fatal("the last 1g.10gb did not fit")
		}
		if name := s.allocate("nvidia.com/mig-1g.10gb"); name != "" {
			t.Errorf("an eighth slice was allocated: %s", name)
		}
		s.release(last)
		if name := s.allocate("nvidia.com/mig-1g.10gb"); name == "" {
			t.Error("a released placement was not allocated again")
		}
	})

	t.Run("pending until released", func(t *testing.T) {
		s := newScheduler(t, l)
		a, b := s.allocate("nvidia.com/mig-3g.40gb"), s.allocate("nvidia.com/mig-3g.40gb")
		if a == "" || b == "" {
			t.Fatalf("two 3g.40gb: %q %q", a, b)
		}
		if name := s.allocate("nvidia.com/mig-2g.20gb"); name != "" {
			t.Fatalf("a 2g.20gb next to two 3g.40gb: %s", name)
		}
		s.release(a)
		if name := s.allocate("nvidia.com/mig-2g.20gb"); name == "" {
			t.Error("the pending 2g.20gb did not fit after a release")
		}
	})

	t.Run("whole GPU first", func(t *testing.T) {
		s := newScheduler(t, l)
		if name := s.allocate("nvidia.com/gpu"); name != migpartition.WholeGPUDeviceName(g.UUID) {
			t.Fatalf("whole GPU: %q", name)
		}
		if name := s.allocate("nvidia.com/mig-1g.10gb"); name != "" {
			t.Errorf("a MIG device on an allocated whole GPU: %s", name)
		}
	})

	t.Run("one +me", func(t *testing.T) {
		s := newScheduler(t, l)
		if s.allocate("nvidia.com/mig-1g.10gb-me") == "" {
			t.Fatal("no +me")
		}
		if name := s.allocate("nvidia.com/mig-1g.10gb-me"); name != "" {
			t.Errorf("a second +me: %s", name)
		}
		if s.allocate("nvidia.com/mig-1g.10gb") == "" {
			t.Error("a 1g.10gb next to the +me")
		}
	})
}
