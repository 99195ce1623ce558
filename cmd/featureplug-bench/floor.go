package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/featureplug/featureplug/plugin/kubeletsim"
)

// Goals relative to the null plugin's floor, measured in the same rounds.
const (
	// goalRegisterFloorRatio: launch -> all resources registered at most
	// this many times the null plugin's launch -> registered.
	goalRegisterFloorRatio = 2
	// goalAfterListOverFloorMs: the CPU of the afterListWindow after the
	// first ListAndWatch at most this much above the null plugin's.
	goalAfterListOverFloorMs = 30
	// goalBinaryMB bounds the agent binary.
	goalBinaryMB = 40
	// nullResource and nullDevices are what the null plugin registers.
	nullResource = "example.com/null"
	nullDevices  = 8
)

// Floor is what the null plugin (cmd/featureplug-bench/nullplugin: one
// resource, fixed devices, nothing else) measured in a round, just before
// featureplug's launch: the floor any Go device plugin pays on this
// machine at that moment.
type Floor struct {
	// RegisteredMs and ListedMs time its launch, from the instant before
	// the fork, to its Register and its first ListAndWatch response.
	RegisteredMs float64 `json:"registeredMs"`
	ListedMs     float64 `json:"listedMs"`
	// CPUMs is the CPU it had used by then.
	CPUMs float64 `json:"cpuMs"`
	// AfterList is the CPU it used in the afterListWindow after its first
	// ListAndWatch response.
	AfterList CPUWindow `json:"afterFirstList"`
	// MemoryStart is read at the end of AfterList, MemoryLoad after as
	// many Allocate calls as featureplug gets.
	MemoryStart Memory `json:"memoryStart"`
	MemoryLoad  Memory `json:"memoryLoad"`
	// Allocate times its Allocate calls (an empty answer).
	Allocate Latency `json:"allocate"`
	// Restarts time its re-registration after kubelet restarts.
	Restarts []Restart `json:"restarts"`
}

// floor launches the null plugin against its own simulated kubelet and
// measures it the way the round measures featureplug.
func (b *bench) floor(ctx context.Context) (f *Floor, err error) {
	dir, err := os.MkdirTemp("", "fpn")
	if err != nil {
		return nil, fmt.Errorf("kubelet directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	k, err := kubeletsim.Start(dir)
	if err != nil {
		return nil, err
	}
	defer k.Stop()
	p, start, err := launch(b.cfg.NullPlugin, filepath.Join(dir, "null.log"),
		[]string{"--kubelet-dir", dir, "--resource", nullResource, "--devices", fmt.Sprint(nullDevices)}, b.cgroups)
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := p.stop(); serr != nil && err == nil {
			err = fmt.Errorf("null plugin: %w", serr)
		}
	}()
	f = &Floor{}
	var registered, listed time.Time
	var listedCPU time.Duration
	var cpuErr error
	wctx, cancel := p.context(ctx, b.cfg.Timeout)
	defer cancel()
	err = k.WaitUntil(wctx, func() bool {
		now := time.Now()
		if registered.IsZero() && k.Registrations(nullResource) > 0 {
			registered = now
		}
		if listed.IsZero() && k.Updates(nullResource) > 0 {
			listed = now
			listedCPU, cpuErr = schedCPU(b.cfg.ProcRoot, p.pid())
		}
		return !registered.IsZero() && !listed.IsZero()
	})
	if err != nil {
		return nil, p.failure(wctx, "null plugin start-up", err)
	}
	if cpuErr != nil {
		return nil, cpuErr
	}
	f.RegisteredMs, f.ListedMs = ms(registered.Sub(start)), ms(listed.Sub(start))
	f.CPUMs = ms(listedCPU)
	if f.AfterList, err = b.afterList(ctx, p, listed, listedCPU); err != nil {
		return nil, err
	}
	if f.MemoryStart, err = p.memory(b.cfg.ProcRoot); err != nil {
		return nil, err
	}
	ids := make([]string, 0, nullDevices)
	for _, d := range k.Devices(nullResource) {
		ids = append(ids, d.GetID())
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("null plugin: no devices listed")
	}
	samples, err := timeCalls(b.cfg.Allocs, func(i int) error {
		_, err := k.Allocate(wctx, nullResource, []string{ids[i%len(ids)]})
		return err
	})
	if err != nil {
		return nil, p.failure(wctx, "null plugin Allocate", err)
	}
	f.Allocate = summarize(samples)
	if f.MemoryLoad, err = p.memory(b.cfg.ProcRoot); err != nil {
		return nil, err
	}
	for range restartSamples {
		if err := sleep(ctx, restartGap); err != nil {
			return nil, err
		}
		regs, ups := k.Registrations(nullResource), k.Updates(nullResource)
		if err := k.Restart(true); err != nil {
			return nil, err
		}
		t0 := time.Now()
		var regAt, listAt time.Time
		err := k.WaitUntil(wctx, func() bool {
			now := time.Now()
			if regAt.IsZero() && k.Registrations(nullResource) > regs {
				regAt = now
			}
			if listAt.IsZero() && k.Updates(nullResource) > ups {
				listAt = now
			}
			return !regAt.IsZero() && !listAt.IsZero()
		})
		if err != nil {
			return nil, p.failure(wctx, "null plugin re-registration", err)
		}
		f.Restarts = append(f.Restarts, Restart{RegisteredMs: ms(regAt.Sub(t0)), ListedMs: ms(listAt.Sub(t0))})
	}
	return f, nil
}

// fileMB is a file's size in (decimal) megabytes; 0 when it cannot be read.
func fileMB(path string) float64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return float64(fi.Size()) / 1e6
}

// floorDefs are the null plugin's figures and the goals set against them.
func floorDefs() []figureDef {
	restarts := func(r Round) []float64 {
		var out []float64
		for _, x := range r.Floor.Restarts {
			out = append(out, x.RegisteredMs)
		}
		return out
	}
	has := func(f func(Round) []float64) func(Round) []float64 {
		return func(r Round) []float64 {
			if r.Floor == nil {
				return nil
			}
			return f(r)
		}
	}
	return []figureDef{
		{"null plugin: launch -> registered (the floor)", "ms", nil, has(func(r Round) []float64 { return one(r.Floor.RegisteredMs) })},
		{"  its CPU time by then", "ms", nil, has(func(r Round) []float64 { return one(r.Floor.CPUMs) })},
		{"featureplug: launch -> all registered / floor", "x", &goal{limit: goalRegisterFloorRatio, orEqual: true}, has(func(r Round) []float64 {
			return one(r.Startup.AllRegisteredMs / r.Floor.RegisteredMs)
		})},
		// CPU time by then moves less with the machine's load than wall
		// time: the same ratio in CPU, for a loaded machine.
		{"  the same in CPU time (agent CPU / floor CPU)", "x", nil, has(func(r Round) []float64 {
			return one(r.Startup.CPUMs / r.Floor.CPUMs)
		})},
		{fmt.Sprintf("null plugin: CPU in the %v after its first ListAndWatch", afterListWindow), "ms", nil, has(func(r Round) []float64 { return one(r.Floor.AfterList.CPUMs) })},
		{"featureplug: that CPU over the floor's", "ms", &goal{limit: goalAfterListOverFloorMs, orEqual: true}, has(func(r Round) []float64 {
			return one(r.AfterList.CPUMs - r.Floor.AfterList.CPUMs)
		})},
		{"null plugin: working set after load", "MiB", nil, has(cgroupFigure(func(r Round) Memory { return r.Floor.MemoryLoad }, func(c CgroupMemory) int64 { return c.WorkingSet }))},
		{"null plugin: RSS after load", "MB", nil, has(func(r Round) []float64 { return one(mb(r.Floor.MemoryLoad.RSS)) })},
		{"  anonymous", "MB", nil, has(func(r Round) []float64 { return one(mb(r.Floor.MemoryLoad.Anon)) })},
		{"  file-backed", "MB", nil, has(func(r Round) []float64 { return one(mb(r.Floor.MemoryLoad.File)) })},
		{"null plugin: Allocate p99", "ms", nil, has(func(r Round) []float64 { return one(r.Floor.Allocate.P99) })},
		{"null plugin: kubelet restart -> re-registered", "ms", nil, has(restarts)},
		{"null plugin: binary", "MB", nil, has(func(r Round) []float64 { return one(r.FloorBinaryMB) })},
	}
}
