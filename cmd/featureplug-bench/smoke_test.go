package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cgoFlags is the project's one CGO_CFLAGS value; another would rebuild
// go-nvml from scratch.
const cgoFlags = "-O2 -g -Wno-deprecated-declarations"

// buildAgent builds the featureplug binary into a temporary directory.
func buildAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "featureplug")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/featureplug/featureplug/cmd/featureplug")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS="+cgoFlags)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building featureplug: %v\n%s", err, out)
	}
	return bin
}

// buildNullPlugin builds the bench's null plugin into a temporary directory.
func buildNullPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nullplugin")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/featureplug/featureplug/cmd/featureplug-bench/nullplugin")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the null plugin: %v\n%s", err, out)
	}
	return bin
}

// TestBenchOneRound runs one short round against the real binary on the
// fake DGX A100 (four resources, MIG), beside the null plugin, and checks
// that every figure was measured and makes sense.
func TestBenchOneRound(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and launches the agent")
	}
	bin, null := buildAgent(t), buildNullPlugin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	jsonFile := filepath.Join(t.TempDir(), "bench.json")
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{
		"--featureplug", bin, "--null-plugin", null, "--fake-node", "dgx-a100", "--rules", "mixed",
		"--rounds", "1", "--allocs", "10", "--idle", "200ms", "--quiet", "600ms",
		"--json", jsonFile,
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("bench: %v\nstderr:\n%s", err, stderr.String())
	}
	data, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("--json file: %v", err)
	}
	if len(rep.Rounds) != 1 {
		t.Fatalf("%d rounds, want 1", len(rep.Rounds))
	}
	r := rep.Rounds[0]
	wantResources := map[string]int{"nvidia.com/gpu": 4, "nvidia.com/mig-1g.5gb": 6, "nvidia.com/mig-2g.10gb": 8, "nvidia.com/mig-3g.20gb": 2}
	for name, n := range wantResources {
		st, ok := r.Startup.Resources[name]
		if rep.Resources[name] != n || !ok || st.Devices != n || st.RegisteredMs <= 0 || st.ListedMs < st.RegisteredMs {
			t.Errorf("resource %s: planned %d, startup %+v; want %d devices registered, then listed", name, rep.Resources[name], st, n)
		}
	}
	if r.Startup.FirstRegisterMs > r.Startup.AllRegisteredMs || r.Startup.AllRegisteredMs > r.Startup.AllListedMs {
		t.Errorf("startup out of order: %+v", r.Startup)
	}
	if r.Init.VersionMs <= 0 || r.Init.PackageInitMs <= 0 || len(r.Init.Top) == 0 {
		t.Errorf("init cost not measured: %+v", r.Init)
	}
	if r.AllocResource != "nvidia.com/mig-2g.10gb" || r.AllocDevices != 8 || r.Allocate.Calls != 10 || r.Options.Calls != 10 {
		t.Errorf("allocation on %s (%d devices), %d Allocate and %d options calls; want 10 calls each on the 8 mig-2g.10gb",
			r.AllocResource, r.AllocDevices, r.Allocate.Calls, r.Options.Calls)
	}
	if len(r.Preferred) != 2 || r.Preferred[0].Size != 2 || r.Preferred[1].Size != 4 || r.Preferred[1].Calls != 10 || r.Preferred[1].P99 <= 0 {
		t.Errorf("preferred = %+v, want sizes 2 and 4 of 10 calls", r.Preferred)
	}
	if r.HealthResource != "nvidia.com/gpu" || len(r.HealthMs) != healthSamples {
		t.Errorf("health on %s: %v; want %d events on nvidia.com/gpu", r.HealthResource, r.HealthMs, healthSamples)
	}
	if len(r.Restarts) != restartSamples || r.Restarts[0].RegisteredMs <= 0 || r.Restarts[0].ListedMs < r.Restarts[0].RegisteredMs {
		t.Errorf("restarts = %+v", r.Restarts)
	}
	if r.MemoryStart.RSS <= 0 || r.MemoryLoad.RSS < r.MemoryLoad.Anon || r.MemoryLoad.Anon <= 0 {
		t.Errorf("memory start %+v, load %+v", r.MemoryStart, r.MemoryLoad)
	}
	if r.AfterList.WindowMs < ms(afterListWindow) || r.AfterList.CPUMs <= 0 || r.Floor == nil || r.Floor.AfterList.WindowMs < ms(afterListWindow) {
		t.Errorf("CPU after the first ListAndWatch = %+v, the floor's %+v; want both over %v", r.AfterList, r.Floor, afterListWindow)
	}
	if _, err := usableCgroupParent("/proc"); err != nil {
		if !strings.Contains(rep.Machine.MemoryCgroup, "no memory cgroup") || r.MemoryLoad.Cgroup != (CgroupMemory{}) {
			t.Errorf("no memory cgroup here (%v), but the report says %q and has %+v", err, rep.Machine.MemoryCgroup, r.MemoryLoad.Cgroup)
		}
	} else if c := r.MemoryLoad.Cgroup; c.Anon <= 0 || c.WorkingSet < c.Anon || c.Usage < c.WorkingSet ||
		r.Floor == nil || r.Floor.MemoryLoad.Cgroup.WorkingSet <= 0 || !strings.Contains(stdout.String(), "working set after load") {
		t.Errorf("cgroup memory after load %+v (the floor's %+v); want anonymous <= working set <= usage, in the table", c, r.Floor)
	}
	if r.Idle.WindowMs < 200 || r.Idle.Percent < 0 {
		t.Errorf("idle = %+v", r.Idle)
	}
	if r.Quiet.FileWrites != 0 || r.Quiet.PublishAttempts < 2 || r.Quiet.Rediscoveries < quietHUPs {
		t.Errorf("quiet = %+v; want no writes over several publishes and re-discoveries", r.Quiet)
	}
	if f := r.Floor; f == nil || f.RegisteredMs <= 0 || f.ListedMs < f.RegisteredMs || f.Allocate.Calls != 10 ||
		len(f.Restarts) != restartSamples || f.MemoryLoad.Anon <= 0 || r.FloorBinaryMB <= 0 || r.BinaryMB <= 0 {
		t.Errorf("null plugin floor = %+v (binaries %.1f and %.1f MB)", f, r.BinaryMB, r.FloorBinaryMB)
	}
	for _, want := range []string{"launch -> all resources registered", "GetPreferredAllocation p99, 4 of 8", "goals met:",
		"launch -> all registered / floor", "null plugin: RSS after load", "binary"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
}

func TestRunFlagErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-o", "yaml"}, `-o: "yaml" is not an output`},
		{[]string{"--rounds", "0", "--featureplug", os.Args[0]}, "--rounds: 0"},
		{[]string{"--featureplug", "/nonexistent/featureplug"}, "--featureplug: stat /nonexistent/featureplug"},
		{[]string{"--fake-node", "", "--featureplug", os.Args[0]}, "--fake-node: empty"},
		{[]string{"extra"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		var out bytes.Buffer
		err := run(context.Background(), tt.args, &out, &out)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("run %v: %v, want %q", tt.args, err, tt.want)
		}
	}
}
