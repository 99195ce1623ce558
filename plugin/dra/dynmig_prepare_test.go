package dra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/discovery/migctl"
	"github.com/featureplug/featureplug/discovery/migplace"
	"github.com/featureplug/featureplug/plugin/cdi"
	"github.com/featureplug/featureplug/plugin/migpartition"
	"github.com/featureplug/featureplug/rules/plan"
)

// dynNode is a Node over a fake H100 partitioned on demand, with CDI specs
// from its fake driver root.
type dynNode struct {
	node   *Node
	svc    *draService
	lib    nvml.Interface
	gpu    string
	claims *nodeClaims
	cdiDir string
	table  *Table
	// opts made node, for more Nodes over the same GPU.
	opts NodeOptions
}

func newDynNode(tb testing.TB, lib nvml.Interface) *dynNode {
	tb.Helper()
	fake, err := fakenode.Parse("h100.yaml", []byte("name: h100\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n- product: H100-80GB-HBM3\n"))
	if err != nil {
		tb.Fatal(err)
	}
	if lib == nil {
		lib = fake.NVML()
	} else {
		lib = wrapLib(fake.NVML(), lib.(*countingLib))
	}
	inv, err := discovery.Discover(lib)
	if err != nil {
		tb.Fatal(err)
	}
	g := &inv.GPUs[0]
	geo, _ := migplace.ProductByName(g.Product)
	dg := plan.DynamicGPU{UUID: g.UUID, Product: g.Product, MemoryMiB: g.MemoryMiB, Rule: "dyn", WholeGPU: "nvidia.com/gpu", Capacity: migplace.Capacity(geo.Profiles)}
	for _, p := range geo.Profiles {
		ci, _ := p.FullComputeInstance()
		dg.Profiles = append(dg.Profiles, plan.DynamicProfile{Profile: p, Resource: "nvidia.com/mig-" + p.Name, ComputeInstanceProfile: ci})
	}
	b, err := BuildSlice(inv, &plan.Plan{DynamicMIG: []plan.DynamicGPU{dg}}, BuildOptions{CDIKind: "example.com/gpu"})
	if err != nil {
		tb.Fatal(err)
	}
	d := &dynNode{lib: lib, gpu: g.UUID, claims: &nodeClaims{}, cdiDir: tb.TempDir(), table: b.Table}
	root := tb.TempDir()
	specs := cdi.ClaimSpecs{Options: cdi.Options{Kind: "example.com/gpu"}, Writer: cdi.Writer{Dir: d.cdiDir},
		Generator: cdi.FakeRoot{Dir: root, Layout: fake.WriteDriverRoot},
		Discover: func() (*discovery.Inventory, nvml.Interface, error) {
			inv, err := discovery.Discover(lib)
			return inv, lib, err
		}}
	d.opts = NodeOptions{NodeName: nodeTestNode, StateDir: tb.TempDir(), Claims: d.claims.in, Table: func() *Table { return d.table },
		Partition: Partitioner{NVML: func() nvml.Interface { return lib }, WriteCDI: specs.Write, RemoveCDI: specs.Remove}}
	d.node, err = NewNode(d.opts)
	if err != nil {
		tb.Fatal(err)
	}
	d.svc = &draService{n: d.node}
	return d
}

// claim adds a claim allocated the placement device of profile at start.
func (d *dynNode) claim(uid, profile string, id uint32, start int) *drapbv1.Claim {
	name := migpartition.PlacementDeviceName(d.gpu, profile, id, start)
	d.claims.add(nodeClaim("ns", "c-"+uid, uid, nodeOurs("gpu", name)))
	return &drapbv1.Claim{Uid: uid, Namespace: "ns", Name: "c-" + uid}
}

func (d *dynNode) prepare(tb testing.TB, c *drapbv1.Claim) *drapbv1.NodePrepareResourceResponse {
	tb.Helper()
	resp, err := d.svc.NodePrepareResources(context.Background(), &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{c}})
	if err != nil {
		tb.Fatal(err)
	}
	return resp.Claims[c.Uid]
}

func (d *dynNode) unprepare(tb testing.TB, c *drapbv1.Claim) string {
	tb.Helper()
	resp, err := d.svc.NodeUnprepareResources(context.Background(), &drapbv1.NodeUnprepareResourcesRequest{Claims: []*drapbv1.Claim{c}})
	if err != nil {
		tb.Fatal(err)
	}
	return resp.Claims[c.Uid].Error
}

func (d *dynNode) list(tb testing.TB) []migctl.Device {
	tb.Helper()
	devs, err := migctl.List(d.lib, d.gpu)
	if err != nil {
		tb.Fatal(err)
	}
	return devs
}

func TestDynamicPrepareUnprepare(t *testing.T) {
	d := newDynNode(t, nil)
	c := d.claim("u1", "3g.40gb", 9, 4)
	r := d.prepare(t, c)
	if r.Error != "" || len(r.Devices) != 1 || len(r.Devices[0].CdiDeviceIds) != 1 {
		t.Fatalf("prepare: %+v", r)
	}
	devs := d.list(t)
	if len(devs) != 1 || devs[0].Placement != (migplace.Placement{Start: 4, Size: 4}) || devs[0].ProfileID != 9 || devs[0].UUID == "" {
		t.Fatalf("MIG devices after prepare: %+v, want one 3g.40gb at {4}:4", devs)
	}
	if want := "example.com/gpu=" + devs[0].UUID; r.Devices[0].CdiDeviceIds[0] != want {
		t.Errorf("CDI ID %s, want %s", r.Devices[0].CdiDeviceIds[0], want)
	}
	spec := filepath.Join(d.cdiDir, "featureplug-claim-u1.yaml")
	if _, err := os.Stat(spec); err != nil {
		t.Errorf("the claim's CDI spec: %v", err)
	}
	if !d.node.CreatedMIG(d.gpu, devs[0].UUID, devs[0].Placement) || d.node.reservedMIG()[devs[0].UUID] == "" {
		t.Errorf("the created MIG device is not counted as the claim's")
	}
	// Prepared again (the kubelet retries): the same answer, no second device.
	if again := d.prepare(t, c); !slices.Equal(again.Devices[0].CdiDeviceIds, r.Devices[0].CdiDeviceIds) || len(d.list(t)) != 1 {
		t.Errorf("prepared twice: %+v, devices %+v", again, d.list(t))
	}

	// A MIG device featureplug did not create, at another placement.
	other, _, err := migctl.Ensure(d.lib, mustTarget(t, d.lib, d.gpu, 14, 0))
	if err != nil {
		t.Fatal(err)
	}
	if e := d.unprepare(t, c); e != "" {
		t.Fatalf("unprepare: %s", e)
	}
	if devs := d.list(t); len(devs) != 1 || devs[0].UUID != other.UUID {
		t.Errorf("after unprepare the GPU holds %+v, want only the MIG device featureplug did not create (%s)", devs, other.UUID)
	}
	if _, err := os.Stat(spec); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the claim's CDI spec is still there after unprepare: %v", err)
	}
	if d.node.PreparedClaims() != 0 {
		t.Errorf("%d claims prepared after unprepare", d.node.PreparedClaims())
	}
}

// A claim allocated a placement another instance takes fails, naming it,
// and leaves no record.
func TestDynamicPreparePlacementTaken(t *testing.T) {
	d := newDynNode(t, nil)
	if err := migctl.SetMode(d.lib, d.gpu, true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := migctl.Ensure(d.lib, mustTarget(t, d.lib, d.gpu, 19, 4)); err != nil {
		t.Fatal(err)
	}
	r := d.prepare(t, d.claim("u1", "3g.40gb", 9, 4))
	if r.Error == "" || !strings.Contains(r.Error, "the placement is taken") {
		t.Errorf("prepare at an occupied placement: %+v", r)
	}
	if n := len(d.list(t)); n != 1 {
		t.Errorf("%d MIG devices after the refused prepare, want the one there before", n)
	}
}

// An admin-access claim allocated a placement is refused, naming why, and
// creates no MIG device.
func TestDynamicPrepareAdminAccessRefused(t *testing.T) {
	d := newDynNode(t, nil)
	if err := migctl.SetMode(d.lib, d.gpu, true); err != nil {
		t.Fatal(err)
	}
	name := migpartition.PlacementDeviceName(d.gpu, "3g.40gb", 9, 4)
	admin := nodeClaim("ns", "c-admin", "admin", nodeOurs("gpu", name))
	for i := range admin.Status.Allocation.Devices.Results {
		admin.Status.Allocation.Devices.Results[i].AdminAccess = ptr.To(true)
	}
	d.claims.add(admin)
	r := d.prepare(t, &drapbv1.Claim{Uid: "admin", Namespace: "ns", Name: "c-admin"})
	if r.Error == "" || !strings.Contains(r.Error, "admin access to a GPU partitioned on demand") {
		t.Errorf("prepare of an admin-access claim of a placement: %+v", r)
	}
	if devs := d.list(t); len(devs) != 0 {
		t.Errorf("MIG devices after the refused prepare: %+v, want none", devs)
	}
	if d.node.PreparedClaims() != 0 {
		t.Errorf("%d claims prepared, want 0", d.node.PreparedClaims())
	}
}

// The two agents of a rolling update share the checkpoint: a MIG device
// one created for a claim counts as a claim's device for the other too
// once it reads the checkpoint again, not as one someone else made.
func TestDynamicCreatedSharedInRollingUpdate(t *testing.T) {
	d := newDynNode(t, nil)
	state := t.TempDir()
	agents := map[string]*Node{}
	for _, pod := range []string{"pod-old", "pod-new"} {
		o := d.opts
		o.StateDir, o.Instance = state, pod
		n, err := NewNode(o)
		if err != nil {
			t.Fatal(err)
		}
		agents[pod] = n
	}
	c := d.claim("u1", "3g.40gb", 9, 4)
	prepare := func(n *Node) *drapbv1.NodePrepareResourceResponse {
		resp, err := (&draService{n: n}).NodePrepareResources(context.Background(), &drapbv1.NodePrepareResourcesRequest{Claims: []*drapbv1.Claim{c}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Claims[c.Uid]
	}
	if r := prepare(agents["pod-old"]); r.Error != "" {
		t.Fatalf("old agent: prepare: %s", r.Error)
	}
	devs := d.list(t)
	if len(devs) != 1 {
		t.Fatalf("MIG devices after prepare: %+v, want one", devs)
	}
	if r := prepare(agents["pod-new"]); r.Error != "" {
		t.Fatalf("new agent: prepare of the old one's claim: %s", r.Error)
	}
	if len(d.list(t)) != 1 {
		t.Errorf("the new agent made a second MIG device for the claim: %+v", d.list(t))
	}
	if !agents["pod-new"].CreatedMIG(d.gpu, devs[0].UUID, devs[0].Placement) {
		t.Errorf("the new agent does not count the MIG device the old one created for a shared claim as a claim's")
	}
}

func mustTarget(t testing.TB, lib nvml.Interface, gpu string, id uint32, start int) migplace.Target {
	t.Helper()
	tg, err := migctl.TargetFor(lib, gpu, id, start)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// BenchmarkDynamicPrepare measures a dynamic MIG prepare (claim read,
// MIG mode, GPU and compute instance, CDI spec, checkpoint) and its
// unprepare on a fake H100, and reports the NVML calls of each and the
// median and p99 of a prepare.
func BenchmarkDynamicPrepare(b *testing.B) {
	counts := &countingLib{}
	d := newDynNode(b, counts)
	profiles := []struct {
		name  string
		id    uint32
		start int
	}{{"3g.40gb", 9, 4}, {"2g.20gb", 14, 2}, {"1g.10gb", 19, 1}}
	var prep []time.Duration
	var prepCalls, unprepCalls int
	b.ResetTimer()
	for i := range b.N {
		p := profiles[i%len(profiles)]
		c := d.claim(fmt.Sprint("u", i), p.name, p.id, p.start)
		before := counts.total()
		t0 := time.Now()
		if r := d.prepare(b, c); r.Error != "" {
			b.Fatal(r.Error)
		}
		prep = append(prep, time.Since(t0))
		mid := counts.total()
		if e := d.unprepare(b, c); e != "" {
			b.Fatal(e)
		}
		prepCalls += mid - before
		unprepCalls += counts.total() - mid
	}
	b.StopTimer()
	sort.Slice(prep, func(i, j int) bool { return prep[i] < prep[j] })
	b.ReportMetric(float64(prep[len(prep)/2].Microseconds()), "prepare-p50-µs")
	b.ReportMetric(float64(prep[len(prep)*99/100].Microseconds()), "prepare-p99-µs")
	b.ReportMetric(float64(prepCalls)/float64(b.N), "nvml-calls/prepare")
	b.ReportMetric(float64(unprepCalls)/float64(b.N), "nvml-calls/unprepare")
}

// countingLib counts the NVML calls made through it: the library's, and
// those of the devices and instances it hands out.
type countingLib struct {
	nvml.Interface
	mu sync.Mutex
	n  int
}

func (c *countingLib) add() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *countingLib) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func wrapLib(lib nvml.Interface, c *countingLib) nvml.Interface {
	c.Interface = lib
	return c
}

func (c *countingLib) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	c.add()
	h, ret := c.Interface.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return h, ret
	}
	return countingDevice{h, c}, ret
}

func (c *countingLib) DeviceGetCount() (int, nvml.Return) {
	c.add()
	return c.Interface.DeviceGetCount()
}

func (c *countingLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	c.add()
	h, ret := c.Interface.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return h, ret
	}
	return countingDevice{h, c}, ret
}

type countingDevice struct {
	nvml.Device
	c *countingLib
}

func (d countingDevice) GetMigMode() (int, int, nvml.Return) { d.c.add(); return d.Device.GetMigMode() }
func (d countingDevice) SetMigMode(m int) (nvml.Return, nvml.Return) {
	d.c.add()
	return d.Device.SetMigMode(m)
}
func (d countingDevice) GetGpuInstanceProfileInfo(p int) (nvml.GpuInstanceProfileInfo, nvml.Return) {
	d.c.add()
	return d.Device.GetGpuInstanceProfileInfo(p)
}
func (d countingDevice) GetGpuInstances(info *nvml.GpuInstanceProfileInfo) ([]nvml.GpuInstance, nvml.Return) {
	d.c.add()
	gis, ret := d.Device.GetGpuInstances(info)
	for i := range gis {
		gis[i] = countingGI{gis[i], d.c}
	}
	return gis, ret
}
func (d countingDevice) GetGpuInstanceById(id int) (nvml.GpuInstance, nvml.Return) {
	d.c.add()
	gi, ret := d.Device.GetGpuInstanceById(id)
	return countingGI{gi, d.c}, ret
}
func (d countingDevice) CreateGpuInstanceWithPlacement(info *nvml.GpuInstanceProfileInfo, pl *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
	d.c.add()
	return d.Device.CreateGpuInstanceWithPlacement(info, pl)
}
func (d countingDevice) GetMaxMigDeviceCount() (int, nvml.Return) {
	d.c.add()
	return d.Device.GetMaxMigDeviceCount()
}
func (d countingDevice) GetMigDeviceHandleByIndex(i int) (nvml.Device, nvml.Return) {
	d.c.add()
	return d.Device.GetMigDeviceHandleByIndex(i)
}

type countingGI struct {
	nvml.GpuInstance
	c *countingLib
}

func (g countingGI) GetInfo() (nvml.GpuInstanceInfo, nvml.Return) {
	g.c.add()
	return g.GpuInstance.GetInfo()
}
func (g countingGI) GetComputeInstanceProfileInfo(p, e int) (nvml.ComputeInstanceProfileInfo, nvml.Return) {
	g.c.add()
	return g.GpuInstance.GetComputeInstanceProfileInfo(p, e)
}
func (g countingGI) GetComputeInstances(info *nvml.ComputeInstanceProfileInfo) ([]nvml.ComputeInstance, nvml.Return) {
	g.c.add()
	return g.GpuInstance.GetComputeInstances(info)
}
func (g countingGI) CreateComputeInstance(info *nvml.ComputeInstanceProfileInfo) (nvml.ComputeInstance, nvml.Return) {
	g.c.add()
	return g.GpuInstance.CreateComputeInstance(info)
}
func (g countingGI) GetComputeInstanceById(id int) (nvml.ComputeInstance, nvml.Return) {
	g.c.add()
	return g.GpuInstance.GetComputeInstanceById(id)
}
func (g countingGI) Destroy() nvml.Return { g.c.add(); return g.GpuInstance.Destroy() }
