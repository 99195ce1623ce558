package dra

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

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/clock"

	"github.com/featureplug/featureplug/discovery/fswatch"
)

// Host paths of the kubelet side of the driver.
const (
	// DefaultRegistryDir is where the kubelet's plugin watcher looks for
	// registration sockets.
	DefaultRegistryDir = "/var/lib/kubelet/plugins_registry"
	// DefaultPluginDir is the driver's own directory, holding the socket
	// the kubelet calls for NodePrepareResources and
	// NodeUnprepareResources.
	DefaultPluginDir = "/var/lib/kubelet/plugins/" + DriverName
	// PluginSocketName is the name of the DRA service's socket in the
	// plugin directory.
	PluginSocketName = "dra.sock"
)

// Request limits of the DRA service.
const (
	// maxClaimsPerRequest bounds the claims of one prepare or unprepare
	// call. The kubelet sends the claims of one pod that this driver
	// allocated; each of them holds at least one of this node's devices
	// (a few dozen GPUs and MIG devices, times the sharing replicas the
	// rules cap), and each costs an API request to prepare. 256 is far
	// above any real pod.
	maxClaimsPerRequest = 256
	// maxRequestBytes caps the size of one gRPC request: 256 claims of
	// three names of at most 253 bytes take under 200 kB. gRPC answers
	// a larger request with ResourceExhausted before it is decoded.
	maxRequestBytes = 1 << 20
	// maxNameBytes bounds a claim's namespace, name and UID (a DNS
	// subdomain is at most 253 bytes).
	maxNameBytes = 253
	// maxSocketPath is the longest unix socket path Linux takes.
	maxSocketPath = 107
)

// ResourceClaims reads the ResourceClaims (resource.k8s.io/v1) of one
// namespace and writes their status: the part of client-go's typed
// ResourceClaimInterface the driver uses, which that interface and the
// agent's API client satisfy. Get returns an error that
// apierrors.IsNotFound recognizes for a claim that does not exist; Patch
// with subresource "status" writes the status (server-side apply).
type ResourceClaims interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*resourceapi.ResourceClaim, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*resourceapi.ResourceClaim, error)
}

// NodeOptions configure a Node.
type NodeOptions struct {
	// NodeName is this node; the driver's pool is named after it.
	NodeName string
	// RegistryDir is the kubelet's plugin registry directory (default
	// DefaultRegistryDir).
	RegistryDir string
	// PluginDir is the directory of the DRA service's socket (default
	// DefaultPluginDir).
	PluginDir string
	// StateDir holds the prepared-claims checkpoint (CheckpointFile); ""
	// keeps prepared claims in memory only, so a restart forgets them.
	StateDir string
	// Instance names this agent's sockets for rolling updates (the pod's
	// UID); "" keeps the fixed names (RegistrationSocketName,
	// PluginSocketName); see registrationSocketName.
	Instance string
	// Claims reads ResourceClaims; required.
	Claims func(namespace string) ResourceClaims
	// Table returns the devices the DRA sink publishes now; required.
	Table func() *Table
	// Watcher watches the two directories (default: a watcher of the
	// Node's own, run by Run); its periodic check catches what events
	// miss.
	Watcher *fswatch.Watcher
	// Logger receives the logs; nil discards them.
	Logger *slog.Logger
	// Registerer takes the metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
	// Clock drives the device health heartbeat (HealthHeartbeat); nil
	// is the real clock.
	Clock clock.WithTicker
	// Partition prepares the devices of GPUs partitioned on demand; its
	// zero value refuses them.
	Partition Partitioner
}

// Node is the kubelet-facing half of the DRA driver: the plugin
// registration server on RegistrationSocketName in the registry
// directory, and the DRA service (k8s.io/kubelet/pkg/apis/dra v1 and
// v1beta1) on PluginSocketName in the plugin directory, which prepares a
// claim's devices as CDI device IDs and checkpoints prepared claims,
// beside the device health service (DRAResourceHealth v1 and v1alpha1,
// health.go) that streams the Table's device health to the kubelet. A
// socket deleted or replaced while it runs is made again. Create it with
// NewNode and run it with Run; its methods are safe for concurrent use.
type Node struct {
	opts             NodeOptions
	log              *slog.Logger
	metrics          *nodeMetrics
	ckpt             *checkpoint
	regPath, draPath string

	// mu serializes prepare and unprepare and guards claims.
	mu     sync.Mutex
	claims map[string]PreparedClaim

	// sockMu guards the sockets and running.
	sockMu   sync.Mutex
	running  bool
	reg, dra *socket
	// registryMissing is set while the registry directory is gone (logged
	// once).
	registryMissing bool

	// health holds the DRAResourceHealth streams' state (health.go).
	health healthState
	// created are the MIG devices created for the claims (dynmig_prepare.go).
	created createdSet
	// pending are the MIG devices prepares are creating, by claim UID,
	// and journal their file (dynmig_journal.go); guarded by mu.
	pending map[string][]PendingMIG
	journal *journal

	// statusMu guards statusPending: the UIDs of prepared claims whose
	// status write failed, which retryStatuses writes again.
	statusMu      sync.Mutex
	statusPending map[string]bool
}

// NewNode checks the options and reads the checkpoint. A checkpoint whose
// content is unusable is logged (naming the file), moved aside and
// replaced by an empty one; one that cannot be read is an error.
func NewNode(opts NodeOptions) (*Node, error) {
	if opts.NodeName == "" {
		return nil, errors.New("DRA node server: no node name")
	}
	if opts.Claims == nil {
		return nil, errors.New("DRA node server: no ResourceClaim reader")
	}
	if opts.Table == nil {
		return nil, errors.New("DRA node server: no device table")
	}
	if opts.RegistryDir == "" {
		opts.RegistryDir = DefaultRegistryDir
	}
	if opts.PluginDir == "" {
		opts.PluginDir = DefaultPluginDir
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	n := &Node{
		opts:    opts,
		log:     opts.Logger,
		ckpt:    newCheckpoint(opts.StateDir),
		regPath: filepath.Join(opts.RegistryDir, registrationSocketName(opts.RegistryDir, opts.Instance)),
		draPath: filepath.Join(opts.PluginDir, pluginSocketName(opts.Instance)),
		claims:  map[string]PreparedClaim{},
		pending: map[string][]PendingMIG{},
		journal: newJournal(opts.StateDir),

		statusPending: map[string]bool{},
	}
	for _, p := range []struct{ flag, path string }{{"registry directory", n.regPath}, {"plugin directory", n.draPath}} {
		if len(p.path) > maxSocketPath {
			return nil, fmt.Errorf("DRA %s: socket path %s is %d bytes, more than the %d a unix socket path may have",
				p.flag, p.path, len(p.path), maxSocketPath)
		}
	}
	var err error
	if n.metrics, err = newNodeMetrics(opts.Registerer); err != nil {
		return nil, err
	}
	if n.ckpt != nil {
		claims, err := n.ckpt.load()
		switch {
		case errors.Is(err, errCorrupt):
			n.log.Error("DRA checkpoint unusable; starting with no prepared claims (the kubelet prepares them again)", "err", err)
			if err := n.ckpt.write(claims); err != nil {
				return nil, err
			}
		case err != nil:
			return nil, err
		default:
			n.claims = claims
			n.created.addClaims(claims)
			if len(claims) > 0 {
				n.log.Info("restored prepared DRA claims from the checkpoint", "file", n.ckpt.path, "claims", len(claims))
			}
		}
	}
	pending, err := n.journal.load()
	if err != nil {
		return nil, err
	}
	for _, p := range pending {
		n.pending[p.UID] = append(n.pending[p.UID], p)
		n.created.addPlacement(placementKey(p.MIG.GPU, p.MIG))
	}
	if len(pending) > 0 {
		n.log.Info("MIG devices a prepare was creating when the agent stopped; the kubelet's retry finishes them, its unprepare destroys them", "pending", len(pending))
	}
	n.metrics.preparedClaims.Set(float64(len(n.claims)))
	return n, nil
}

// PreparedClaims returns how many claims are prepared now (restored from
// the checkpoint, or prepared since).
func (n *Node) PreparedClaims() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.claims)
}

// RegistrationSocket returns the path of the registration socket.
func (n *Node) RegistrationSocket() string { return n.regPath }

// PluginSocket returns the path of the DRA service's socket.
func (n *Node) PluginSocket() string { return n.draPath }

// Run serves both sockets until ctx ends: the DRA service first, so that
// it answers when the kubelet learns of it from the registration socket.
// The two directories are watched (Options.Watcher): a socket deleted or
// replaced is made again (the plugin directory too; the
// registry directory belongs to the kubelet and is waited for). Run
// returns nil when ctx ends, after removing its sockets, or an error at
// once when a socket cannot be made at start; it may then be run again.
func (n *Node) Run(ctx context.Context) error {
	n.sockMu.Lock()
	if n.running {
		n.sockMu.Unlock()
		return errors.New("DRA node server: Run called while it runs")
	}
	n.running = true
	n.dra = &socket{name: "dra", path: n.draPath, register: n.registerDRA}
	n.reg = &socket{name: "registration", path: n.regPath, register: n.registerRegistration}
	err := n.startLocked()
	n.sockMu.Unlock()
	defer n.shutdown()
	if err != nil {
		return err
	}
	n.log.Info("serving the DRA driver to the kubelet", "driver", DriverName,
		"registrationSocket", n.regPath, "pluginSocket", n.draPath, "services", supportedServices)
	n.sweepStale()
	retried := make(chan struct{})
	go func() {
		defer close(retried)
		n.retryStatuses(ctx)
	}()
	defer func() { <-retried }()

	w := n.opts.Watcher
	if w == nil {
		w = fswatch.New(fswatch.Options{Logger: n.log})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = w.Run(ctx)
		}()
		defer func() { <-done }()
	}
	defer w.Dir(n.opts.PluginDir, "DRA plugin directory", n.check, nil)()
	defer w.Dir(n.opts.RegistryDir, "kubelet plugin registry directory", n.check, nil)()
	<-ctx.Done()
	return nil
}

// startLocked makes both directories and sockets.
func (n *Node) startLocked() error {
	for _, dir := range []string{n.opts.PluginDir, n.opts.RegistryDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("DRA node server: creating %s: %w", dir, err)
		}
	}
	for _, s := range []*socket{n.dra, n.reg} {
		if err := s.start(); err != nil {
			return err
		}
		n.metrics.socketStarts.WithLabelValues(s.name).Inc()
	}
	return nil
}

// check makes again a socket that was deleted or replaced: the DRA
// service's (with its directory), and the registration socket while the
// registry directory exists. The file watcher calls it after a change in
// either directory and at every periodic check.
func (n *Node) check(bool) {
	n.sockMu.Lock()
	defer n.sockMu.Unlock()
	if !n.running {
		return
	}
	if !n.dra.present() {
		n.log.Warn("DRA service socket deleted or replaced; making it again", "socket", n.draPath)
		if err := os.MkdirAll(n.opts.PluginDir, 0o750); err != nil {
			n.log.Error("creating the DRA plugin directory", "dir", n.opts.PluginDir, "err", err)
		} else if err := n.dra.restart(); err != nil {
			n.log.Error("making the DRA service socket again", "socket", n.draPath, "err", err)
		} else {
			n.metrics.socketStarts.WithLabelValues(n.dra.name).Inc()
		}
	}
	if n.reg.present() {
		return
	}
	if !dirExists(n.opts.RegistryDir) {
		if !n.registryMissing {
			n.log.Warn("kubelet plugin registry directory missing; registering again when it is back", "dir", n.opts.RegistryDir)
			n.registryMissing = true
			n.metrics.registeredNow.Set(0)
		}
		return
	}
	n.registryMissing = false
	n.log.Warn("DRA registration socket deleted or replaced; making it again so that the kubelet registers the driver again", "socket", n.regPath)
	n.metrics.registeredNow.Set(0)
	if err := n.reg.restart(); err != nil {
		n.log.Error("making the DRA registration socket again", "socket", n.regPath, "err", err)
		return
	}
	n.metrics.socketStarts.WithLabelValues(n.reg.name).Inc()
}

// shutdown stops both servers and removes their sockets (the registration
// socket first, so that the kubelet stops using the driver before its
// service goes; with an Instance, handoverGrace before it goes).
func (n *Node) shutdown() {
	n.sockMu.Lock()
	defer n.sockMu.Unlock()
	n.running = false
	n.reg.stop()
	if n.opts.Instance != "" && n.dra != nil && n.dra.srv != nil {
		n.log.Info("DRA registration socket removed; serving the kubelet's calls a moment longer while it turns to the other agent",
			"for", handoverGrace)
		time.Sleep(handoverGrace)
	}
	n.dra.stop()
	n.metrics.registeredNow.Set(0)
}

// registerDRA registers the DRA service, v1 and v1beta1, and the device
// health service, v1 and v1alpha1, on srv.
func (n *Node) registerDRA(srv *grpc.Server) {
	svc := &draService{n: n}
	drapbv1.RegisterDRAPluginServer(srv, svc)
	drapbv1beta1.RegisterDRAPluginServer(srv, drapbv1beta1.V1ServerWrapper{DRAPluginServer: svc})
	n.registerHealth(srv)
}

// registerRegistration registers the plugin registration service on srv.
func (n *Node) registerRegistration(srv *grpc.Server) {
	registerapi.RegisterRegistrationServer(srv, &registrationServer{endpoint: n.draPath, log: n.log, metrics: n.metrics})
}

// socket is one gRPC server on a unix socket that is made again when its
// file is lost.
type socket struct {
	name     string
	path     string
	register func(*grpc.Server)

	srv *grpc.Server
	// id is the socket file as made, to tell it from a replacement (by
	// inode and change time).
	id fswatch.ID
}

// start removes whatever is at the path and serves a new gRPC server
// there. The file exists from bind, a moment before the listen: a peer
// that dials the instant it sees the file may be refused once. The
// kubelet is not: its plugin watcher only records the new file, and its
// reconciler calls GetInfo on its next pass. (Listening under a hidden
// name and renaming it into place would close that moment, but the
// kubelet's watcher then logs an error for the hidden name it could not
// stat any more, at every registration.)
func (s *socket) start() error {
	if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("DRA %s socket: removing the old %s: %w", s.name, s.path, err)
	}
	ln, err := net.Listen("unix", s.path)
	if err != nil {
		return fmt.Errorf("DRA %s socket: %w", s.name, err)
	}
	// The file is removed by stop, and only while it is still this one:
	// the listener must not remove a socket made again at the same path.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	id, ok := fswatch.Identify(s.path)
	if !ok {
		_ = ln.Close()
		return fmt.Errorf("DRA %s socket: %s vanished as it was made", s.name, s.path)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(maxRequestBytes))
	s.register(srv)
	go func() { _ = srv.Serve(ln) }() // returns once srv is stopped
	s.srv, s.id = srv, id
	return nil
}

// restart serves a new server on a new socket, then stops the old server
// (its connections end; the kubelet reconnects to the path).
func (s *socket) restart() error {
	old := s.srv
	if err := s.start(); err != nil {
		return err
	}
	if old != nil {
		old.Stop()
	}
	return nil
}

// present reports whether the socket file made last is still at the
// path.
func (s *socket) present() bool {
	if s.id == (fswatch.ID{}) {
		return false
	}
	id, ok := fswatch.Identify(s.path)
	return ok && id == s.id
}

// stop stops the server and removes its socket if it is still the one it
// made. It may be called on a nil or never started socket.
func (s *socket) stop() {
	if s == nil || s.srv == nil {
		return
	}
	s.srv.Stop()
	if s.present() {
		_ = os.Remove(s.path)
	}
	s.srv, s.id = nil, fswatch.ID{}
}

// dirExists reports whether path is a directory.
func dirExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}
