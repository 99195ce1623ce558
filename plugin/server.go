package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Registration timing.
const (
	// registerTimeout bounds one Register call to the kubelet.
	registerTimeout = 5 * time.Second
	// registerBackoffMin and registerBackoffMax bound the wait between
	// failed registration attempts; it doubles after each failure and
	// starts again from the minimum when a new kubelet socket appears
	// (which can refuse connections for a moment after it is created).
	registerBackoffMin = 20 * time.Millisecond
	registerBackoffMax = 10 * time.Second
)

// KubeletSocket is the name of the kubelet's registration socket in the
// device-plugin directory.
const KubeletSocket = "kubelet.sock"

// serverDeps is what every server shares with its manager.
type serverDeps struct {
	opts    *Options
	log     *slog.Logger
	metrics *metrics
}

// snapshot is a server's current device set and ListAndWatch list. It is
// replaced, never changed; changed is closed when a newer snapshot holds a
// different list.
type snapshot struct {
	set     *deviceSet
	api     []*pluginapi.Device
	changed chan struct{}
}

// server is the device-plugin server of one resource. Its gRPC instance is
// replaced on restart; its registration loop lives until stop.
type server struct {
	pluginapi.UnimplementedDevicePluginServer

	name   string
	socket string
	deps   *serverDeps
	log    *slog.Logger

	ctx      context.Context
	cancel   context.CancelFunc
	kick     chan struct{}
	loopDone chan struct{}

	mu   sync.RWMutex
	snap *snapshot
	grpc *grpc.Server
	// registered reports whether the kubelet accepted the current
	// instance; regStat is kubelet.sock as it was at that registration.
	registered bool
	regStat    os.FileInfo
	// gen counts restarts and kubelet losses, so a registration that
	// raced one of them is not taken as current.
	gen uint64
}

var _ pluginapi.DevicePluginServer = (*server)(nil)

func newServer(name, socket string, set *deviceSet, health healthFunc, deps *serverDeps) *server {
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{
		name:     name,
		socket:   socket,
		deps:     deps,
		log:      deps.log.With("resource", name),
		ctx:      ctx,
		cancel:   cancel,
		kick:     make(chan struct{}, 1),
		loopDone: make(chan struct{}),
	}
	api, bad := set.apiDevices(health)
	s.snap = &snapshot{set: set, api: api, changed: make(chan struct{})}
	deps.metrics.setDevices(name, len(api), bad)
	return s
}

// start serves the socket and starts registering.
func (s *server) start() error {
	if err := s.serve(); err != nil {
		return err
	}
	go s.registerLoop()
	s.requestRegistration()
	return nil
}

// serve listens on the socket and serves a new gRPC instance.
func (s *server) serve() error {
	if err := os.Remove(s.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("resource %s: removing stale socket %s: %w", s.name, s.socket, err)
	}
	ln, err := net.Listen("unix", s.socket)
	if err != nil {
		return fmt.Errorf("resource %s: listening on %s: %w", s.name, s.socket, err)
	}
	g := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(g, s)
	s.mu.Lock()
	s.grpc = g
	s.mu.Unlock()
	go func() {
		if err := g.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("device-plugin server stopped serving", "socket", s.socket, "err", err)
		}
	}()
	s.log.Info("serving device plugin", "socket", s.socket)
	return nil
}

// stopGRPC stops the current gRPC instance, ending its streams.
func (s *server) stopGRPC() {
	s.mu.Lock()
	g := s.grpc
	s.grpc = nil
	s.registered = false
	s.gen++
	s.mu.Unlock()
	if g != nil {
		g.Stop()
	}
}

// restart replaces the gRPC instance (its socket vanished) and registers
// it again.
func (s *server) restart() error {
	s.stopGRPC()
	if err := s.serve(); err != nil {
		return err
	}
	s.requestRegistration()
	return nil
}

// stop ends the server for good and removes its socket.
func (s *server) stop() {
	s.cancel()
	s.stopGRPC()
	<-s.loopDone
	if err := os.Remove(s.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("removing socket", "socket", s.socket, "err", err)
	}
	s.log.Info("stopped device plugin")
}

// requestRegistration asks the registration loop to register (again).
func (s *server) requestRegistration() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// kubeletLost records that the kubelet's registration socket went away.
func (s *server) kubeletLost() {
	s.mu.Lock()
	s.registered = false
	s.gen++
	s.mu.Unlock()
}

// isRegistered reports whether the kubelet accepted the current instance.
func (s *server) isRegistered() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.registered
}

// current returns the current snapshot.
func (s *server) current() *snapshot {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.snap
}

// setDevices installs a device set with the given health and pushes the
// list to open ListAndWatch streams when what the kubelet sees changed.
func (s *server) setDevices(set *deviceSet, health healthFunc) {
	api, bad := set.apiDevices(health)
	s.mu.Lock()
	old := s.snap
	next := &snapshot{set: set, api: api, changed: old.changed}
	push := !sameAPIDevices(old.api, api)
	if push {
		next.changed = make(chan struct{})
	}
	s.snap = next
	s.mu.Unlock()
	if push {
		close(old.changed)
		s.log.Info("device list changed", "devices", len(api), "unhealthy", bad)
	}
	s.deps.metrics.setDevices(s.name, len(api), bad)
}

// registerLoop registers whenever asked, retrying failures with a capped
// exponential backoff, until the server stops.
func (s *server) registerLoop() {
	defer close(s.loopDone)
	delay := registerBackoffMin
	var retry *time.Timer
	var retryC <-chan time.Time
	failures := 0
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.kick:
			delay = registerBackoffMin
		case <-retryC:
		}
		if retry != nil {
			retry.Stop()
			retry, retryC = nil, nil
		}
		err := s.registerOnce()
		if err == nil {
			delay, failures = registerBackoffMin, 0
			continue
		}
		if s.ctx.Err() != nil {
			return
		}
		failures++
		level := slog.LevelDebug
		if failures == 1 {
			level = slog.LevelWarn
		}
		s.log.Log(s.ctx, level, "registration with the kubelet failed; retrying", "err", err, "retryIn", delay, "failures", failures)
		retry = time.NewTimer(delay)
		retryC = retry.C
		delay = min(2*delay, registerBackoffMax)
	}
}

// registerOnce registers the current instance unless it already is
// registered with the kubelet that owns kubelet.sock now.
func (s *server) registerOnce() error {
	kubelet := filepath.Join(s.deps.opts.KubeletDir, KubeletSocket)
	st, err := os.Stat(kubelet)
	if err != nil {
		return fmt.Errorf("kubelet socket: %w", err)
	}
	s.mu.RLock()
	gen, serving := s.gen, s.grpc != nil
	done := s.registered && s.regStat != nil && os.SameFile(s.regStat, st)
	s.mu.RUnlock()
	if done || !serving {
		return nil
	}
	// A restarting kubelet removes every plugin socket. Registering before
	// the manager has re-created ours would make the kubelet's dial-back
	// fail and gRPC wait out its reconnect backoff (a second); the restart
	// asks for registration again once the socket is back.
	if _, err := os.Stat(s.socket); err != nil {
		return fmt.Errorf("own socket not there yet: %w", err)
	}
	if err := s.register(kubelet); err != nil {
		s.deps.metrics.registrations.WithLabelValues(s.name, "error").Inc()
		return err
	}
	s.deps.metrics.registrations.WithLabelValues(s.name, "ok").Inc()
	s.mu.Lock()
	if s.gen == gen {
		s.registered = true
		s.regStat = st
	}
	s.mu.Unlock()
	s.log.Info("registered with the kubelet", "endpoint", filepath.Base(s.socket))
	return nil
}

// register sends one RegisterRequest to the kubelet.
func (s *server) register(kubelet string) error {
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", kubelet, err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(s.ctx, registerTimeout)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(s.socket),
		ResourceName: s.name,
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	if err != nil {
		return fmt.Errorf("registering %s at %s: %w", s.name, kubelet, err)
	}
	return nil
}

// GetDevicePluginOptions says the server offers GetPreferredAllocation.
func (s *server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// ListAndWatch sends the device list, then again whenever it changes.
func (s *server) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	ctx := stream.Context()
	for {
		snap := s.current()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: snap.api}); err != nil {
			return fmt.Errorf("resource %s: sending device list: %w", s.name, err)
		}
		select {
		case <-snap.changed:
		case <-ctx.Done():
			return nil
		case <-s.ctx.Done():
			return nil
		}
	}
}

// GetPreferredAllocation picks devices for each container request.
func (s *server) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	set := s.current().set
	resp := &pluginapi.PreferredAllocationResponse{
		ContainerResponses: make([]*pluginapi.ContainerPreferredAllocationResponse, 0, len(req.GetContainerRequests())),
	}
	for i, cr := range req.GetContainerRequests() {
		ids, err := set.preferred(cr.GetAvailableDeviceIDs(), cr.GetMustIncludeDeviceIDs(), int(cr.GetAllocationSize()), s.deps.opts.ReplicaPolicy)
		if err != nil {
			return nil, status.Errorf(status.Code(err), "containerRequests[%d]: %s", i, status.Convert(err).Message())
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate tells the runtime how to give each container its devices.
func (s *server) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	if gate := s.deps.opts.Gate; gate != nil {
		if ok, reason := gate(s.name); !ok {
			s.deps.metrics.allocations.WithLabelValues(s.name, "unavailable").Inc()
			return nil, status.Errorf(codes.Unavailable, "resource %s is not available yet: %s", s.name, reason)
		}
	}
	set := s.current().set
	resp := &pluginapi.AllocateResponse{
		ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, 0, len(req.GetContainerRequests())),
	}
	for i, cr := range req.GetContainerRequests() {
		cresp, err := set.containerResponse(cr.GetDevicesIds(), s.deps.opts)
		if err != nil {
			result := "error"
			if status.Code(err) == codes.InvalidArgument {
				result = "invalid"
			}
			s.deps.metrics.allocations.WithLabelValues(s.name, result).Inc()
			return nil, status.Errorf(status.Code(err), "containerRequests[%d]: %s", i, status.Convert(err).Message())
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	s.deps.metrics.allocations.WithLabelValues(s.name, "ok").Inc()
	return resp, nil
}

// PreStartContainer is not required by this plugin and does nothing.
func (s *server) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
