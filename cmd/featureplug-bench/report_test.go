package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/rules/plan"
)

func testPlan() []plan.Resource {
	gpu := func(i int) plan.Device {
		return plan.Device{ID: "GPU-" + string(rune('a'+i)), Kind: plan.DeviceGPU, GPUIndex: i}
	}
	mig := func(gpu, n int) plan.Device {
		return plan.Device{ID: "MIG-" + string(rune('a'+gpu)) + string(rune('0'+n)), Kind: plan.DeviceMIG, GPUIndex: gpu}
	}
	return []plan.Resource{
		{Name: "nvidia.com/gpu", Devices: []plan.Device{gpu(4), gpu(5), gpu(6), gpu(7)}},
		{Name: "nvidia.com/mig-1g.5gb", Devices: []plan.Device{mig(0, 0), mig(0, 1), mig(1, 0)}},
		{Name: "nvidia.com/mig-2g.10gb", Devices: []plan.Device{mig(0, 2), mig(1, 1), mig(1, 2), mig(2, 0), mig(2, 1)}},
	}
}

func TestTargets(t *testing.T) {
	resources := testPlan()
	if got := allocationTarget(resources).Name; got != "nvidia.com/mig-2g.10gb" {
		t.Errorf("allocationTarget = %s, want the resource with the most devices", got)
	}
	shared := testPlan()
	shared[0].Sharing = plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 4}
	if got := allocationTarget(shared).Name; got != "nvidia.com/gpu" {
		t.Errorf("allocationTarget with 4 replicas = %s, want nvidia.com/gpu (16 advertised devices)", got)
	}
	res, gpus := healthTarget(resources, 3)
	if res.Name != "nvidia.com/gpu" || len(gpus) != 3 || gpus[0] != 4 || gpus[2] != 6 {
		t.Errorf("healthTarget = %s %v, want nvidia.com/gpu [4 5 6]", res.Name, gpus)
	}
	res, gpus = healthTarget(resources[1:], 3)
	if res.Name != "nvidia.com/mig-1g.5gb" || len(gpus) != 2 || gpus[0] != 0 || gpus[1] != 1 {
		t.Errorf("healthTarget without whole GPUs = %s %v, want nvidia.com/mig-1g.5gb [0 1]", res.Name, gpus)
	}
}

func TestParsePlan(t *testing.T) {
	tests := []struct {
		name, doc, err string
	}{
		{"ok", `{"rules":"builtin:mixed","resources":[{"name":"a.b/c","devices":[{"id":"GPU-1","kind":"gpu"}]}]}`, ""},
		{"not json", `RESOURCE DEVICES`, "decoding the plan"},
		{"no resources", `{"resources":[]}`, "field resources: the rules make no resource"},
		{"resource without devices", `{"resources":[{"name":"a.b/c","devices":[]}]}`, `field resources[0]: resource "a.b/c" with 0 devices`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := parsePlan([]byte(tt.doc), "explain")
			if tt.err == "" {
				if err != nil || len(plan) != 1 || plan[0].Devices[0].ID != "GPU-1" {
					t.Errorf("parsePlan = %+v, %v", plan, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.HasPrefix(err.Error(), "explain: ") {
				t.Errorf("parsePlan error = %v, want the source and %q", err, tt.err)
			}
		})
	}
}

// testRound is a round whose figures are scaled by f.
func testRound(f float64, writes int) Round {
	return Round{
		Startup: Startup{
			FirstRegisterMs: 10 * f, AllRegisteredMs: 15 * f, FirstListMs: 11 * f, AllListedMs: 16 * f,
			Resources: map[string]ResourceStartup{"nvidia.com/gpu": {RegisteredMs: 15 * f}},
		},
		AllocResource: "nvidia.com/gpu", AllocDevices: 8,
		Allocate:   Latency{P50: 0.1 * f, P99: 0.5 * f},
		Preferred:  []PreferredLatency{{Size: 2, Available: 8, Latency: Latency{P99: 0.4 * f}}, {Size: 4, Available: 8, Latency: Latency{P99: 0.6 * f}}},
		HealthMs:   []float64{1 * f, 2 * f, 3 * f},
		Restarts:   []Restart{{RegisteredMs: 5 * f, ListedMs: 6 * f}},
		MemoryLoad: Memory{RSS: int64(30000 * f), Cgroup: CgroupMemory{Usage: int64(40000 * f), WorkingSet: int64(20000 * f)}},
		AfterList:  CPUWindow{WindowMs: 2000, CPUMs: 20 * f},
		Idle:       Idle{Percent: 0.1 * f},
		Quiet:      Quiet{FileWrites: writes},
	}
}

// withFloors gives each round the same null plugin's round.
func withFloors(rounds []Round) []Round {
	for i := range rounds {
		rounds[i].Floor = &Floor{RegisteredMs: 10, CPUMs: 10, AfterList: CPUWindow{WindowMs: 2000, CPUMs: 1}}
	}
	return rounds
}

func figureByName(t *testing.T, figs []Figure, prefix string) Figure {
	t.Helper()
	for _, f := range figs {
		if strings.HasPrefix(f.Name, prefix) {
			return f
		}
	}
	t.Fatalf("no figure %q among %v", prefix, figs)
	return Figure{}
}

func TestFigures(t *testing.T) {
	plan := testPlan()[:1]
	// Medians: the middle round's figures, except where a far round would
	// drag a mean.
	rounds := withFloors([]Round{testRound(1, 0), testRound(1.2, 0), testRound(100, 3)})
	figs := figures(plan, rounds)
	tests := []struct {
		prefix         string
		median         float64
		samples        int
		goal, result   string
		minimum, maxim float64
	}{
		{"launch -> all resources registered", 18, 3, "< 20.0 ms", Pass, 15, 1500},
		{"Allocate p99", 0.6, 3, "< 1.00 ms", Pass, 0.5, 50},
		{"GetPreferredAllocation p99, 4 of 8", 0.72, 3, "< 1.00 ms", Pass, 0.6, 60},
		{"XID 79", 3, 9, "< 50.0 ms", Pass, 1, 300},
		{"kubelet restart -> all re-registered", 6, 3, "< 200.0 ms", Pass, 5, 500},
		{"idle CPU", 0.12, 3, "< 0.50 % core", Pass, 0.1, 10},
		{"feature-file writes", 0, 3, "0", Pass, 0, 3},
		{"working set after load", 20000 * 1.2 / 1024, 3, "<= 25.0 MiB", Pass, 20000.0 / 1024, 20000 * 100.0 / 1024},
		{"featureplug: that CPU over the floor's", 23, 3, "<= 30.0 ms", Pass, 19, 1999},
		{"featureplug: launch -> all registered / floor", 1.8, 3, "<= 2.00 x", Pass, 1.5, 150},
	}
	for _, tt := range tests {
		f := figureByName(t, figs, tt.prefix)
		if !near(f.Median, tt.median) || f.Samples != tt.samples || f.Goal != tt.goal || f.Result != tt.result || !near(f.Min, tt.minimum) || !near(f.Max, tt.maxim) {
			t.Errorf("%s = %+v; want median %v of %d samples in [%v, %v], goal %q %s",
				tt.prefix, f, tt.median, tt.samples, tt.minimum, tt.maxim, tt.goal, tt.result)
		}
	}
	if f := figureByName(t, figs, "RSS after load"); f.Goal != "" || !near(f.Median, 30000*1.2*1024/1e6) {
		t.Errorf("RSS after load = %+v, want %v MB without a goal", f, 30000*1.2*1024/1e6)
	}
	if f := figureByName(t, figs, "CPU in the 2s after the first ListAndWatch"); !near(f.Median, 24) || f.Goal != "" {
		t.Errorf("CPU after the first ListAndWatch = %+v, want 24 ms", f)
	}

	// The same with most rounds bad: the goals are missed.
	figs = figures(plan, withFloors([]Round{testRound(2, 1), testRound(3, 1), testRound(1, 0)}))
	for _, prefix := range []string{"launch -> all resources registered", "Allocate p99", "GetPreferredAllocation p99, 4 of 8",
		"working set after load", "featureplug: that CPU over the floor's", "feature-file writes"} {
		if f := figureByName(t, figs, prefix); f.Result != Miss {
			t.Errorf("%s = %+v, want MISS", prefix, f)
		}
	}
	if f := figureByName(t, figs, "launch -> first Register"); f.Goal != "" || f.Result != "" {
		t.Errorf("informative figure %+v has a goal", f)
	}

	// Without a memory cgroup there is no working set, and RSS stays.
	rounds = []Round{testRound(1, 0)}
	rounds[0].MemoryLoad.Cgroup = CgroupMemory{}
	for _, f := range figures(plan, rounds) {
		if strings.Contains(f.Name, "working set") || strings.Contains(f.Name, "cgroup") {
			t.Errorf("figure %q without a cgroup", f.Name)
		}
	}
	figureByName(t, figures(plan, rounds), "RSS after load")
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestWriteTable(t *testing.T) {
	plan := testPlan()[:1]
	cfg := Config{Binary: "bin/featureplug", FakeNode: "dgx-h100", Rules: "mixed", Rounds: 2, Allocs: 10}
	machine := Machine{CPUs: 2, CPUModel: "Test CPU", Kernel: "6.0", Go: "go1.26", Agent: "featureplug dev",
		MemoryCgroup: "no memory cgroup (no cgroup v2 hierarchy; no cgroup v1 memory hierarchy): RSS only, no working set"}
	r := newReport(cfg, machine, plan,
		[]Round{testRound(1, 0), testRound(1, 0)})
	var buf bytes.Buffer
	if err := writeTable(&buf, r); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"fake node dgx-h100, rules mixed, 2 rounds, 10 calls",
		"2 CPUs (Test CPU)",
		"FIGURE", "launch -> all resources registered", "< 20.0 ms", "PASS",
		// The test rounds re-register in 5 ms: at the p99 goal, not under.
		"p99 < 5.00 ms", "goals met: 10 of 11",
		"\nmemory: no memory cgroup (no cgroup v2 hierarchy; no cgroup v1 memory hierarchy): RSS only, no working set\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if r.Resources["nvidia.com/gpu"] != 4 {
		t.Errorf("report resources = %v, want nvidia.com/gpu: 4", r.Resources)
	}
}
