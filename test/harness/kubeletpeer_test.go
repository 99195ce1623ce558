package harness_test

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/featureplug/featureplug/test/harness"
)

// tinyPlugin is a minimal device plugin: a fixed set of devices whose health
// the test flips, a preferred allocation of the highest IDs, and an Allocate
// that answers with an env var, a device node and CDI names.
type tinyPlugin struct {
	pluginapi.UnimplementedDevicePluginServer

	resource string
	mu       sync.Mutex
	health   map[string]string // device ID -> pluginapi.Healthy / Unhealthy
	changed  chan struct{}     // closed and replaced on every health change
	allocs   [][]string        // device IDs of each Allocate container request
}

var _ pluginapi.DevicePluginServer = (*tinyPlugin)(nil)

func newTinyPlugin(resource string, health map[string]string) *tinyPlugin {
	return &tinyPlugin{resource: resource, health: health, changed: make(chan struct{})}
}

func (p *tinyPlugin) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
}

func (p *tinyPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return p.options(), nil
}

func (p *tinyPlugin) setHealth(id, health string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.health[id] = health
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *tinyPlugin) snapshot() ([]*pluginapi.Device, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var devs []*pluginapi.Device
	for id, h := range p.health {
		devs = append(devs, &pluginapi.Device{ID: id, Health: h})
	}
	slices.SortFunc(devs, func(a, b *pluginapi.Device) int { return strings.Compare(a.ID, b.ID) })
	return devs, p.changed
}

func (p *tinyPlugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	for {
		devs, changed := p.snapshot()
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-s.Context().Done():
			return nil
		}
	}
}

func (p *tinyPlugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.ContainerRequests {
		ids := slices.Clone(cr.MustIncludeDeviceIDs)
		rest := slices.Clone(cr.AvailableDeviceIDs)
		slices.Sort(rest)
		slices.Reverse(rest)
		for _, id := range rest {
			if len(ids) >= int(cr.AllocationSize) {
				break
			}
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

func (p *tinyPlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		ids := slices.Sorted(slices.Values(cr.DevicesIds))
		p.mu.Lock()
		p.allocs = append(p.allocs, ids)
		p.mu.Unlock()
		car := &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"TINY_DEVICES": strings.Join(ids, ",")},
		}
		for _, id := range ids {
			car.Devices = append(car.Devices, &pluginapi.DeviceSpec{ContainerPath: "/dev/tiny-" + id, HostPath: "/dev/null", Permissions: "rw"})
			car.CdiDevices = append(car.CdiDevices, &pluginapi.CDIDevice{Name: "example.com/tiny=" + id})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, car)
	}
	return resp, nil
}

func (p *tinyPlugin) allocations() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.allocs)
}

// serve serves the plugin on dir/name and registers it with the kubelet's
// socket, as a device plugin does on a node.
func (p *tinyPlugin) serve(t testing.TB, dir, name, kubeletSocket string) {
	t.Helper()
	sock := filepath.Join(dir, name)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("listening on %s: %v", sock, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)

	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dialing kubelet socket %s: %v", kubeletSocket, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     name,
		ResourceName: p.resource,
		Options:      p.options(),
	})
	if err != nil {
		t.Fatalf("registering %s: %v", p.resource, err)
	}
}

// TestKubeletPeerRegistersAndAllocates drives the kubelet's device manager
// with a device plugin over real unix sockets: registration, capacity with
// unhealthy devices, preferred allocation, Allocate responses, exhaustion,
// health recovery and devices freed by a removed pod.
func TestKubeletPeerRegistersAndAllocates(t *testing.T) {
	const res = "example.com/tiny"
	peer := harness.StartKubeletPeer(t, t.TempDir())
	plugin := newTinyPlugin(res, map[string]string{
		"dev-0": pluginapi.Healthy, "dev-1": pluginapi.Healthy, "dev-2": pluginapi.Unhealthy,
	})
	plugin.serve(t, peer.Dir, "tiny.sock", peer.SocketPath)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := peer.WaitRegistered(ctx, res); err != nil {
		t.Fatalf("plugin did not register: %v", err)
	}

	steps := []struct {
		name string
		// before runs first (e.g. a health change), then capacity is awaited.
		before                func()
		capacity, allocatable int64
		pod                   string
		n                     int
		wantIDs               []string // nil with wantErr
		wantErr               string
	}{
		{name: "unhealthy device counts in capacity only", capacity: 3, allocatable: 2,
			pod: "pod-a", n: 1, wantIDs: []string{"dev-1"}},
		{name: "more than the free healthy devices fails", capacity: 3, allocatable: 2,
			pod: "pod-b", n: 2, wantErr: "requested number of devices unavailable"},
		{name: "recovered device is allocatable", before: func() { plugin.setHealth("dev-2", pluginapi.Healthy) },
			capacity: 3, allocatable: 3, pod: "pod-b", n: 2, wantIDs: []string{"dev-0", "dev-2"}},
		{name: "all devices held", capacity: 3, allocatable: 3,
			pod: "pod-c", n: 1, wantErr: "requested number of devices unavailable"},
		{name: "removed pod frees its device", before: func() { peer.RemovePod("pod-a") },
			capacity: 3, allocatable: 3, pod: "pod-c", n: 1, wantIDs: []string{"dev-1"}},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		if err := peer.WaitCapacity(ctx, res, st.capacity, st.allocatable); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		alloc, err := peer.Allocate(ctx, st.pod, "main", res, st.n)
		if st.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), st.wantErr) {
				t.Fatalf("%s: Allocate(%s, %d) error = %v, want one containing %q", st.name, st.pod, st.n, err, st.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: Allocate(%s, %d): %v", st.name, st.pod, st.n, err)
		}
		if got := alloc.DeviceIDs[res]; !slices.Equal(got, st.wantIDs) {
			t.Errorf("%s: allocated %v, want %v (the plugin's preferred devices)", st.name, got, st.wantIDs)
		}
		if got, want := alloc.Envs["TINY_DEVICES"], strings.Join(st.wantIDs, ","); got != want {
			t.Errorf("%s: env TINY_DEVICES = %q, want %q", st.name, got, want)
		}
		var wantCDI []string
		var wantNodes []harness.DeviceNode
		for _, id := range st.wantIDs {
			wantCDI = append(wantCDI, "example.com/tiny="+id)
			wantNodes = append(wantNodes, harness.DeviceNode{ContainerPath: "/dev/tiny-" + id, HostPath: "/dev/null", Permissions: "rw"})
		}
		if !slices.Equal(alloc.CDIDevices, wantCDI) {
			t.Errorf("%s: CDI devices %v, want %v", st.name, alloc.CDIDevices, wantCDI)
		}
		if !slices.Equal(alloc.Devices, wantNodes) {
			t.Errorf("%s: device nodes %v, want %v", st.name, alloc.Devices, wantNodes)
		}
	}

	want := [][]string{{"dev-1"}, {"dev-0", "dev-2"}, {"dev-1"}}
	if got := plugin.allocations(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("plugin saw Allocate calls %v, want %v", got, want)
	}
}

// BenchmarkKubeletPeerAllocate measures one pod admission through the
// kubelet's device manager and a device plugin over unix sockets: preferred
// allocation, Allocate and the run options, then the pod's removal.
func BenchmarkKubeletPeerAllocate(b *testing.B) {
	const res = "example.com/tiny"
	peer := harness.StartKubeletPeer(b, b.TempDir())
	health := map[string]string{}
	for i := range 8 {
		health[fmt.Sprintf("dev-%d", i)] = pluginapi.Healthy
	}
	newTinyPlugin(res, health).serve(b, peer.Dir, "tiny.sock", peer.SocketPath)
	ctx := context.Background()
	if err := peer.WaitCapacity(ctx, res, 8, 8); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		pod := fmt.Sprintf("pod-%d", i)
		if _, err := peer.Allocate(ctx, pod, "main", res, 2); err != nil {
			b.Fatal(err)
		}
		peer.RemovePod(pod)
	}
}
