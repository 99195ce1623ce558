package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules"
)

// resyncInterval is how often Run checks, besides watching, that every
// server's socket exists, every resource of the plan is served and every
// server is registered: a safety net for missed file-system events.
const resyncInterval = 30 * time.Second

// Manager runs one device-plugin server per resource of the current Plan.
// Create it with NewManager, hand it Plans with Apply and health events with
// Health, and run it with Run. All methods are safe for concurrent use.
type Manager struct {
	opts    Options
	deps    serverDeps
	metrics *metrics
	health  *healthTracker
	kubelet string

	mu       sync.Mutex
	state    managerState
	plan     *rules.Plan
	servers  map[string]*server // by resource name
	bySocket map[string]*server
	// first holds the resource names of the first Plan; ready latches once
	// all of them were registered.
	first []string
	ready bool
}

// managerState is where a Manager is in its life.
type managerState int

const (
	stateNew managerState = iota
	stateRunning
	stateStopped
)

// NewManager checks the options and returns a Manager that serves nothing
// until Run is called.
func NewManager(opts Options) (*Manager, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	met, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		opts:     o,
		metrics:  met,
		kubelet:  filepath.Join(o.KubeletDir, KubeletSocket),
		servers:  map[string]*server{},
		bySocket: map[string]*server{},
	}
	m.deps = serverDeps{opts: &m.opts, log: o.Logger, metrics: met}
	m.health = newHealthTracker(o.Clock, o.HealthRecovery, func(keys []string) {
		o.Logger.Info("devices recovered after a quiet period", "devices", keys, "quietPeriod", o.HealthRecovery)
		m.refreshHealth()
	})
	return m, nil
}

// Apply makes plan the served one: servers start for new resources and stop
// for removed ones; a resource whose devices or sharing changed gets the new
// list pushed on its open ListAndWatch streams, without re-registering;
// unchanged resources are not touched. An invalid plan changes nothing and
// returns an error naming the resource, field and value. Plans applied
// before Run are served when Run starts.
func (m *Manager) Apply(plan *rules.Plan) error {
	if err := validatePlan(plan); err != nil {
		m.metrics.applies.WithLabelValues("invalid").Inc()
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == stateStopped {
		return errors.New("plugin manager: Apply after Run returned")
	}
	m.metrics.applies.WithLabelValues("ok").Inc()
	if m.first == nil {
		m.first = make([]string, 0, len(plan.Resources))
		for _, r := range plan.Resources {
			m.first = append(m.first, r.Name)
		}
	}
	m.plan = plan
	if m.state == stateNew {
		return nil
	}
	return m.applyLocked()
}

// validatePlan checks every resource of a plan.
func validatePlan(plan *rules.Plan) error {
	if plan == nil {
		return errors.New("plugin: nil plan")
	}
	var errs []error
	names := make(map[string]int, len(plan.Resources))
	for i := range plan.Resources {
		r := &plan.Resources[i]
		if j, dup := names[r.Name]; dup {
			errs = append(errs, fmt.Errorf("resources[%d].name: %q repeats resources[%d]", i, r.Name, j))
		}
		names[r.Name] = i
		if err := validateResource(i, r); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("plugin: invalid plan: %w", errors.Join(errs...))
	}
	return nil
}

// applyLocked brings the servers in line with m.plan. It keeps going past a
// resource that fails to start and returns the failures.
func (m *Manager) applyLocked() error {
	want := make(map[string]bool, len(m.plan.Resources))
	for _, r := range m.plan.Resources {
		want[r.Name] = true
	}
	for name, s := range m.servers {
		if !want[name] {
			delete(m.servers, name)
			delete(m.bySocket, s.socket)
			s.stop()
			m.metrics.forget(name)
		}
	}
	health := m.health.unhealthyFunc()
	var errs []error
	for _, r := range m.plan.Resources {
		if s, ok := m.servers[r.Name]; ok {
			if !s.current().set.sameAs(r, m.plan.Links) {
				s.setDevices(newDeviceSet(r, m.plan.Links), health)
			}
			continue
		}
		socket, err := SocketPath(m.opts.KubeletDir, r.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("resource %s: %w", r.Name, err))
			continue
		}
		s := newServer(r.Name, socket, newDeviceSet(r, m.plan.Links), health, &m.deps)
		if err := s.start(); err != nil {
			s.cancel()
			m.metrics.forget(r.Name)
			errs = append(errs, err)
			continue
		}
		m.servers[r.Name] = s
		m.bySocket[socket] = s
	}
	return errors.Join(errs...)
}

// Health consumes one critical health event: the GPU's devices (with their
// MIG devices and replicas) or the one MIG device (with its replicas) turn
// Unhealthy on every resource, and Healthy again after the quiet period
// without further events.
func (m *Manager) Health(ev discovery.HealthEvent) {
	if ev.GPUUUID == "" && ev.MIGUUID == "" {
		m.opts.Logger.Warn("ignoring a health event that names no device", "kind", ev.Kind, "xid", ev.XID)
		return
	}
	m.metrics.healthEvents.WithLabelValues(string(ev.Kind), xidLabel(ev.XID)).Inc()
	newly := m.health.record(ev)
	m.opts.Logger.Warn("device unhealthy", "gpu", ev.GPUUUID, "mig", ev.MIGUUID, "kind", ev.Kind, "xid", ev.XID)
	if newly {
		m.refreshHealth()
	}
}

// WatchHealth feeds events from ch to Health until ctx is done or ch is
// closed.
func (m *Manager) WatchHealth(ctx context.Context, ch <-chan discovery.HealthEvent) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-ch:
			if !ok {
				return
			}
			m.Health(ev)
		}
	}
}

// refreshHealth recomputes every server's list with the current health.
func (m *Manager) refreshHealth() {
	m.mu.Lock()
	defer m.mu.Unlock()
	health := m.health.unhealthyFunc()
	for _, s := range m.servers {
		s.setDevices(s.current().set, health)
	}
}

// Registered reports whether the kubelet accepted the server of resource.
func (m *Manager) Registered(resource string) bool {
	m.mu.Lock()
	s := m.servers[resource]
	m.mu.Unlock()
	return s != nil && s.isRegistered()
}

// Ready reports whether every resource of the first Plan (still in the
// plan) has been registered with the kubelet. Once true it stays true, so
// a kubelet restart does not make the agent unready.
func (m *Manager) Ready() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ready {
		return true
	}
	if m.first == nil || m.state != stateRunning {
		return false
	}
	for _, name := range m.first {
		if s := m.servers[name]; s != nil && !s.isRegistered() {
			return false
		}
	}
	m.ready = true
	return true
}

// Run serves the applied plans and watches the device-plugin directory
// until ctx is done: a re-created kubelet.sock makes every server register
// again, and a server whose socket vanished is restarted. It returns nil
// when ctx is done (after stopping every server and removing its socket),
// or an error at once when the directory cannot be watched.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.state != stateNew {
		m.mu.Unlock()
		return errors.New("plugin manager: Run called twice")
	}
	m.state = stateRunning
	m.mu.Unlock()
	defer m.shutdown()

	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("plugin manager: creating file-system watcher: %w", err)
	}
	defer func() {
		if err := w.Close(); err != nil {
			m.opts.Logger.Warn("closing file-system watcher", "err", err)
		}
	}()
	if err := os.MkdirAll(m.opts.KubeletDir, 0o750); err != nil {
		return fmt.Errorf("plugin manager: creating %s: %w", m.opts.KubeletDir, err)
	}
	if err := w.Add(m.opts.KubeletDir); err != nil {
		return fmt.Errorf("plugin manager: watching %s: %w", m.opts.KubeletDir, err)
	}

	m.mu.Lock()
	if m.plan != nil {
		if err := m.applyLocked(); err != nil {
			m.opts.Logger.Error("starting device plugins", "err", err)
		}
	}
	m.mu.Unlock()

	tick := time.NewTicker(resyncInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("plugin manager: file-system watcher closed")
			}
			m.handleEvent(ev)
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("plugin manager: file-system watcher closed")
			}
			m.opts.Logger.Warn("file-system watcher error; resynchronizing", "dir", m.opts.KubeletDir, "err", err)
			m.resync()
		case <-tick.C:
			m.resync()
		}
	}
}

// handleEvent reacts to one change in the device-plugin directory.
func (m *Manager) handleEvent(ev fsnotify.Event) {
	gone := ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)
	m.mu.Lock()
	defer m.mu.Unlock()
	if ev.Name == m.kubelet {
		switch {
		case ev.Has(fsnotify.Create):
			m.opts.Logger.Info("kubelet socket created; registering every device plugin", "socket", ev.Name)
			for _, s := range m.servers {
				s.requestRegistration()
			}
		case gone:
			m.opts.Logger.Info("kubelet socket removed", "socket", ev.Name)
			for _, s := range m.servers {
				s.kubeletLost()
			}
		}
		return
	}
	if s := m.bySocket[ev.Name]; s != nil && gone && !exists(s.socket) {
		m.opts.Logger.Info("device-plugin socket removed; restarting its server", "resource", s.name, "socket", s.socket)
		if err := s.restart(); err != nil {
			m.opts.Logger.Error("restarting device plugin", "resource", s.name, "err", err)
		}
	}
}

// resync restarts servers whose socket is missing, starts resources that
// failed to start and asks unregistered servers to register.
func (m *Manager) resync() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != stateRunning {
		return
	}
	for _, s := range m.servers {
		if !exists(s.socket) {
			m.opts.Logger.Info("device-plugin socket missing; restarting its server", "resource", s.name, "socket", s.socket)
			if err := s.restart(); err != nil {
				m.opts.Logger.Error("restarting device plugin", "resource", s.name, "err", err)
			}
		}
	}
	if m.plan != nil && len(m.servers) != len(m.plan.Resources) {
		if err := m.applyLocked(); err != nil {
			m.opts.Logger.Error("starting device plugins", "err", err)
		}
	}
	for _, s := range m.servers {
		if !s.isRegistered() {
			s.requestRegistration()
		}
	}
}

// shutdown stops every server and the health timers.
func (m *Manager) shutdown() {
	m.health.close()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state = stateStopped
	names := make([]string, 0, len(m.servers))
	for name := range m.servers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		m.servers[name].stop()
		m.metrics.forget(name)
	}
	clear(m.servers)
	clear(m.bySocket)
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
