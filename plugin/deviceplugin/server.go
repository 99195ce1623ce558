package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/featureplug/featureplug/discovery/fswatch"
)

// Registration timing.
const (
	// registerTimeout bounds one Register call to the kubelet.
	registerTimeout = 5 * time.Second
	// registerBackoffMin and registerBackoffMax bound the wait between
	// failed registration attempts; it doubles after each failure and
	// starts again from the minimum when a new kubelet socket appears.
	// A restarting kubelet binds its socket (the file appears, and the
	// manager asks for registration at once) a moment before it listens,
	// and a dial in between is refused: retries of 1, 2, 4, 8 ms ... catch
	// the listen within a millisecond or two, and the 10 retries of the
	// first second cost nothing next to the kubelet's own start. Past that
	// the wait keeps doubling up to the maximum.
	registerBackoffMin = time.Millisecond
	registerBackoffMax = 10 * time.Second
	// registerBackoffSteps: the doubling goes on until the maximum.
	registerBackoffSteps = math.MaxInt32
	// registerLogInterval is the least time between two log lines about
	// failed registrations of one resource: the first failure is logged at
	// once, later ones as a summary with their count.
	registerLogInterval = 30 * time.Second
)

// Results of featureplug_plugin_registrations_total.
const (
	regOK             = "ok"
	regError          = "error"
	regKubeletMissing = "kubelet-missing"
)

// KubeletSocket is the name of the kubelet's registration socket in the
// device-plugin directory.
const KubeletSocket = "kubelet.sock"

// serverDeps is what every server shares with its manager.
type serverDeps struct {
	opts    *Options
	log     *slog.Logger
	metrics *metrics
	// kubelet is the connection the servers register through.
	kubelet *kubeletConn
	// registered is called after each accepted registration
	// (Manager.readinessMayChange).
	registered func()
}

// snapshot is a server's current device set and ListAndWatch list. It is
// replaced, never changed; changed is closed when a newer snapshot holds a
// different list.
type snapshot struct {
	set *deviceSet
	api []*pluginapi.Device
	// bad[p] says physical device p of set is Unhealthy; nil when all
	// are healthy.
	bad     []bool
	changed chan struct{}
}

// server is the device-plugin server of one resource. Its gRPC instance is
// replaced on restart; its registration loop lives until stop.
type server struct {
	pluginapi.UnimplementedDevicePluginServer

	name string
	deps *serverDeps
	log  *slog.Logger

	ctx      context.Context
	cancel   context.CancelFunc
	kick     chan struct{}
	loopDone chan struct{}

	mu   sync.RWMutex
	snap *snapshot
	grpc *grpc.Server
	// socket is the path the server listens on (or last listened on): the
	// resource's first free socket slot (handover.go).
	socket string
	// registered reports whether the kubelet accepted the current
	// instance; regID is kubelet.sock as it was at that registration.
	registered bool
	regID      fswatch.ID
	// sockID is the socket file the current instance made.
	sockID fswatch.ID
	// gen counts restarts and kubelet losses, so a registration that
	// raced one of them is not taken as current.
	gen uint64

	// streams holds one token per open ListAndWatch stream, at most
	// maxListAndWatchStreams.
	streams chan struct{}
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
		streams:  make(chan struct{}, maxListAndWatchStreams),
	}
	api, bad, nbad := set.apiDevices(health)
	s.snap = &snapshot{set: set, api: api, bad: bad, changed: make(chan struct{})}
	deps.metrics.setDevices(name, len(api), nbad)
	deps.metrics.initRegistrations(name)
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

// serve listens on a socket of the resource that no other process serves
// (its last one first; handover.go) and serves a new gRPC instance.
func (s *server) serve() error {
	ln, path, err := listenSocket(s.deps.opts.KubeletDir, s.name, s.path())
	if err != nil {
		return fmt.Errorf("resource %s: %w", s.name, err)
	}
	id, _ := fswatch.Identify(path)
	g := grpc.NewServer(grpc.MaxRecvMsgSize(maxRequestBytes))
	pluginapi.RegisterDevicePluginServer(g, s)
	s.mu.Lock()
	s.grpc, s.sockID, s.socket = g, id, path
	s.mu.Unlock()
	go func() {
		if err := g.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("device-plugin server stopped serving", "socket", path, "err", err)
		}
	}()
	s.log.Info("serving device plugin", "socket", path)
	return nil
}

// ownsSocket reports whether the file at the server's socket path is the
// socket it made, by inode and change time: not when it is gone, nor when
// another process made a socket there since (ext4 gives a file made at
// once the inode just freed).
func (s *server) ownsSocket() bool {
	s.mu.RLock()
	path, own := s.socket, s.sockID
	s.mu.RUnlock()
	id, ok := fswatch.Identify(path)
	return ok && id == own
}

// path is the socket the server listens on, or last listened on.
func (s *server) path() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.socket
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

// stop ends the server for good and removes its socket, when it is still
// the one it made.
func (s *server) stop() {
	s.cancel()
	s.stopGRPC()
	<-s.loopDone
	s.mu.RLock()
	own, path := s.sockID, s.socket
	s.mu.RUnlock()
	if id, ok := fswatch.Identify(path); ok && id == own {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("removing socket", "socket", path, "err", err)
		}
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

// registeredWith reports whether the kubelet whose kubelet.sock is the
// file kubelet accepted the current instance.
func (s *server) registeredWith(kubelet fswatch.ID) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.registered && s.regID == kubelet
}

// serving reports whether a gRPC instance serves the socket.
func (s *server) serving() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.grpc != nil
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
	api, bad, nbad := set.apiDevices(health)
	s.mu.Lock()
	old := s.snap
	next := &snapshot{set: set, api: api, bad: bad, changed: old.changed}
	push := !sameAPIDevices(old.api, api)
	if push {
		next.changed = make(chan struct{})
	}
	s.snap = next
	s.mu.Unlock()
	if push {
		close(old.changed)
		s.log.Info("device list changed", "devices", len(api), "unhealthy", nbad)
	}
	s.deps.metrics.setDevices(s.name, len(api), nbad)
}

// registerLoop registers whenever asked, retrying failures with a capped
// exponential backoff, until the server stops. The first failure of a run
// of failures is logged at once; later ones only as a summary at most every
// registerLogInterval, and their end when a registration succeeds.
func (s *server) registerLoop() {
	defer close(s.loopDone)
	initial := wait.Backoff{Duration: registerBackoffMin, Factor: 2, Steps: registerBackoffSteps, Cap: registerBackoffMax}
	backoff := initial
	var retry *time.Timer
	var retryC <-chan time.Time
	failures := 0
	var firstFailure, lastLog time.Time
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.kick:
			backoff = initial
		case <-retryC:
		}
		if retry != nil {
			retry.Stop()
			retry, retryC = nil, nil
		}
		err := s.registerOnce(failures)
		if err == nil {
			backoff, failures = initial, 0
			continue
		}
		if s.ctx.Err() != nil {
			return
		}
		now := time.Now()
		delay := backoff.Step()
		failures++
		switch {
		case failures == 1:
			firstFailure, lastLog = now, now
			s.log.Warn("registration with the kubelet failed; retrying", "err", err, "retryIn", delay)
		case now.Sub(lastLog) >= registerLogInterval:
			lastLog = now
			s.log.Warn("registration with the kubelet still failing; retrying",
				"err", err, "failures", failures, "since", firstFailure.Format(time.RFC3339), "retryIn", delay)
		}
		retry = time.NewTimer(delay)
		retryC = retry.C
	}
}

// registerOnce registers the current instance unless it already is
// registered with the kubelet that owns kubelet.sock now. failures is the
// number of failed attempts before this one, for the log.
func (s *server) registerOnce(failures int) error {
	kubelet := filepath.Join(s.deps.opts.KubeletDir, KubeletSocket)
	id, ok := fswatch.Identify(kubelet)
	if !ok {
		s.mu.Lock()
		if s.registered {
			s.registered = false
			s.gen++
		}
		s.mu.Unlock()
		s.deps.metrics.registrations.WithLabelValues(s.name, regKubeletMissing).Inc()
		return fmt.Errorf("kubelet socket %s: %w", kubelet, os.ErrNotExist)
	}
	s.mu.Lock()
	if s.registered && s.regID != id {
		// kubelet.sock is another file now (told apart by its inode and
		// change time: ext4 gives a socket made again at once the old
		// inode): a kubelet restart whose events were missed. Not
		// registered with this one yet.
		s.registered = false
		s.gen++
	}
	gen, serving, done := s.gen, s.grpc != nil, s.registered
	s.mu.Unlock()
	if done || !serving {
		return nil
	}
	// A restarting kubelet removes every plugin socket. Registering before
	// the manager has re-created ours would make the kubelet's dial-back
	// fail and gRPC wait out its reconnect backoff (a second); the restart
	// asks for registration again once the socket is back.
	endpoint := s.path()
	if _, err := os.Stat(endpoint); err != nil {
		return fmt.Errorf("own socket not there yet: %w", err)
	}
	if err := s.register(kubelet, id, filepath.Base(endpoint)); err != nil {
		s.deps.metrics.registrations.WithLabelValues(s.name, regError).Inc()
		return err
	}
	s.deps.metrics.registrations.WithLabelValues(s.name, regOK).Inc()
	s.mu.Lock()
	current := s.gen == gen
	if current {
		s.registered = true
		s.regID = id
	}
	s.mu.Unlock()
	if current && s.deps.registered != nil {
		s.deps.registered()
	}
	if failures > 0 {
		s.log.Info("registered with the kubelet", "endpoint", filepath.Base(endpoint), "afterFailures", failures)
	} else {
		s.log.Info("registered with the kubelet", "endpoint", filepath.Base(endpoint))
	}
	return nil
}

// register sends one RegisterRequest for the socket file endpoint to the
// kubelet whose socket is kubelet (the file id), over the connection the
// servers share.
func (s *server) register(kubelet string, id fswatch.ID, endpoint string) error {
	conn, err := s.deps.kubelet.get(kubelet, id)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(s.ctx, registerTimeout)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     endpoint,
		ResourceName: s.name,
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	if err != nil {
		s.deps.kubelet.drop(conn)
		return fmt.Errorf("registering %s at %s: %w", s.name, kubelet, err)
	}
	return nil
}

// GetDevicePluginOptions says the server offers GetPreferredAllocation.
func (s *server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// ListAndWatch sends the device list, then again whenever it changes. A
// stream over maxListAndWatchStreams open ones is refused with
// ResourceExhausted, naming the bound.
func (s *server) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		s.deps.metrics.streamsRefused.WithLabelValues(s.name).Inc()
		return status.Errorf(codes.ResourceExhausted,
			"resource %s: %d ListAndWatch streams are open, the most one device-plugin server keeps (the kubelet needs one); close one first",
			s.name, maxListAndWatchStreams)
	}
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
	snap := s.current()
	resp := &pluginapi.PreferredAllocationResponse{
		ContainerResponses: make([]*pluginapi.ContainerPreferredAllocationResponse, 0, len(req.GetContainerRequests())),
	}
	for i, cr := range req.GetContainerRequests() {
		ids, err := snap.set.pick(cr.GetAvailableDeviceIDs(), cr.GetMustIncludeDeviceIDs(), int(cr.GetAllocationSize()), s.deps.opts.ReplicaPolicy, snap.bad)
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
	snap := s.current()
	resp := &pluginapi.AllocateResponse{
		ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, 0, len(req.GetContainerRequests())),
	}
	for i, cr := range req.GetContainerRequests() {
		cresp, err := snap.set.allocate(cr.GetDevicesIds(), s.deps.opts, snap.bad)
		if err != nil {
			result := "error"
			switch status.Code(err) {
			case codes.InvalidArgument:
				result = "invalid"
			case codes.FailedPrecondition:
				result = "unhealthy"
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
