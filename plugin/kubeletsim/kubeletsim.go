// Package kubeletsim is the kubelet's side of the device-plugin API v1beta1,
// for tests, demos and benchmarks: a registration server on kubelet.sock in
// a given directory that, like the kubelet's device manager, dials each
// registering plugin's endpoint, keeps a ListAndWatch stream open and
// remembers the latest device list per resource. It can be restarted the
// way a kubelet restarts, and it counts registrations, streams and updates
// per resource so tests can tell "same stream" from "re-registered".
package kubeletsim

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// SocketName is the registration socket's file name.
const SocketName = "kubelet.sock"

// dialTimeout bounds the kubelet's first call to a registering plugin.
const dialTimeout = 5 * time.Second

// Kubelet is a running simulated kubelet device manager. Its methods are
// safe for concurrent use.
type Kubelet struct {
	dir    string
	socket string

	mu      sync.Mutex
	grpc    *grpc.Server
	plugins map[string]*plugin
	// changed is closed and replaced whenever anything observable changes.
	changed       chan struct{}
	registrations map[string]int
	streams       map[string]int
	updates       map[string]int
}

// plugin is the connection to one registered resource's plugin.
type plugin struct {
	resource string
	endpoint string
	options  *pluginapi.DevicePluginOptions
	conn     *grpc.ClientConn
	client   pluginapi.DevicePluginClient
	cancel   context.CancelFunc
	devices  []*pluginapi.Device
	// streaming reports whether the ListAndWatch stream is open.
	streaming bool
}

// registration is the gRPC face of a Kubelet.
type registration struct {
	pluginapi.UnimplementedRegistrationServer
	k *Kubelet
}

var _ pluginapi.RegistrationServer = (*registration)(nil)

// Start serves the registration socket dir/kubelet.sock.
func Start(dir string) (*Kubelet, error) {
	k := &Kubelet{
		dir:           dir,
		socket:        filepath.Join(dir, SocketName),
		plugins:       map[string]*plugin{},
		changed:       make(chan struct{}),
		registrations: map[string]int{},
		streams:       map[string]int{},
		updates:       map[string]int{},
	}
	if err := k.serve(); err != nil {
		return nil, err
	}
	return k, nil
}

// Dir returns the device-plugin directory.
func (k *Kubelet) Dir() string { return k.dir }

// serve listens on the registration socket.
func (k *Kubelet) serve() error {
	if err := os.Remove(k.socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("kubeletsim: removing stale %s: %w", k.socket, err)
	}
	// Anyone may connect (a test may run the plugin as another user than
	// the simulated kubelet): the socket is made under a temporary name,
	// opened to all, and renamed into place, so that kubelet.sock appears
	// once, as it stays.
	tmp := k.socket + ".tmp"
	_ = os.Remove(tmp)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return fmt.Errorf("kubeletsim: listening on %s: %w", tmp, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false) // shutdown removes kubelet.sock
	if err := os.Chmod(tmp, 0o777); err != nil {
		_ = ln.Close()
		return fmt.Errorf("kubeletsim: %w", err)
	}
	if err := os.Rename(tmp, k.socket); err != nil {
		_ = ln.Close()
		return fmt.Errorf("kubeletsim: %w", err)
	}
	k.serveListener(ln)
	return nil
}

// serveListener serves the registration API on ln.
func (k *Kubelet) serveListener(ln net.Listener) {
	g := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(g, &registration{k: k})
	k.mu.Lock()
	k.grpc = g
	k.mu.Unlock()
	go func() { _ = g.Serve(ln) }()
}

// shutdown stops the registration server and drops every plugin
// connection; their streams end.
func (k *Kubelet) shutdown() {
	k.mu.Lock()
	g := k.grpc
	k.grpc = nil
	plugins := k.plugins
	k.plugins = map[string]*plugin{}
	k.notifyLocked()
	k.mu.Unlock()
	if g != nil {
		g.Stop()
	}
	_ = os.Remove(k.socket)
	for _, p := range plugins {
		p.close()
	}
}

// Stop shuts the simulated kubelet down and removes kubelet.sock.
func (k *Kubelet) Stop() { k.shutdown() }

// Restart simulates a kubelet restart: the registration socket goes away
// with every plugin connection, and comes back. With cleanPluginSockets the
// other sockets in the directory are deleted in between, as the kubelet's
// device manager does when it starts.
func (k *Kubelet) Restart(cleanPluginSockets bool) error {
	if err := k.stopAndClean(cleanPluginSockets); err != nil {
		return err
	}
	return k.serve()
}

// stopAndClean is the first half of a restart.
func (k *Kubelet) stopAndClean(cleanPluginSockets bool) error {
	k.shutdown()
	if cleanPluginSockets {
		entries, err := os.ReadDir(k.dir)
		if err != nil {
			return fmt.Errorf("kubeletsim: cleaning %s: %w", k.dir, err)
		}
		for _, e := range entries {
			if e.Type()&fs.ModeSocket != 0 && e.Name() != SocketName {
				if err := os.Remove(filepath.Join(k.dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("kubeletsim: cleaning %s: %w", k.dir, err)
				}
			}
		}
	}
	return nil
}

// notifyLocked wakes every WaitFor; k.mu must be held.
func (k *Kubelet) notifyLocked() {
	close(k.changed)
	k.changed = make(chan struct{})
}

// Register accepts a plugin the way the kubelet does: it checks the API
// version and resource name, dials the plugin's endpoint before answering,
// and then keeps a ListAndWatch stream open to it.
func (r *registration) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k := r.k
	if req.GetVersion() != pluginapi.Version {
		return nil, fmt.Errorf("kubeletsim: unsupported API version %q (supported: %s)", req.GetVersion(), pluginapi.Version)
	}
	name := req.GetResourceName()
	if prefix, base, ok := strings.Cut(name, "/"); !ok || prefix == "" || base == "" {
		return nil, fmt.Errorf("kubeletsim: invalid extended resource name %q", name)
	}
	ep := req.GetEndpoint()
	if ep == "" || strings.Contains(ep, "/") {
		return nil, fmt.Errorf("kubeletsim: resource %s: endpoint %q must be a file name in %s", name, ep, k.dir)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, ep), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("kubeletsim: resource %s: dialing %s: %w", name, ep, err)
	}
	client := pluginapi.NewDevicePluginClient(conn)
	dctx, dcancel := context.WithTimeout(ctx, dialTimeout)
	opts, err := client.GetDevicePluginOptions(dctx, &pluginapi.Empty{}, grpc.WaitForReady(true))
	dcancel()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("kubeletsim: resource %s: reaching plugin at %s: %w", name, ep, err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	p := &plugin{resource: name, endpoint: ep, options: opts, conn: conn, client: client, cancel: cancel}

	k.mu.Lock()
	if k.grpc == nil {
		k.mu.Unlock()
		p.close()
		return nil, errors.New("kubeletsim: shutting down")
	}
	old := k.plugins[name]
	k.plugins[name] = p
	k.registrations[name]++
	k.notifyLocked()
	k.mu.Unlock()
	if old != nil {
		old.close()
	}
	go k.watch(sctx, p)
	return &pluginapi.Empty{}, nil
}

// watch runs one plugin's ListAndWatch stream.
func (k *Kubelet) watch(ctx context.Context, p *plugin) {
	stream, err := p.client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		return
	}
	k.mu.Lock()
	k.streams[p.resource]++
	p.streaming = true
	k.notifyLocked()
	k.mu.Unlock()
	for {
		resp, err := stream.Recv()
		k.mu.Lock()
		if err != nil {
			p.streaming = false
			k.notifyLocked()
			k.mu.Unlock()
			return
		}
		p.devices = resp.GetDevices()
		if p.devices == nil {
			p.devices = []*pluginapi.Device{} // an empty list, not "nothing yet"
		}
		if k.plugins[p.resource] == p {
			k.updates[p.resource]++
		}
		k.notifyLocked()
		k.mu.Unlock()
	}
}

// close ends the plugin's stream and connection.
func (p *plugin) close() {
	p.cancel()
	_ = p.conn.Close()
}

// current returns the registered plugin of resource.
func (k *Kubelet) current(resource string) (*plugin, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.plugins[resource]
	if p == nil {
		return nil, fmt.Errorf("kubeletsim: resource %s is not registered", resource)
	}
	return p, nil
}

// devicesLocked copies a resource's latest device list.
func (k *Kubelet) devicesLocked(resource string) []*pluginapi.Device {
	p := k.plugins[resource]
	if p == nil || p.devices == nil {
		return nil
	}
	out := make([]*pluginapi.Device, len(p.devices))
	for i, d := range p.devices {
		out[i] = proto.Clone(d).(*pluginapi.Device)
	}
	return out
}

// Devices returns a copy of the latest device list of resource, or nil
// when the resource is not registered or sent nothing yet.
func (k *Kubelet) Devices(resource string) []*pluginapi.Device {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.devicesLocked(resource)
}

// Capacity returns the number of devices and of healthy devices of
// resource, as the kubelet would report capacity and allocatable.
func (k *Kubelet) Capacity(resource string) (total, healthy int) {
	for _, d := range k.Devices(resource) {
		total++
		if d.GetHealth() == pluginapi.Healthy {
			healthy++
		}
	}
	return total, healthy
}

// WaitFor waits until pred holds for the latest device list of resource
// (nil while the resource is not registered or sent nothing).
func (k *Kubelet) WaitFor(ctx context.Context, resource string, pred func([]*pluginapi.Device) bool) error {
	for {
		k.mu.Lock()
		devs := k.devicesLocked(resource)
		ch := k.changed
		k.mu.Unlock()
		if pred(devs) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubeletsim: waiting for resource %s (last list: %d devices): %w", resource, len(devs), ctx.Err())
		case <-ch:
		}
	}
}

// WaitUntil waits until cond holds; cond is evaluated after every change
// (registration, stream, update) and must only call the Kubelet's
// read-only methods.
func (k *Kubelet) WaitUntil(ctx context.Context, cond func() bool) error {
	for {
		k.mu.Lock()
		ch := k.changed
		k.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubeletsim: waiting: %w", ctx.Err())
		case <-ch:
		}
	}
}

// Client returns the device-plugin client of resource, for raw calls.
func (k *Kubelet) Client(resource string) (pluginapi.DevicePluginClient, error) {
	p, err := k.current(resource)
	if err != nil {
		return nil, err
	}
	return p.client, nil
}

// Allocate asks the plugin of resource to allocate ids for one container.
func (k *Kubelet) Allocate(ctx context.Context, resource string, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	p, err := k.current(resource)
	if err != nil {
		return nil, err
	}
	resp, err := p.client.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}},
	})
	if err != nil {
		return nil, err
	}
	if n := len(resp.GetContainerResponses()); n != 1 {
		return nil, fmt.Errorf("kubeletsim: resource %s: Allocate answered %d container responses for 1 request", resource, n)
	}
	return resp.GetContainerResponses()[0], nil
}

// GetPreferredAllocation asks the plugin of resource for its preferred
// size devices among available, including mustInclude.
func (k *Kubelet) GetPreferredAllocation(ctx context.Context, resource string, available, mustInclude []string, size int) ([]string, error) {
	p, err := k.current(resource)
	if err != nil {
		return nil, err
	}
	if !p.options.GetGetPreferredAllocationAvailable() {
		return nil, fmt.Errorf("kubeletsim: resource %s does not offer GetPreferredAllocation", resource)
	}
	resp, err := p.client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs:   available,
			MustIncludeDeviceIDs: mustInclude,
			AllocationSize:       int32(size),
		}},
	})
	if err != nil {
		return nil, err
	}
	if n := len(resp.GetContainerResponses()); n != 1 {
		return nil, fmt.Errorf("kubeletsim: resource %s: GetPreferredAllocation answered %d container responses for 1 request", resource, n)
	}
	return resp.GetContainerResponses()[0].GetDeviceIDs(), nil
}

// Resources returns the registered resource names, sorted.
func (k *Kubelet) Resources() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]string, 0, len(k.plugins))
	for name := range k.plugins {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Endpoint returns the socket file name resource registered with.
func (k *Kubelet) Endpoint(resource string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p := k.plugins[resource]; p != nil {
		return p.endpoint
	}
	return ""
}

// Streaming reports whether the ListAndWatch stream of resource is open.
func (k *Kubelet) Streaming(resource string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.plugins[resource]
	return p != nil && p.streaming
}

// Registrations counts the accepted registrations of resource since Start.
func (k *Kubelet) Registrations(resource string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.registrations[resource]
}

// Streams counts the ListAndWatch streams opened for resource since Start.
func (k *Kubelet) Streams(resource string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.streams[resource]
}

// Updates counts the device lists received for resource since Start.
func (k *Kubelet) Updates(resource string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.updates[resource]
}
