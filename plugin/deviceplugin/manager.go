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

	"github.com/featureplug/featureplug/discovery/fswatch"
	"github.com/featureplug/featureplug/plugin/health"
	"github.com/featureplug/featureplug/rules/plan"
)

// resyncInterval is how often Run checks, besides watching, that every
// resource of the plan is served and every server is registered: a safety
// net for servers that failed to start and registrations that gave up.
const resyncInterval = 30 * time.Second

// Manager runs one device-plugin server per resource of the current Plan.
// Create it with NewManager, hand it Plans with Apply, and run it with
// Run. Device health comes from its health tracker (Options.Health). All
// methods are safe for concurrent use.
type Manager struct {
	opts    Options
	deps    serverDeps
	metrics *metrics
	health  *health.Tracker
	kubelet string
	// watcher is the file watcher Run watches the directory with; own
	// says whether the manager made it (and runs it).
	watcher *fswatch.Watcher
	own     bool
	// ownHealth says whether the manager made its health tracker (and
	// closes it).
	ownHealth bool

	mu      sync.Mutex
	state   managerState
	plan    *plan.Plan
	servers map[string]*server // by resource name
	// dirSeen is the device-plugin directory and kubeletSeen kubelet.sock
	// as the last check saw them (zero: missing).
	dirSeen, kubeletSeen fswatch.ID

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
		opts:    o,
		metrics: met,
		health:  o.Health,
		kubelet: filepath.Join(o.KubeletDir, KubeletSocket),
		watcher: o.Watcher,
		servers: map[string]*server{},
	}
	if m.health == nil {
		m.health, err = health.New(health.Options{Recovery: health.DefaultRecovery, Clock: o.Clock, Logger: o.Logger, Registerer: o.Registerer})
		if err != nil {
			return nil, err
		}
		m.ownHealth = true
	}
	if m.watcher == nil {
		m.watcher, m.own = fswatch.New(fswatch.Options{Logger: o.Logger}), true
	}
	m.readyCh = make(chan struct{})
	m.deps = serverDeps{opts: &m.opts, log: o.Logger, metrics: met, kubelet: &kubeletConn{}, registered: m.readinessMayChange}
	m.health.Subscribe(m.refreshHealth)
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
	errs = append(errs, validateVFIOResources(p)...)
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
	resources := servedResources(m.plan)
	want := make(map[string]bool, len(resources))
	for _, r := range resources {
		want[r.Name] = true
	}
	for name, s := range m.servers {
		if !want[name] {
			delete(m.servers, name)
			s.stop()
			m.metrics.forget(name)
		}
	}
	health := m.health.Func()
	var errs []error
	for _, r := range resources {
		if s, ok := m.servers[r.Name]; ok {
			if !s.current().set.sameAs(r, m.plan.Links) {
				s.setDevices(newDeviceSet(r, m.plan.Links), health)
			}
			continue
		}
		socket, err := m.socketPath(r.Name)
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
	}
	return errors.Join(errs...)
}

// refreshHealth recomputes every server's list with the current health.
func (m *Manager) refreshHealth() {
	m.mu.Lock()
	defer m.mu.Unlock()
	health := m.health.Func()
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
	resources := servedResources(m.plan)
	if len(resources) == 0 {
		return true
	}
	// Registered with the kubelet that owns kubelet.sock now: one that
	// re-made it in place (same inode) and has not heard of the servers
	// yet is told apart by its change time, whatever noticed the restart.
	kubelet, ok := fswatch.Identify(m.kubelet)
	if !ok {
		return false
	}
	for _, r := range resources {
		if s := m.servers[r.Name]; s == nil || !s.registeredWith(kubelet) {
			return false
		}
	}
	return true
}

// WaitReady waits until Ready or until ctx ends, and reports whether the
// manager is ready. It wakes on every accepted registration, not on a
// timer, so that what waits for the kubelet's registrations (the agent
// holds back publishing until then: register first) starts the moment the
// last one is accepted.
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
// is deleted and re-created is watched again (see check). On start,
// featureplug's own sockets that the plan does not serve are removed. Run
// returns nil when ctx is done, after stopping every server and removing
// its socket, or an error at once when the directory cannot be created.
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
	m.mu.Lock()
	m.dirSeen, _ = fswatch.Identify(m.opts.KubeletDir)
	m.kubeletSeen, _ = fswatch.Identify(m.kubelet)
	m.removeStaleSocketsLocked()
	if m.plan != nil {
		if err := m.applyLocked(); err != nil {
			m.opts.Logger.Error("starting device plugins", "err", err)
		}
	}
	m.mu.Unlock()

	stop := m.watcher.Dir(m.opts.KubeletDir, "device-plugin directory", m.check, m.setFallback)
	defer stop()
	if m.own {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = m.watcher.Run(ctx)
		}()
		defer func() { <-done }()
	}
	tick := time.NewTicker(resyncInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			m.resync()
		}
	}
}

// setFallback shows on featureplug_plugin_watch_fallback whether the
// directory is watched by the periodic check alone.
func (m *Manager) setFallback(on bool) {
	if on {
		m.metrics.watchFallback.Set(1)
	} else {
		m.metrics.watchFallback.Set(0)
	}
}

// check looks at the device-plugin directory after a change in it (or on
// the way to it), and at every periodic check of the watcher: the
// directory gone or replaced, kubelet.sock gone or made again (told apart
// by inode and change time), a server's own socket missing. It acts on
// what differs from the last look, so it may be called any number of
// times.
func (m *Manager) check(periodic bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != stateRunning {
		return
	}
	found := ""
	if periodic {
		found = " (found by the periodic check)"
	}
	dir, present := fswatch.Identify(m.opts.KubeletDir)
	if !present || !isDir(m.opts.KubeletDir) {
		if m.dirSeen != (fswatch.ID{}) {
			m.dirLostLocked(found)
		}
		return
	}
	if m.dirSeen == (fswatch.ID{}) || !dir.SameInode(m.dirSeen) {
		if m.dirSeen != (fswatch.ID{}) {
			m.dirLostLocked(found) // replaced: whatever is in it now is new
		}
		m.opts.Logger.Info("device-plugin directory is back; serving and registering again"+found, "dir", m.opts.KubeletDir)
		m.dirSeen = dir
		m.kubeletSeen, _ = fswatch.Identify(m.kubelet)
		m.restartMissingLocked()
		for _, s := range m.servers {
			s.requestRegistration()
		}
		return
	}
	m.dirSeen = dir
	kubelet, ok := fswatch.Identify(m.kubelet)
	switch {
	case !ok && m.kubeletSeen != (fswatch.ID{}):
		m.opts.Logger.Info("kubelet socket removed"+found, "socket", m.kubelet)
		for _, s := range m.servers {
			s.kubeletLost()
		}
	case ok && kubelet != m.kubeletSeen:
		m.opts.Logger.Info("kubelet socket created"+found+"; registering every device plugin", "socket", m.kubelet)
		m.kubeletSeen = kubelet
		m.restartMissingLocked()
		for _, s := range m.servers {
			s.requestRegistration()
		}
	}
	m.kubeletSeen = kubelet
	m.checkSocketsLocked(ok)
}

// dirLostLocked acts on the device-plugin directory going away: no server
// is registered until it is back.
func (m *Manager) dirLostLocked(found string) {
	m.opts.Logger.Warn("device-plugin directory removed; no resource is served until it is back"+found, "dir", m.opts.KubeletDir)
	m.dirSeen, m.kubeletSeen = fswatch.ID{}, fswatch.ID{}
	for _, s := range m.servers {
		s.kubeletLost()
		if !s.ownsSocket() {
			// A listener on a deleted socket keeps a deleted directory
			// alive, and its deletion unseen.
			s.stopGRPC()
		}
	}
}

// checkSocketsLocked restarts the servers whose socket vanished or is
// another file now (ownsSocket). While kubelet.sock is missing (a kubelet
// restart cleaning the directory, or the directory being deleted) such a
// server stops listening instead and comes back with kubelet.sock:
// re-creating the socket now would race a recursive delete of the
// directory.
func (m *Manager) checkSocketsLocked(kubeletPresent bool) {
	for _, s := range m.servers {
		if s.ownsSocket() {
			continue
		}
		if !kubeletPresent {
			if s.serving() {
				m.opts.Logger.Info("device-plugin socket removed while the kubelet is away; serving it again when kubelet.sock is back", "resource", s.name, "socket", s.path())
				s.stopGRPC()
			}
			continue
		}
		m.opts.Logger.Info("device-plugin socket missing; restarting its server", "resource", s.name, "socket", s.path())
		if err := s.restart(); err != nil {
			m.opts.Logger.Error("restarting device plugin", "resource", s.name, "err", err)
		}
	}
}

// restartMissingLocked restarts the servers whose socket is missing or
// another file now.
func (m *Manager) restartMissingLocked() {
	if !isDir(m.opts.KubeletDir) {
		return
	}
	for _, s := range m.servers {
		if !s.ownsSocket() {
			m.opts.Logger.Info("device-plugin socket missing; restarting its server", "resource", s.name, "socket", s.path())
			if err := s.restart(); err != nil {
				m.opts.Logger.Error("restarting device plugin", "resource", s.name, "err", err)
			}
		}
	}
}

// removeStaleSocketsLocked removes featureplug's own sockets in the
// device-plugin directory that no process listens on any more: left over
// from an agent that was killed, or from a resource removed across a
// restart. A socket another agent serves (a handover: the agent being
// replaced still runs) is left alone, whatever resource it is of, and so
// are other plugins' sockets, kubelet.sock and anything that is not a
// socket.
func (m *Manager) removeStaleSocketsLocked() {
	entries, err := os.ReadDir(m.opts.KubeletDir)
	if err != nil {
		m.opts.Logger.Warn("listing the device-plugin directory for stale sockets", "dir", m.opts.KubeletDir, "err", err)
		return
	}
	for _, e := range entries {
		path := filepath.Join(m.opts.KubeletDir, e.Name())
		if !isOwnSocketName(e.Name()) || e.Type()&os.ModeSocket == 0 {
			continue
		}
		if !staleSocket(path) {
			m.opts.Logger.Info("leaving a device-plugin socket another process serves (an agent handing over)", "socket", path)
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			m.opts.Logger.Warn("removing a stale device-plugin socket", "socket", path, "err", err)
			continue
		}
		m.opts.Logger.Info("removed a stale device-plugin socket no process serves", "socket", path)
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
	if m.plan != nil && len(m.servers) != len(servedResources(m.plan)) && m.dirSeen != (fswatch.ID{}) {
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

// shutdown stops every server (and the manager's own health tracker).
func (m *Manager) shutdown() {
	if m.ownHealth {
		m.health.Close()
	}
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
	m.deps.kubelet.close()
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// isDir reports whether path is a directory.
func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// socketPath is the first socket of resource's server: the one place that
// names it. The server takes the next free slot when another agent serves
// that one (listenSocket, handover.go).
func (m *Manager) socketPath(resource string) (string, error) {
	return SocketPath(m.opts.KubeletDir, resource)
}
