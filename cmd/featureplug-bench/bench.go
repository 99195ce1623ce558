package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"syscall"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/featureplug/featureplug/plugin/kubeletsim"
	"github.com/featureplug/featureplug/rules/plan"
)

// Fixed parts of a round.
const (
	// settle is how long the agent is left alone after it registered
	// everything, before its resting memory and idle CPU are read.
	settle = 500 * time.Millisecond
	// healthSamples and restartSamples are the health events and kubelet
	// restarts played per round.
	healthSamples = 3
	// restartSamples is 10 so that the p99 over a run's rounds sees the
	// slow restarts (before the short dial retries, 4-5 of 10 were).
	restartSamples = 10
	// criticalXID is the XID the health events play: "GPU has fallen off
	// the bus", which no policy ignores.
	criticalXID = 79
	// quietResync and quietRediscover are the agent's republish and
	// re-discovery periods in the no-change check: far shorter than the
	// defaults, so that the window sees many of both.
	quietResync     = 100 * time.Millisecond
	quietRediscover = 250 * time.Millisecond
	// quietHUPs is how many SIGHUPs (forced re-discovery and re-plan)
	// the no-change window also sends.
	quietHUPs = 2
	// statPoll is how often the feature file is checked for rewrites.
	statPoll = 5 * time.Millisecond
	// afterListWindow is the window after the first ListAndWatch response
	// whose CPU is measured: what start-up leaves to do once the kubelet
	// has a device list.
	afterListWindow = 2 * time.Second
	// restartGap separates kubelet restarts. A real kubelet takes seconds
	// to come back; restarting the instant the last Register was counted
	// would catch that Register's reply in flight, which is a different
	// (and rarer) case than the one measured.
	restartGap = 200 * time.Millisecond
)

// Config is one bench run.
type Config struct {
	// Binary is the featureplug binary to launch.
	Binary string `json:"binary"`
	// NullPlugin is the null plugin binary (cmd/featureplug-bench/
	// nullplugin), measured in every round as the floor; "" skips it.
	NullPlugin string `json:"nullPlugin,omitempty"`
	// FakeNode and Rules are passed to `featureplug run`.
	FakeNode string `json:"fakeNode"`
	Rules    string `json:"rules"`
	// Rounds is the number of agent launches measured.
	Rounds int `json:"rounds"`
	// Allocs is the number of calls per latency figure.
	Allocs int `json:"allocs"`
	// Idle is the window over which idle CPU is measured.
	Idle time.Duration `json:"idle"`
	// Quiet is the window of the no-change publishing check.
	Quiet time.Duration `json:"quiet"`
	// Timeout bounds every wait for the agent.
	Timeout time.Duration `json:"timeout"`
	// ProcRoot is where /proc is (tests point it elsewhere).
	ProcRoot string `json:"-"`
	// Progress receives one line per step; nil discards them.
	Progress io.Writer `json:"-"`
}

// validate checks the configuration, naming the flag of a bad value.
func (c *Config) validate() error {
	switch {
	case c.Binary == "":
		return errors.New("--featureplug: empty")
	case c.FakeNode == "":
		return errors.New("--fake-node: empty (the bench needs a fake node to inject health events)")
	case c.Rounds < 1:
		return fmt.Errorf("--rounds: %d, want at least 1", c.Rounds)
	case c.Allocs < 1:
		return fmt.Errorf("--allocs: %d, want at least 1", c.Allocs)
	case c.Idle <= 0:
		return fmt.Errorf("--idle: %v, want a positive duration", c.Idle)
	case c.Quiet <= 0:
		return fmt.Errorf("--quiet: %v, want a positive duration", c.Quiet)
	case c.Timeout <= 0:
		return fmt.Errorf("--timeout: %v, want a positive duration", c.Timeout)
	}
	if _, err := os.Stat(c.Binary); err != nil {
		return fmt.Errorf("--featureplug: %w (build it with make build)", err)
	}
	if c.NullPlugin != "" {
		if _, err := os.Stat(c.NullPlugin); err != nil {
			return fmt.Errorf("--null-plugin: %w (go build -o %s ./cmd/featureplug-bench/nullplugin)", err, c.NullPlugin)
		}
	}
	if c.ProcRoot == "" {
		c.ProcRoot = "/proc"
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return nil
}

// Round is what one launch of the agent measured. Times are milliseconds.
type Round struct {
	// Index counts rounds from 1.
	Index int `json:"index"`
	// Init is the start-up floor any run of the binary pays.
	Init InitCost `json:"init"`
	// Floor is the null plugin's round, run just before featureplug's;
	// nil without --null-plugin.
	Floor *Floor `json:"floor,omitempty"`
	// BinaryMB and FloorBinaryMB are the sizes of the featureplug and null
	// plugin binaries.
	BinaryMB      float64 `json:"binaryMB"`
	FloorBinaryMB float64 `json:"floorBinaryMB,omitempty"`
	// Startup times the launch.
	Startup Startup `json:"startup"`
	// AllocResource is the resource the allocation calls went to, and
	// AllocDevices how many devices it advertised.
	AllocResource string `json:"allocResource"`
	AllocDevices  int    `json:"allocDevices"`
	// Options times GetDevicePluginOptions, a call with no work behind it:
	// the floor of a round trip through the socket on this machine.
	Options Latency `json:"options"`
	// Allocate times Allocate calls for one device each.
	Allocate Latency `json:"allocate"`
	// Preferred times GetPreferredAllocation per size, among all devices.
	Preferred []PreferredLatency `json:"preferred"`
	// HealthResource is the resource whose devices got health events;
	// HealthMs times each event from injection to the ListAndWatch
	// update that shows one more device Unhealthy.
	HealthResource string    `json:"healthResource"`
	HealthMs       []float64 `json:"healthMs"`
	// Restarts time kubelet restarts.
	Restarts []Restart `json:"restarts"`
	// AfterList is the CPU the agent used in the afterListWindow after its
	// first ListAndWatch response.
	AfterList CPUWindow `json:"afterFirstList"`
	// MemoryStart is read at the end of AfterList, MemoryLoad after the
	// calls.
	MemoryStart Memory `json:"memoryStart"`
	MemoryLoad  Memory `json:"memoryLoad"`
	// Idle is the CPU the agent used while nothing happened.
	Idle Idle `json:"idle"`
	// Quiet is the no-change publishing check.
	Quiet Quiet `json:"quiet"`
}

// Startup times one launch from the instant before the fork.
type Startup struct {
	// FirstRegisterMs is launch -> the kubelet accepted the first Register.
	FirstRegisterMs float64 `json:"firstRegisterMs"`
	// AllRegisteredMs is launch -> every resource registered.
	AllRegisteredMs float64 `json:"allRegisteredMs"`
	// FirstListMs is launch -> the first ListAndWatch response.
	FirstListMs float64 `json:"firstListMs"`
	// AllListedMs is launch -> every resource sent its device list.
	AllListedMs float64 `json:"allListedMs"`
	// CPUMs is the CPU the agent had used by then (all threads): compared
	// with AllListedMs it tells work from waiting for a core.
	CPUMs float64 `json:"cpuMs"`
	// Resources times each resource.
	Resources map[string]ResourceStartup `json:"resources"`

	// firstList is when the first ListAndWatch response was seen, and
	// firstListCPU the CPU the agent had used by then.
	firstList    time.Time
	firstListCPU time.Duration
}

// ResourceStartup times one resource's start.
type ResourceStartup struct {
	RegisteredMs float64 `json:"registeredMs"`
	ListedMs     float64 `json:"listedMs"`
	// Devices is the length of the first device list.
	Devices int `json:"devices"`
}

// PreferredLatency is GetPreferredAllocation's latency for one size.
type PreferredLatency struct {
	Size      int `json:"size"`
	Available int `json:"available"`
	Latency
}

// Restart times one kubelet restart from the re-created kubelet.sock.
type Restart struct {
	// RegisteredMs: every resource registered again.
	RegisteredMs float64 `json:"registeredMs"`
	// ListedMs: every resource's new ListAndWatch sent its list.
	ListedMs float64 `json:"listedMs"`
}

// CPUWindow is the CPU a process used over a window.
type CPUWindow struct {
	WindowMs float64 `json:"windowMs"`
	CPUMs    float64 `json:"cpuMs"`
}

// Idle is the CPU used over an idle window.
type Idle struct {
	WindowMs float64 `json:"windowMs"`
	// CPUMs is on-CPU time from the threads' schedstat (ns resolution).
	CPUMs float64 `json:"cpuMs"`
	// TicksMs is utime+stime from /proc/<pid>/stat (10 ms resolution).
	TicksMs float64 `json:"ticksMs"`
	// Percent is CPUMs as a percentage of one core over the window.
	Percent float64 `json:"percentOfCore"`
}

// Quiet counts what the agent wrote while nothing changed, with short
// republish and re-discovery periods and forced re-discoveries.
type Quiet struct {
	WindowMs float64 `json:"windowMs"`
	// PublishAttempts and Rediscoveries count, from /metrics, the
	// publishes and re-discoveries the window saw.
	PublishAttempts float64 `json:"publishAttempts"`
	Rediscoveries   float64 `json:"rediscoveries"`
	// FileWrites counts rewrites of the feature file (inode, mtime or
	// size changed).
	FileWrites int `json:"fileWrites"`
}

// bench runs rounds against one configuration.
type bench struct {
	cfg  Config
	plan []plan.Resource
	// cgroups is where each measured process gets a memory cgroup of its
	// own; nil when there is none, and noCgroup says why.
	cgroups  *cgroupParent
	noCgroup string
}

// newBench checks cfg and learns the plan the agent will serve.
func newBench(ctx context.Context, cfg Config) (*bench, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	for _, bin := range []string{cfg.Binary, cfg.NullPlugin} {
		if err := flushFile(bin); err != nil {
			return nil, err
		}
	}
	plan, err := expectedPlan(ctx, cfg.Binary, cfg.FakeNode, cfg.Rules)
	if err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, plan: plan}
	b.cgroups, err = usableCgroupParent(cfg.ProcRoot)
	if err != nil {
		b.noCgroup = err.Error()
	}
	return b, nil
}

// usableCgroupParent finds where the bench can make memory cgroups and
// makes and removes one there to be sure it may.
func usableCgroupParent(procRoot string) (*cgroupParent, error) {
	p, err := findCgroupParent(procRoot)
	if err != nil {
		return nil, err
	}
	c, err := p.newCgroup(fmt.Sprintf("featureplug-bench-%d-probe", os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.dir, err)
	}
	if _, err := c.read(); err != nil {
		_ = c.remove()
		return nil, err
	}
	return p, c.remove()
}

// memoryCgroupLine says how memory is measured, for the report.
func (b *bench) memoryCgroupLine() string {
	if b.cgroups == nil {
		return "no memory cgroup (" + b.noCgroup + "): RSS only, no working set"
	}
	return "working set from a " + b.cgroups.String()
}

// run measures every round.
func (b *bench) run(ctx context.Context) ([]Round, error) {
	var rounds []Round
	for i := 1; i <= b.cfg.Rounds; i++ {
		r, err := b.round(ctx, i)
		if err != nil {
			return rounds, fmt.Errorf("round %d: %w", i, err)
		}
		rounds = append(rounds, r)
	}
	return rounds, nil
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(b.cfg.Progress, format+"\n", args...)
}

// session is an agent launched against its own simulated kubelet.
type session struct {
	dir     string
	kubelet *kubeletsim.Kubelet
	agent   *agentProcess
	start   time.Time
}

// startSession makes a short temporary kubelet directory (unix socket
// paths are limited to 108 bytes), serves kubelet.sock there and launches
// the agent with extra flags.
func (b *bench) startSession(extra ...string) (*session, error) {
	dir, err := os.MkdirTemp("", "fpb")
	if err != nil {
		return nil, fmt.Errorf("kubelet directory: %w", err)
	}
	k, err := kubeletsim.Start(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	args := append([]string{
		"--fake-node", b.cfg.FakeNode, "--rules", b.cfg.Rules, "--kubelet-dir", dir,
		"--publish", "file", "--features-file", filepath.Join(dir, "features"),
		"--state-dir", filepath.Join(dir, "state"),
	}, extra...)
	p, start, err := launchAgent(b.cfg.Binary, filepath.Join(dir, "agent.log"), args, b.cgroups)
	if err != nil {
		k.Stop()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &session{dir: dir, kubelet: k, agent: p, start: start}, nil
}

// close stops the agent and the kubelet and removes the directory; it
// reports an agent that did not exit cleanly, or a directory left behind.
func (s *session) close() error {
	err := s.agent.stop()
	s.kubelet.Stop()
	if rmErr := os.RemoveAll(s.dir); rmErr != nil && err == nil {
		err = fmt.Errorf("removing the kubelet directory: %w", rmErr)
	}
	return err
}

func (b *bench) round(ctx context.Context, index int) (r Round, err error) {
	r.Index = index
	if r.Init, err = measureInit(ctx, b.cfg.Binary); err != nil {
		return r, err
	}
	r.BinaryMB = fileMB(b.cfg.Binary)
	if b.cfg.NullPlugin != "" {
		if r.Floor, err = b.floor(ctx); err != nil {
			return r, err
		}
		r.FloorBinaryMB = fileMB(b.cfg.NullPlugin)
		b.progress("round %d: null plugin registered %.1f ms after launch", index, r.Floor.RegisteredMs)
	}
	s, err := b.startSession()
	if err != nil {
		return r, err
	}
	defer func() {
		if cerr := s.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if r.Startup, err = b.startup(ctx, s); err != nil {
		return r, err
	}
	b.progress("round %d: all %d resources registered %.1f ms after launch", index, len(b.plan), r.Startup.AllRegisteredMs)
	if r.AfterList, err = b.afterList(ctx, s.agent, r.Startup.firstList, r.Startup.firstListCPU); err != nil {
		return r, err
	}
	if r.MemoryStart, err = s.agent.memory(b.cfg.ProcRoot); err != nil {
		return r, err
	}
	if r.Idle, err = b.idle(ctx, s); err != nil {
		return r, err
	}
	if err := b.load(ctx, s, &r); err != nil {
		return r, err
	}
	if r.MemoryLoad, err = s.agent.memory(b.cfg.ProcRoot); err != nil {
		return r, err
	}
	if err := b.health(ctx, s, &r); err != nil {
		return r, err
	}
	if err := b.restarts(ctx, s, &r); err != nil {
		return r, err
	}
	if err := s.close(); err != nil {
		return r, err
	}
	if r.Quiet, err = b.quiet(ctx); err != nil {
		return r, fmt.Errorf("no-change check: %w", err)
	}
	return r, nil
}

// startup waits until every planned resource registered and sent its
// first device list, noting when each was first seen.
func (b *bench) startup(ctx context.Context, s *session) (Startup, error) {
	st := Startup{Resources: map[string]ResourceStartup{}}
	registered := map[string]time.Time{}
	listed := map[string]time.Time{}
	k := s.kubelet
	wctx, cancel := s.agent.context(ctx, b.cfg.Timeout)
	defer cancel()
	var cpuErr error
	err := k.WaitUntil(wctx, func() bool {
		now := time.Now()
		for _, res := range b.plan {
			if _, ok := registered[res.Name]; !ok && k.Registrations(res.Name) > 0 {
				registered[res.Name] = now
			}
			if _, ok := listed[res.Name]; !ok && k.Updates(res.Name) > 0 {
				listed[res.Name] = now
				if st.firstList.IsZero() {
					st.firstList = now
					st.firstListCPU, cpuErr = schedCPU(b.cfg.ProcRoot, s.agent.pid())
				}
			}
		}
		return len(registered) == len(b.plan) && len(listed) == len(b.plan)
	})
	if err != nil {
		return st, s.agent.failure(wctx, fmt.Sprintf("waiting for %d resources (%d registered, %d listed)",
			len(b.plan), len(registered), len(listed)), err)
	}
	if cpuErr != nil {
		return st, cpuErr
	}
	cpu, err := readCPU(b.cfg.ProcRoot, s.agent.pid())
	if err != nil {
		return st, err
	}
	st.CPUMs = ms(cpu.Sched)
	since := func(t time.Time) float64 { return ms(t.Sub(s.start)) }
	var regs, lists []float64
	for _, res := range b.plan {
		rs := ResourceStartup{
			RegisteredMs: since(registered[res.Name]),
			ListedMs:     since(listed[res.Name]),
			Devices:      len(k.Devices(res.Name)),
		}
		if rs.Devices != advertised(res) {
			return st, fmt.Errorf("resource %s: the first device list has %d devices, the plan %d", res.Name, rs.Devices, advertised(res))
		}
		st.Resources[res.Name] = rs
		regs = append(regs, rs.RegisteredMs)
		lists = append(lists, rs.ListedMs)
	}
	st.FirstRegisterMs, st.AllRegisteredMs = slices.Min(regs), slices.Max(regs)
	st.FirstListMs, st.AllListedMs = slices.Min(lists), slices.Max(lists)
	return st, nil
}

// afterList waits until afterListWindow has passed since the first
// ListAndWatch response at firstList (and at least settle), and returns
// the CPU p used meanwhile, cpu0 being its CPU at firstList.
func (b *bench) afterList(ctx context.Context, p *agentProcess, firstList time.Time, cpu0 time.Duration) (CPUWindow, error) {
	wait := max(time.Until(firstList.Add(afterListWindow)), settle)
	if err := sleep(ctx, wait); err != nil {
		return CPUWindow{}, err
	}
	cpu1, err := schedCPU(b.cfg.ProcRoot, p.pid())
	if err != nil {
		return CPUWindow{}, err
	}
	return CPUWindow{WindowMs: ms(time.Since(firstList)), CPUMs: ms(cpu1 - cpu0)}, nil
}

// schedCPU is the CPU pid used so far, from its threads' schedstat.
func schedCPU(procRoot string, pid int) (time.Duration, error) {
	c, err := readCPU(procRoot, pid)
	return c.Sched, err
}

// idle measures the CPU the agent uses while nothing happens.
func (b *bench) idle(ctx context.Context, s *session) (Idle, error) {
	pid := s.agent.pid()
	c0, err := readCPU(b.cfg.ProcRoot, pid)
	if err != nil {
		return Idle{}, err
	}
	t0 := time.Now()
	if err := sleep(ctx, b.cfg.Idle); err != nil {
		return Idle{}, err
	}
	c1, err := readCPU(b.cfg.ProcRoot, pid)
	if err != nil {
		return Idle{}, err
	}
	window := time.Since(t0)
	cpu := c1.Sched - c0.Sched
	return Idle{
		WindowMs: ms(window),
		CPUMs:    ms(cpu),
		TicksMs:  ms(c1.Ticks - c0.Ticks),
		Percent:  100 * float64(cpu) / float64(window),
	}, nil
}

// load times Allocate and GetPreferredAllocation through the socket.
func (b *bench) load(ctx context.Context, s *session, r *Round) error {
	target := allocationTarget(b.plan)
	k := s.kubelet
	var ids []string
	for _, d := range k.Devices(target.Name) {
		ids = append(ids, d.GetID())
	}
	r.AllocResource, r.AllocDevices = target.Name, len(ids)
	wctx, cancel := s.agent.context(ctx, b.cfg.Timeout)
	defer cancel()

	client, err := k.Client(target.Name)
	if err != nil {
		return err
	}
	samples, err := timeCalls(b.cfg.Allocs, func(int) error {
		_, err := client.GetDevicePluginOptions(wctx, &pluginapi.Empty{})
		return err
	})
	if err != nil {
		return s.agent.failure(wctx, "GetDevicePluginOptions "+target.Name, err)
	}
	r.Options = summarize(samples)

	samples, err = timeCalls(b.cfg.Allocs, func(i int) error {
		_, err := k.Allocate(wctx, target.Name, []string{ids[i%len(ids)]})
		return err
	})
	if err != nil {
		return s.agent.failure(wctx, "Allocate "+target.Name, err)
	}
	r.Allocate = summarize(samples)

	for _, size := range []int{2, 4} {
		if size > len(ids) {
			continue
		}
		samples, err := timeCalls(b.cfg.Allocs, func(int) error {
			got, err := k.GetPreferredAllocation(wctx, target.Name, ids, nil, size)
			if err == nil && len(got) != size {
				err = fmt.Errorf("asked for %d devices, got %d: %v", size, len(got), got)
			}
			return err
		})
		if err != nil {
			return s.agent.failure(wctx, fmt.Sprintf("GetPreferredAllocation %s size %d", target.Name, size), err)
		}
		r.Preferred = append(r.Preferred, PreferredLatency{Size: size, Available: len(ids), Latency: summarize(samples)})
	}
	b.progress("round %d: Allocate p99 %.3f ms over %d calls on %s", r.Index, r.Allocate.P99, r.Allocate.Calls, target.Name)
	return nil
}

// timeCalls times n calls of call. The bench's own garbage collector is
// held off meanwhile, so that its pauses do not show up as the agent's
// latency.
func timeCalls(n int, call func(i int) error) ([]time.Duration, error) {
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	samples := make([]time.Duration, 0, n)
	for i := range n {
		t0 := time.Now()
		if err := call(i); err != nil {
			return nil, fmt.Errorf("call %d: %w", i+1, err)
		}
		samples = append(samples, time.Since(t0))
	}
	return samples, nil
}

// health plays a critical XID on a few GPUs, one at a time, and times each
// from the injection request to the ListAndWatch update that shows it.
func (b *bench) health(ctx context.Context, s *session, r *Round) error {
	target, gpus := healthTarget(b.plan, healthSamples)
	r.HealthResource = target.Name
	k := s.kubelet
	for _, gpu := range gpus {
		_, before := k.Capacity(target.Name)
		wctx, cancel := s.agent.context(ctx, b.cfg.Timeout)
		t0 := time.Now()
		err := s.agent.injectXID(wctx, gpu, criticalXID)
		if err == nil {
			err = k.WaitFor(wctx, target.Name, func(devs []*pluginapi.Device) bool {
				return healthy(devs) < before
			})
		}
		elapsed := time.Since(t0)
		if err != nil {
			err = s.agent.failure(wctx, fmt.Sprintf("XID %d on GPU %d -> %s shows it", criticalXID, gpu, target.Name), err)
		}
		cancel()
		if err != nil {
			return err
		}
		r.HealthMs = append(r.HealthMs, ms(elapsed))
	}
	return nil
}

func healthy(devs []*pluginapi.Device) int {
	n := 0
	for _, d := range devs {
		if d.GetHealth() == pluginapi.Healthy {
			n++
		}
	}
	return n
}

// restarts restart the kubelet the way it restarts on a node (its socket
// and every plugin socket deleted, kubelet.sock created again) and time
// how long every resource takes to register and list again.
func (b *bench) restarts(ctx context.Context, s *session, r *Round) error {
	k := s.kubelet
	for range restartSamples {
		if err := sleep(ctx, restartGap); err != nil {
			return err
		}
		regs := map[string]int{}
		ups := map[string]int{}
		for _, res := range b.plan {
			regs[res.Name], ups[res.Name] = k.Registrations(res.Name), k.Updates(res.Name)
		}
		if err := k.Restart(true); err != nil {
			return err
		}
		t0 := time.Now()
		var registeredAt, listedAt time.Time
		wctx, cancel := s.agent.context(ctx, b.cfg.Timeout)
		err := k.WaitUntil(wctx, func() bool {
			now := time.Now()
			allReg, allList := true, true
			for _, res := range b.plan {
				allReg = allReg && k.Registrations(res.Name) > regs[res.Name]
				allList = allList && k.Updates(res.Name) > ups[res.Name]
			}
			if allReg && registeredAt.IsZero() {
				registeredAt = now
			}
			if allList && listedAt.IsZero() {
				listedAt = now
			}
			return allReg && allList
		})
		if err != nil {
			err = s.agent.failure(wctx, "re-registration after a kubelet restart", err)
		}
		cancel()
		if err != nil {
			return err
		}
		r.Restarts = append(r.Restarts, Restart{RegisteredMs: ms(registeredAt.Sub(t0)), ListedMs: ms(listedAt.Sub(t0))})
	}
	return nil
}

// quiet launches an agent that republishes and re-discovers far more often
// than by default, sends it SIGHUPs, and counts the feature-file rewrites
// while nothing about the node changes.
func (b *bench) quiet(ctx context.Context) (q Quiet, err error) {
	s, err := b.startSession("--resync-interval", quietResync.String(), "--rediscover-interval", quietRediscover.String())
	if err != nil {
		return q, err
	}
	defer func() {
		if cerr := s.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if _, err := b.startup(ctx, s); err != nil {
		return q, err
	}
	features := filepath.Join(s.dir, "features")
	wctx, cancel := s.agent.context(ctx, b.cfg.Timeout)
	defer cancel()
	// The first write, then a moment for whatever start-up still publishes.
	for {
		if _, err := os.Stat(features); err == nil {
			break
		}
		if err := sleep(wctx, statPoll); err != nil {
			return q, s.agent.failure(wctx, "waiting for the feature file", err)
		}
	}
	if err := sleep(wctx, settle); err != nil {
		return q, err
	}

	attempts0, err := s.agent.metric(wctx, "featureplug_publish_attempts_total", `result="ok"`)
	if err != nil {
		return q, err
	}
	disc0, err := s.agent.metric(wctx, "featureplug_discoveries_total", `result="ok"`)
	if err != nil {
		return q, err
	}
	last, err := fileVersion(features)
	if err != nil {
		return q, err
	}
	t0 := time.Now()
	hupEvery := b.cfg.Quiet / (quietHUPs + 1)
	nextHUP := t0.Add(hupEvery)
	for hups := 0; time.Since(t0) < b.cfg.Quiet; {
		if hups < quietHUPs && time.Now().After(nextHUP) {
			if err := s.agent.signal(syscall.SIGHUP); err != nil {
				return q, err
			}
			hups++
			nextHUP = nextHUP.Add(hupEvery)
		}
		if err := sleep(wctx, statPoll); err != nil {
			return q, s.agent.failure(wctx, "watching the feature file", err)
		}
		v, err := fileVersion(features)
		if err != nil {
			return q, err
		}
		if v != last {
			q.FileWrites++
			last = v
		}
	}
	q.WindowMs = ms(time.Since(t0))
	attempts1, err := s.agent.metric(wctx, "featureplug_publish_attempts_total", `result="ok"`)
	if err != nil {
		return q, err
	}
	disc1, err := s.agent.metric(wctx, "featureplug_discoveries_total", `result="ok"`)
	if err != nil {
		return q, err
	}
	q.PublishAttempts, q.Rediscoveries = attempts1-attempts0, disc1-disc0
	return q, nil
}

// version identifies one content of a file: a rewrite by rename changes
// the inode, one in place the modification time or size.
type version struct {
	ino   uint64
	mtime time.Time
	size  int64
}

func fileVersion(path string) (version, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return version{}, fmt.Errorf("feature file: %w", err)
	}
	v := version{mtime: fi.ModTime(), size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		v.ino = st.Ino
	}
	return v, nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// flushFile writes path's dirty page-cache pages to disk, so that the
// binaries are measured as an installed binary runs: make builds them
// right before the bench, and the writeback of a file just written would
// otherwise fall in the first rounds. "" is no file.
func flushFile(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("flushing %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("flushing %s: %w", path, err)
	}
	return nil
}
