package kubeletsim

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// stubPlugin is a minimal device plugin sending one fixed list.
type stubPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
}

func (p *stubPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *stubPlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func (p *stubPlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.GetContainerRequests() {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"IDS": strings.Join(cr.GetDevicesIds(), ",")},
		})
	}
	return resp, nil
}

func setup(t *testing.T) (*Kubelet, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "ks")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	k, err := Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	ln, err := net.Listen("unix", filepath.Join(dir, "stub.sock"))
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(g, &stubPlugin{devices: []*pluginapi.Device{
		{ID: "d0", Health: pluginapi.Healthy}, {ID: "d1", Health: pluginapi.Unhealthy},
	}})
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	return k, dir
}

func register(t *testing.T, dir string, req *pluginapi.RegisterRequest) error {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, SocketName), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, req)
	return err
}

func TestRegisterRejects(t *testing.T) {
	_, dir := setup(t)
	tests := []struct {
		name string
		req  *pluginapi.RegisterRequest
		want string
	}{
		{"version", &pluginapi.RegisterRequest{Version: "v1alpha", Endpoint: "stub.sock", ResourceName: "a.b/c"}, "unsupported API version"},
		{"resource", &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "stub.sock", ResourceName: "gpu"}, "invalid extended resource name"},
		{"endpoint path", &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "/tmp/stub.sock", ResourceName: "a.b/c"}, "must be a file name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := register(t, dir, tt.req)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Register error = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestRegisterListAndAllocate(t *testing.T) {
	k, dir := setup(t)
	if err := register(t, dir, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "stub.sock", ResourceName: "a.b/c"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := k.WaitFor(ctx, "a.b/c", func(d []*pluginapi.Device) bool { return len(d) == 2 }); err != nil {
		t.Fatal(err)
	}
	if total, healthy := k.Capacity("a.b/c"); total != 2 || healthy != 1 {
		t.Errorf("Capacity = %d, %d; want 2, 1", total, healthy)
	}
	if r, s, u := k.Registrations("a.b/c"), k.Streams("a.b/c"), k.Updates("a.b/c"); r != 1 || s != 1 || u != 1 {
		t.Errorf("counts = %d registrations, %d streams, %d updates; want 1 each", r, s, u)
	}
	resp, err := k.Allocate(ctx, "a.b/c", []string{"d0"})
	if err != nil || resp.GetEnvs()["IDS"] != "d0" {
		t.Errorf("Allocate = %v, %v", resp, err)
	}
	if _, err := k.GetPreferredAllocation(ctx, "a.b/c", []string{"d0"}, nil, 1); err == nil {
		t.Error("GetPreferredAllocation on a plugin that does not offer it did not fail")
	}
	if _, err := k.Allocate(ctx, "x.y/z", []string{"d0"}); err == nil {
		t.Error("Allocate on an unregistered resource did not fail")
	}

	if err := k.Restart(true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "stub.sock")); !os.IsNotExist(err) {
		t.Errorf("Restart(true) left the plugin socket: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, SocketName)); err != nil {
		t.Errorf("Restart did not re-create %s: %v", SocketName, err)
	}
	if k.Devices("a.b/c") != nil || len(k.Resources()) != 0 {
		t.Error("Restart kept the plugins")
	}
}
