package deviceplugin

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
	"github.com/featureplug/featureplug/discovery/fswatch"
	"github.com/featureplug/featureplug/rules/plan"
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
	events  *eventLog
	kubelet string
	// newWatcher creates the file-system watcher; tests replace it.
	newWatcher func() (*fsnotify.Watcher, error)

	mu       sync.Mutex
	state    managerState
	plan     *plan.Plan
	servers  map[string]*server // by resource name
	bySocket map[string]*server
	// watch is the directory watch; dirPresent whether the device-plugin
	// directory was there at the last look; kubeletSeen is kubelet.sock
	// as the backstop last saw it (nil: missing).
	watch       dirWatch
	dirPresent  bool
	kubeletSeen os.FileInfo
	// watchFailed is set while no watch could be added (the backstop
	// alone notices changes).
	watchFailed bool

	// readyMu guards readyCh, which is closed (and replaced) whenever
	// Ready may have become true: a registration accepted, a plan
	// applied, Run started. See WaitReady.
	readyMu sync.Mutex
	readyCh chan struct{}
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
		opts:       o,
		metrics:    met,
		kubelet:    filepath.Join(o.KubeletDir, KubeletSocket),
		newWatcher: fsnotify.NewWatcher,
		servers:    map[string]*server{},
		bySocket:   map[string]*server{},
	}
	m.readyCh = make(chan struct{})
	m.deps = serverDeps{opts: &m.opts, log: o.Logger, metrics: met, kubelet: &kubeletConn{}, registered: m.readinessMayChange}
	m.events = newEventLog(o.Clock, healthLogInterval, o.Logger)
	m.health = newHealthTracker(o.Clock, o.HealthRecovery, newHealthStore(o.StateDir), o.Logger, met, func(keys []string) {
		o.Logger.Info("devices recovered after a quiet period", "devices", keys, "quietPeriod", o.HealthRecovery)
		m.refreshHealth()
		m.healthChanged()
	})
	return m, nil
}

// Apply makes plan the served one: servers start for new resources and stop
// for removed ones; a resource whose devices or sharing changed gets the new
// list pushed on its open ListAndWatch streams, without re-registering;
// unchanged resources are not touched. An invalid plan changes nothing and
// returns an error naming the resource, field and value. Plans applied
// before Run are served when Run starts.
func (m *Manager) Apply(plan *plan.Plan) error {
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
	m.plan = plan
	defer m.readinessMayChange()
	if m.state == stateNew {
		return nil
	}
	return m.applyLocked()
}

// validatePlan checks every resource of a plan. Checks that span the
// whole plan (caps on sizes) belong at the end, next to the per-resource
// ones.
func validatePlan(p *plan.Plan) error {
	if p == nil {
		return errors.New("plugin: nil plan")
	}
	var errs []error
	names := make(map[string]int, len(p.Resources))
	for i := range p.Resources {
		r := &p.Resources[i]
		if j, dup := names[r.Name]; dup {
			errs = append(errs, fmt.Errorf("resources[%d].name: %q repeats resources[%d]", i, r.Name, j))
		}
		names[r.Name] = i
		if err := validateResource(i, r); err != nil {
			errs = append(errs, err)
		}
	}
	// The caps on replicas and device IDs, by the same code as the planner
	// and `rules check`: a plan made some other way is refused too.
	if err := plan.ValidatePlan(p); err != nil {
		errs = append(errs, err)
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
	m.metrics.healthEvents.WithLabelValues(kindLabel(ev.Kind), xidLabel(ev.XID)).Inc()
	newly := m.health.record(ev)
	m.events.event(ev)
	if newly {
		m.refreshHealth()
		m.healthChanged()
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

// Ready reports whether a plan is applied, Run is serving it and every
// resource of the current plan is registered with the kubelet that owns
// kubelet.sock now. It follows the registration state: a kubelet that goes
// away (or a directory that is deleted) makes the manager unready until
// every resource has registered again.
func (m *Manager) Ready() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.plan == nil || m.state != stateRunning {
		return false
	}
	for _, r := range m.plan.Resources {
		if s := m.servers[r.Name]; s == nil || !s.isRegistered() {
			return false
		}
	}
	return true
}

// WaitReady waits until Ready or until ctx ends, and reports whether the
// manager is ready. It wakes on every accepted registration, not on a
// timer, so that what waits for the kubelet's registrations (the agent
// holds back publishing until then: register first, issue 17) starts the
// moment the last one is accepted.
func (m *Manager) WaitReady(ctx context.Context) bool {
	for {
		m.readyMu.Lock()
		ch := m.readyCh
		m.readyMu.Unlock()
		if m.Ready() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// readinessMayChange wakes WaitReady's callers to check Ready again.
func (m *Manager) readinessMayChange() {
	m.readyMu.Lock()
	close(m.readyCh)
	m.readyCh = make(chan struct{})
	m.readyMu.Unlock()
}

// Run serves the applied plans and watches the device-plugin directory
// until ctx is done: a re-created kubelet.sock makes every server register
// again, a server whose socket vanished is restarted, and a directory that
// is deleted and re-created is watched again (its nearest existing
// ancestor is watched meanwhile). A periodic check (Options.WatchBackstop)
// catches what the watch misses, and is all there is when no inotify
// instance can be had. On start, featureplug's own sockets that the plan
// does not serve are removed. Run returns nil when ctx is done, after
// stopping every server and removing its socket, or an error at once when
// the directory cannot be created.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.state != stateNew {
		m.mu.Unlock()
		return errors.New("plugin manager: Run called twice")
	}
	m.state = stateRunning
	m.mu.Unlock()
	m.readinessMayChange()
	defer m.shutdown()

	if err := os.MkdirAll(m.opts.KubeletDir, 0o750); err != nil {
		return fmt.Errorf("plugin manager: creating %s: %w", m.opts.KubeletDir, err)
	}
	w, err := m.newWatcher()
	if err != nil {
		m.opts.Logger.Warn("no file-system watcher for the device-plugin directory; checking it periodically instead",
			"dir", m.opts.KubeletDir, "interval", m.opts.WatchBackstop, "err", err)
		m.metrics.watchFallback.Set(1)
		w = nil
	} else {
		defer func() {
			if err := w.Close(); err != nil {
				m.opts.Logger.Warn("closing file-system watcher", "err", err)
			}
		}()
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w != nil {
		events, errs = w.Events, fswatch.Errors(w) // never w.Errors: see fswatch
	}

	m.mu.Lock()
	m.watch = dirWatch{w: w, dir: m.opts.KubeletDir}
	m.dirPresent = true
	if w != nil {
		m.rearmLocked()
	}
	m.removeStaleSocketsLocked()
	m.kubeletSeen, _ = os.Stat(m.kubelet)
	if m.plan != nil {
		if err := m.applyLocked(); err != nil {
			m.opts.Logger.Error("starting device plugins", "err", err)
		}
	}
	m.mu.Unlock()

	tick := time.NewTicker(resyncInterval)
	defer tick.Stop()
	backstop := time.NewTicker(m.opts.WatchBackstop)
	defer backstop.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				return errors.New("plugin manager: file-system watcher closed")
			}
			m.handleEvent(ev)
		case err, ok := <-errs:
			if !ok {
				return errors.New("plugin manager: file-system watcher closed")
			}
			m.opts.Logger.Warn("file-system watcher error; resynchronizing", "dir", m.opts.KubeletDir, "err", err)
			m.resync()
		case <-backstop.C:
			m.backstop()
		case <-tick.C:
			m.resync()
		}
	}
}

// rearmLocked moves the watch onto the directory or its nearest ancestor
// and reacts to the directory going away or coming back.
func (m *Manager) rearmLocked() {
	present, err := m.watch.arm()
	switch {
	case err != nil:
		if !m.watchFailed {
			m.opts.Logger.Warn("cannot watch the device-plugin directory; checking it periodically instead",
				"dir", m.opts.KubeletDir, "interval", m.opts.WatchBackstop, "err", err)
		}
		m.watchFailed = true
		m.metrics.watchFallback.Set(1)
		present = isDir(m.opts.KubeletDir)
	case m.watchFailed:
		m.opts.Logger.Info("watching the device-plugin directory again", "dir", m.opts.KubeletDir, "watching", m.watch.on)
		m.watchFailed = false
		m.metrics.watchFallback.Set(0)
	}
	m.setPresentLocked(present)
}

// setPresentLocked records whether the device-plugin directory exists, and
// acts when that changed: servers lose their registration while it is
// gone, and come back (sockets re-created, registration asked) with it.
func (m *Manager) setPresentLocked(present bool) {
	was := m.dirPresent
	m.dirPresent = present
	switch {
	case was && !present:
		m.opts.Logger.Warn("device-plugin directory removed; no resource is served until it is back",
			"dir", m.opts.KubeletDir, "watching", m.watch.on)
		m.kubeletSeen = nil
		for _, s := range m.servers {
			s.kubeletLost()
		}
	case !was && present:
		m.opts.Logger.Info("device-plugin directory is back; serving and registering again", "dir", m.opts.KubeletDir)
		m.kubeletSeen, _ = os.Stat(m.kubelet)
		m.restartMissingLocked()
		for _, s := range m.servers {
			s.requestRegistration()
		}
	}
}

// handleEvent reacts to one change in the device-plugin directory or, while
// it is missing, in the ancestor watched instead.
func (m *Manager) handleEvent(ev fsnotify.Event) {
	gone := ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != stateRunning {
		return
	}
	if gone && m.watch.gone(ev.Name) {
		// The watched directory itself went away. It may be back already
		// (the event can arrive after a quick re-creation), but whatever
		// is in it now is new: mark it gone first, so that coming back
		// re-creates the sockets and registers again.
		m.setPresentLocked(false)
		m.rearmLocked()
		return
	}
	if !m.watch.present() {
		if m.watch.concerns(ev.Name) {
			m.rearmLocked()
		}
		return
	}
	if ev.Name == m.kubelet {
		switch {
		case ev.Has(fsnotify.Create):
			m.opts.Logger.Info("kubelet socket created; registering every device plugin", "socket", ev.Name)
			m.kubeletSeen, _ = os.Stat(m.kubelet)
			m.restartMissingLocked()
			for _, s := range m.servers {
				s.requestRegistration()
			}
		case gone:
			m.opts.Logger.Info("kubelet socket removed", "socket", ev.Name)
			m.kubeletSeen = nil
			for _, s := range m.servers {
				s.kubeletLost()
			}
		}
		return
	}
	s := m.bySocket[ev.Name]
	if s == nil || !gone || exists(s.socket) {
		return
	}
	if !exists(m.kubelet) {
		// A socket removed while kubelet.sock is missing is a kubelet
		// restart cleaning the directory, or the directory being deleted:
		// the server stops listening now (a listener on a deleted socket
		// keeps the deleted directory alive, and its deletion unseen) and
		// comes back when kubelet.sock does. Re-creating the socket now
		// would race a recursive delete of the directory.
		m.opts.Logger.Info("device-plugin socket removed while the kubelet is away; serving it again when kubelet.sock is back", "resource", s.name, "socket", s.socket)
		s.stopGRPC()
		return
	}
	m.opts.Logger.Info("device-plugin socket removed; restarting its server", "resource", s.name, "socket", s.socket)
	if err := s.restart(); err != nil {
		m.opts.Logger.Error("restarting device plugin", "resource", s.name, "err", err)
	}
}

// backstop is the periodic check behind the watch: a few stat calls that
// catch a directory or kubelet.sock change, or a missing plugin socket,
// whose event was missed (or that no watch could see).
func (m *Manager) backstop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != stateRunning {
		return
	}
	switch {
	case m.watch.w == nil:
		m.setPresentLocked(isDir(m.opts.KubeletDir))
	case m.watchFailed || m.watch.stale():
		m.rearmLocked()
	}
	if !m.dirPresent {
		return
	}
	st, err := os.Stat(m.kubelet)
	if err != nil {
		st = nil
	}
	switch {
	case st == nil && m.kubeletSeen != nil:
		m.opts.Logger.Info("kubelet socket removed (found by the periodic check)", "socket", m.kubelet)
		for _, s := range m.servers {
			s.kubeletLost()
		}
	case st != nil && !sameFileTime(st, m.kubeletSeen):
		m.opts.Logger.Info("kubelet socket created (found by the periodic check); registering every device plugin", "socket", m.kubelet)
		for _, s := range m.servers {
			s.requestRegistration()
		}
	}
	m.kubeletSeen = st
	m.restartMissingLocked()
}

// sameFileTime reports whether a and b are the same file with the same
// modification time; b may be nil.
func sameFileTime(a, b os.FileInfo) bool {
	return b != nil && os.SameFile(a, b) && a.ModTime().Equal(b.ModTime())
}

// restartMissingLocked restarts the servers whose socket is missing.
func (m *Manager) restartMissingLocked() {
	if !isDir(m.opts.KubeletDir) {
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
}

// removeStaleSocketsLocked removes featureplug's own sockets in the
// device-plugin directory that the current plan does not serve: left over
// from a process that was killed, or from a resource removed across a
// restart. Other plugins' sockets and kubelet.sock are never touched.
func (m *Manager) removeStaleSocketsLocked() {
	entries, err := os.ReadDir(m.opts.KubeletDir)
	if err != nil {
		m.opts.Logger.Warn("listing the device-plugin directory for stale sockets", "dir", m.opts.KubeletDir, "err", err)
		return
	}
	keep := map[string]bool{}
	if m.plan != nil {
		for _, r := range m.plan.Resources {
			if p, err := SocketPath(m.opts.KubeletDir, r.Name); err == nil {
				keep[p] = true
			}
		}
	}
	for _, e := range entries {
		path := filepath.Join(m.opts.KubeletDir, e.Name())
		if !isOwnSocketName(e.Name()) || e.Type()&os.ModeSocket == 0 || keep[path] {
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			m.opts.Logger.Warn("removing a stale device-plugin socket", "socket", path, "err", err)
			continue
		}
		m.opts.Logger.Info("removed a stale device-plugin socket the plan does not serve", "socket", path)
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
	m.restartMissingLocked()
	if m.plan != nil && len(m.servers) != len(m.plan.Resources) && m.dirPresent {
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
	m.events.close()
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
	m.deps.kubelet.close()
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
