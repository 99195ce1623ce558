package mps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/featureplug/featureplug/rules/plan"
)

// Defaults of Options.
const (
	// DefaultRoot is the MPS root; it is the plugin package's default MPS
	// root, from which Allocate mounts the pipe directories.
	DefaultRoot = plan.DefaultMPSRoot
	// DefaultCheckInterval is the period of the liveness check.
	DefaultCheckInterval = 5 * time.Second
	// DefaultCommandTimeout bounds every run of the control program.
	DefaultCommandTimeout = 10 * time.Second
)

// Reasons Ready gives while a daemon is not up.
const (
	reasonStarting  = "daemon starting"
	reasonRestarted = "daemon restarting after exit: "
	reasonFailed    = "daemon start failed: "
)

// Options configure a Supervisor. The zero value is usable.
type Options struct {
	// Root holds one directory per resource, <Root>/<resource with '/' as
	// '_'>, with the daemon's pipe and log directories (default
	// DefaultRoot). It must be absolute.
	Root string
	// ControlBinary is the MPS control program: a name looked up in PATH
	// (default DefaultControlBinary) or an absolute path, for example under
	// a driver root. It is looked up again at every start attempt, so a
	// driver installed after the agent starts is picked up.
	ControlBinary string
	// Logger receives the supervisor's logs (default: discarded).
	Logger *slog.Logger
	// Registerer, when set, receives the supervisor's metrics.
	Registerer prometheus.Registerer
	// Backoff paces restarts of daemons that died or failed to start
	// (default DefaultBackoff); a daemon that stayed up a while starts
	// over at its first step.
	Backoff wait.Backoff
	// CheckInterval is the period of the liveness check (default
	// DefaultCheckInterval).
	CheckInterval time.Duration
	// CommandTimeout bounds every run of the control program (default
	// DefaultCommandTimeout).
	CommandTimeout time.Duration
	// ComputeMode, when set, switches the GPUs of MPS-shared resources to
	// EXCLUSIVE_PROCESS before their daemon starts and restores their
	// previous mode when they are no longer MPS-shared or on Stop, as
	// NVIDIA's MPS set-up does. A GPU it cannot switch is logged once and
	// shows as 0 in featureplug_mps_compute_mode_exclusive; MPS still works
	// in DEFAULT mode. Nil leaves compute modes alone.
	ComputeMode ComputeModeFunc
	// DaemonShm is the /dev/shm the daemons see (default
	// DefaultDaemonShm). The supervisor checks that it is the shared memory
	// directory that Allocate mounts into MPS clients
	// (plan.MPSLayout.ShmDir), and warns when it is not.
	DaemonShm string
	// OnChange, when set, is called with a resource's name whenever its
	// readiness or reason changes, so the agent can advertise or withdraw
	// the resource. It runs on the resource's supervising goroutine with
	// no lock held: it may call Ready, must return
	// promptly, and must not call Apply or Stop.
	OnChange func(resource string)
}

// Supervisor runs one nvidia-cuda-mps-control daemon per MPS-shared
// resource: it starts and configures each daemon, checks that it stays
// alive, restarts it with backoff when it dies, and quits it when its
// resource goes away. Its methods are safe for concurrent use.
type Supervisor struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics
	// env is the agent's environment, the base of every daemon's.
	env []string
	// running counts supervising goroutines, stopping ones included.
	running sync.WaitGroup

	mu            sync.Mutex
	workers       map[string]*worker
	stopped       bool
	binaryMissing bool

	// modeMu guards modes, used by Apply and Stop.
	modeMu sync.Mutex
	modes  computeModes

	// shmMu guards the shared memory directory's state (shm.go).
	shmMu     sync.Mutex
	shmReady  bool
	shmShared bool
}

// New returns a Supervisor that runs no daemon until Apply. Bad options
// get an error naming the field and its value.
func New(opts Options) (*Supervisor, error) {
	if opts.Root == "" {
		opts.Root = DefaultRoot
	}
	if opts.ControlBinary == "" {
		opts.ControlBinary = DefaultControlBinary
	}
	if opts.CheckInterval == 0 {
		opts.CheckInterval = DefaultCheckInterval
	}
	if opts.CommandTimeout == 0 {
		opts.CommandTimeout = DefaultCommandTimeout
	}
	if opts.DaemonShm == "" {
		opts.DaemonShm = DefaultDaemonShm
	}
	var errs []error
	if !filepath.IsAbs(opts.Root) {
		errs = append(errs, fmt.Errorf("root: %q is not an absolute path", opts.Root))
	}
	if strings.Contains(opts.ControlBinary, "/") && !filepath.IsAbs(opts.ControlBinary) {
		errs = append(errs, fmt.Errorf("controlBinary: %q is neither a name looked up in PATH nor an absolute path", opts.ControlBinary))
	}
	if opts.CheckInterval < 0 {
		errs = append(errs, fmt.Errorf("checkInterval: %v is negative", opts.CheckInterval))
	}
	if opts.CommandTimeout < 0 {
		errs = append(errs, fmt.Errorf("commandTimeout: %v is negative", opts.CommandTimeout))
	}
	if opts.Backoff.Duration < 0 || opts.Backoff.Cap < 0 {
		errs = append(errs, fmt.Errorf("backoff: %+v has a negative duration", opts.Backoff))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("MPS supervisor options: %w", err)
	}
	opts.Root = filepath.Clean(opts.Root)
	if opts.Backoff.Duration == 0 {
		opts.Backoff = DefaultBackoff
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Supervisor{
		opts:    opts,
		log:     opts.Logger,
		metrics: m,
		env:     os.Environ(),
		workers: make(map[string]*worker),
	}
	s.modes = computeModes{set: opts.ComputeMode, s: s, held: map[string]heldMode{}, warned: map[string]bool{}}
	return s, nil
}

// Apply makes the running daemons match daemons: it starts a daemon for
// each new resource, quits the daemons of resources no longer listed, and
// restarts the daemon of a resource whose devices or limits changed.
// Daemons of unchanged resources (device order aside) are left alone.
//
// Starting happens in the background (see Ready and Options.OnChange);
// Apply waits until removed daemons have quit, or until ctx is done, in
// which case they finish quitting in the background and Apply returns
// ctx's error. Invalid input (an empty or duplicate resource, no devices,
// a bad UUID, a percentage outside 0..100) changes nothing and returns an
// error naming each offending field.
func (s *Supervisor) Apply(ctx context.Context, daemons []Daemon) error {
	if err := validateDaemons(daemons); err != nil {
		return fmt.Errorf("MPS daemons: %w", err)
	}
	want := make(map[string]Daemon, len(daemons))
	gpus := make(map[string]bool)
	for _, d := range daemons {
		want[d.Resource] = d.normalized()
		for _, dev := range d.Devices {
			gpus[dev.UUID] = true
		}
	}

	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if stopped {
		return errors.New("MPS supervisor is stopped")
	}
	// EXCLUSIVE_PROCESS before any daemon starts on a GPU, as NVIDIA's
	// daemon set-up does; restored below once the daemons that leave have
	// quit.
	s.modeMu.Lock()
	defer s.modeMu.Unlock()
	s.modes.hold(slices.Sorted(maps.Keys(gpus)))

	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return errors.New("MPS supervisor is stopped")
	}
	stopping := make(map[string]*worker)
	for res, w := range s.workers {
		if d, keep := want[res]; keep && d.equal(w.daemon) {
			continue
		} else if !keep {
			s.metrics.forget(res)
		}
		delete(s.workers, res)
		w.cancel()
		stopping[res] = w
	}
	var started []string
	for _, res := range slices.Sorted(maps.Keys(want)) {
		if _, running := s.workers[res]; running {
			continue
		}
		var after <-chan struct{}
		if old, ok := stopping[res]; ok {
			after = old.done
		}
		s.startWorker(want[res], after)
		started = append(started, res)
	}
	s.mu.Unlock()

	for _, res := range slices.Sorted(maps.Keys(stopping)) {
		_, restarted := want[res]
		s.log.Info("stopping MPS control daemon", "resource", res, "changed", restarted)
	}
	for _, res := range started {
		s.log.Info("starting MPS control daemon", "resource", res, "devices", strings.Join(want[res].uuids(), ","))
	}
	for _, res := range slices.Sorted(maps.Keys(stopping)) {
		select {
		case <-stopping[res].done:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the MPS control daemon of %s to quit: %w", res, ctx.Err())
		}
	}
	s.modes.release(gpus)
	if len(want) == 0 {
		s.cleanShm()
	}
	return nil
}

// startWorker creates and starts the supervising goroutine of d; after, if
// not nil, is closed once the resource's previous daemon has quit. The
// caller holds s.mu.
func (s *Supervisor) startWorker(d Daemon, after <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker{
		s:       s,
		daemon:  d,
		pipeDir: s.pipeDir(d.Resource),
		logDir:  s.logDir(d.Resource),
		cancel:  cancel,
		done:    make(chan struct{}),
		after:   after,
		reason:  reasonStarting,
	}
	w.ctl = controller{
		env:     daemonEnv(s.env, w.pipeDir, w.logDir, d.uuids()),
		timeout: s.opts.CommandTimeout,
	}
	s.workers[d.Resource] = w
	s.metrics.add(d.Resource)
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		w.run(ctx)
	}()
}

// Ready reports whether resource's daemon is up and configured, so the
// resource may be advertised; reason says why not, e.g.
// "nvidia-cuda-mps-control not found in PATH" or "daemon restarting after
// exit: ...". It has the signature of the plugin manager's Gate.
func (s *Supervisor) Ready(resource string) (ok bool, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, found := s.workers[resource]
	if !found {
		return false, fmt.Sprintf("no MPS control daemon is configured for %s", resource)
	}
	return w.ready, w.reason
}

// Layout returns the MPS directory layout the daemons run in (below
// Options.Root): the pipe and shm directories MPS clients mount, which a
// DRA device's CDI spec entry names.
func (s *Supervisor) Layout() plan.MPSLayout { return plan.MPSLayout{Root: s.opts.Root} }

// pipeDir returns the pipe directory of resource's daemon in the one MPS
// layout (plan.MPSLayout): clients need it in CUDA_MPS_PIPE_DIRECTORY and
// mounted, and the device plugins' Allocate mounts the same path.
func (s *Supervisor) pipeDir(resource string) string {
	return plan.MPSLayout{Root: s.opts.Root}.PipeDir(resource)
}

// shmDir returns the shared memory directory of the daemons and their
// clients (plan.MPSLayout).
func (s *Supervisor) shmDir() string {
	return plan.MPSLayout{Root: s.opts.Root}.ShmDir()
}

// logDir returns the log directory of resource's daemon (plan.MPSLayout).
func (s *Supervisor) logDir(resource string) string {
	return plan.MPSLayout{Root: s.opts.Root}.LogDir(resource)
}

// Stop quits every daemon and returns once they are gone, then restores
// the compute modes it changed and cleans the shared memory directory.
// Apply fails afterwards; Stop may be called more than once.
func (s *Supervisor) Stop() {
	s.mu.Lock()
	s.stopped = true
	for res, w := range s.workers {
		w.cancel()
		s.metrics.forget(res)
		delete(s.workers, res)
	}
	s.mu.Unlock()
	s.running.Wait()
	s.modeMu.Lock()
	s.modes.release(nil)
	s.modeMu.Unlock()
	s.cleanShm()
}

// setState records a worker's readiness; OnChange hears of a change of the
// current worker of a resource.
func (s *Supervisor) setState(w *worker, ready bool, reason string) {
	res := w.daemon.Resource
	s.mu.Lock()
	changed := w.ready != ready || w.reason != reason
	w.ready, w.reason = ready, reason
	current := s.workers[res] == w
	if current {
		up := 0.0
		if ready {
			up = 1
		}
		s.metrics.up.WithLabelValues(res).Set(up)
	}
	s.mu.Unlock()
	if changed && current && s.opts.OnChange != nil {
		s.opts.OnChange(res)
	}
}

// countRestart counts a daemon found dead.
func (s *Supervisor) countRestart(w *worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workers[w.daemon.Resource] == w {
		s.metrics.restarts.WithLabelValues(w.daemon.Resource).Inc()
	}
}

// countStartFailure counts a failed start attempt.
func (s *Supervisor) countStartFailure(w *worker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workers[w.daemon.Resource] == w {
		s.metrics.startFailures.WithLabelValues(w.daemon.Resource).Inc()
	}
}

// noteBinary records whether the control binary was found, logging only
// when that changes.
func (s *Supervisor) noteBinary(err error) {
	missing := errors.Is(err, ErrControlBinaryNotFound)
	s.mu.Lock()
	was := s.binaryMissing
	s.binaryMissing = missing
	s.mu.Unlock()
	if missing {
		s.metrics.binaryMissing.Set(1)
	} else {
		s.metrics.binaryMissing.Set(0)
	}
	switch {
	case missing && !was:
		s.log.Error("MPS control binary is missing; MPS-shared resources are not advertised", "error", err.Error())
	case !missing && was:
		s.log.Info("MPS control binary found", "binary", s.opts.ControlBinary)
	}
}
