package agent

import (
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/cmd/internal/kube/kubeclientset"
	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/plugin/cdi"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/plugin/dra"
	"github.com/featureplug/featureplug/plugin/mps"
	"github.com/featureplug/featureplug/rules/plan"
)

// draMPSRules serves GPUs 0-1 of dgx-h100 as example.com/a, shared with
// MPS, and GPUs 2-3 as example.com/c, both through DRA; the others as
// example.com/b through the device plugin.
const draMPSRules = `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: a
  devices: gpu
  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {index: {op: In, value: ["0", "1"]}}}]
  resource: example.com/a
  serve: dra
  sharing: {strategy: mps, replicas: 4, mps: {activeThreadPercentage: 30, pinnedMemoryLimitMiB: 10240}}
- name: c
  devices: gpu
  matchFeatures: [{feature: nvidia.gpu, matchExpressions: {index: {op: In, value: ["2", "3"]}}}]
  resource: example.com/c
  serve: dra
- name: b
  devices: gpu
  resource: example.com/b
`

// draMPSStart runs an agent of e with the fake MPS control binary of
// plugin/mps below root until the test ends.
func draMPSStart(t *testing.T, e *draTestEnv, root string, records kubeRecords) *Agent {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the fake MPS control binary reads /proc")
	}
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "plugin", "mps", "testdata", mps.DefaultControlBinary))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(e.dir, mps.DefaultControlBinary)
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := New(agentconfig.Config{
		NodeName: "n", Source: e.src, Rules: e.rules, RulesEngine: testRulesEngine(),
		Kube:   kubeclientset.New(e.kube, nil),
		Plugin: deviceplugin.Options{KubeletDir: filepath.Join(e.dir, "kubelet")}, StateDir: e.stateDir, HealthRecovery: time.Hour,
		MPS: mps.Options{Root: root, ControlBinary: bin, CheckInterval: 20 * time.Millisecond, CommandTimeout: 5 * time.Second,
			Backoff: wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Steps: 1 << 30, Cap: 40 * time.Millisecond}},
		CDI:                cdi.DriverConfig{SpecDir: e.specDir, DriverRoot: filepath.Join(e.dir, "driver-root")},
		DRARegistryDir:     filepath.Join(e.dir, "plugins_registry"),
		DRAPluginDir:       filepath.Join(e.dir, "plugins", dra.DriverName),
		RediscoverInterval: time.Hour,
		FileSettle:         time.Millisecond,
		Logger:             slog.New(records),
	})
	if err != nil {
		t.Fatal(err)
	}
	_, stop := startAgentRun(t, a)
	t.Cleanup(func() {
		stop()
		draMPSKillDaemons(root)
	})
	return a
}

// draMPSKillDaemons kills every fake MPS daemon left running below root.
func draMPSKillDaemons(root string) {
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "nvidia-cuda-mps-control.pid" {
			return nil
		}
		b, _ := os.ReadFile(path)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return nil
	})
}

// TestDRAServesMPS: an MPS resource served through DRA gets its control
// daemon from the agent; its devices are withheld from the ResourceSlice
// (and the Table) while the daemon cannot start, with
// featureplug_mps_resource_unavailable at 1 and a warning, and published
// once it is up, shared as consumable capacity of one share per claim;
// the CDI cache resolves each such device's CDI ID to its device nodes
// plus the MPS client environment and the pipe and shm mounts.
func TestDRAServesMPS(t *testing.T) {
	e := newDRATestEnv(t)
	if err := os.WriteFile(e.rules, []byte(draMPSRules), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(e.dir, "mps")
	layout := plan.MPSLayout{Root: root}
	// The daemon cannot start until the test removes this file.
	failStart := filepath.Join(layout.ResourceDir("example.com/a"), "fake-fail-start")
	if err := os.MkdirAll(filepath.Dir(failStart), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(failStart, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	records := make(kubeRecords, 1<<16)
	a := draMPSStart(t, e, root, records)

	// Daemon down: only example.com/c's two GPUs are published.
	kubeWaitRecord(t, records, "MPS resource held back until its control daemon is up", "resource=example.com/a")
	kubeWaitRecord(t, records, "ResourceSlice created", "devices=2")
	gpus := make([]string, 4)
	for i := range gpus {
		gpus[i] = draattr.DeviceName(draTestGPU(t, a, i))
	}
	if got := draMPSDeviceNames(e.slice(t).Spec.Devices); !slices.Equal(got, slices.Sorted(slices.Values(gpus[2:]))) {
		t.Fatalf("slice devices %v while the MPS daemon is down, want only example.com/c's %v", got, gpus[2:])
	}
	if _, ok := sinkOf[*dra.Sink](t, a).Table().Lookup(gpus[0]); ok {
		t.Error("the MPS device is in the Table while its daemon is down")
	}
	if got := draTestMetric(t, a, "featureplug_mps_resource_unavailable", "resource", "example.com/a"); got != 1 {
		t.Errorf("featureplug_mps_resource_unavailable{resource=example.com/a} = %v while the daemon is down, want 1", got)
	}

	// Daemon up: the MPS devices are published.
	if err := os.Remove(failStart); err != nil {
		t.Fatal(err)
	}
	kubeWaitRecord(t, records, "ResourceSlice updated", "devices=4")
	s := e.slice(t)
	if got := draMPSDeviceNames(s.Spec.Devices); !slices.Equal(got, slices.Sorted(slices.Values(gpus))) {
		t.Fatalf("slice devices %v once the MPS daemon is up, want %v", got, gpus)
	}
	for _, d := range s.Spec.Devices {
		shares, ok := d.Capacity[dra.CapShares]
		mpsDev := d.Name == gpus[0] || d.Name == gpus[1]
		switch {
		case mpsDev && (d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations || !ok || shares.Value.Value() != 4 ||
			shares.RequestPolicy == nil || shares.RequestPolicy.ValidRange == nil || shares.RequestPolicy.ValidRange.Max == nil ||
			shares.RequestPolicy.ValidRange.Max.Value() != 1):
			t.Errorf("MPS device %s: allowMultipleAllocations %v, shares %+v; want true and 4 shares, at most 1 per request", d.Name, d.AllowMultipleAllocations, shares)
		case !mpsDev && (d.AllowMultipleAllocations != nil || ok):
			t.Errorf("unshared device %s: allowMultipleAllocations %v, shares %+v; want neither", d.Name, d.AllowMultipleAllocations, shares)
		}
	}
	if got := draTestMetric(t, a, "featureplug_mps_resource_unavailable", "resource", "example.com/a"); got != 0 {
		t.Errorf("featureplug_mps_resource_unavailable{resource=example.com/a} = %v once the daemon is up, want 0", got)
	}
	pipe := layout.PipeDir("example.com/a")
	log, err := os.ReadFile(filepath.Join(pipe, "fake-commands.log"))
	if err != nil || !strings.Contains(string(log), "-d CUDA_VISIBLE_DEVICES=") {
		t.Errorf("the agent did not start the MPS daemon of the DRA resource (%v):\n%s", err, log)
	}

	// The CDI spec entry of each MPS device carries the MPS edits.
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(e.specDir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) > 0 {
		t.Fatalf("CDI cache errors: %v", errs)
	}
	tab := sinkOf[*dra.Sink](t, a).Table()
	for i, name := range gpus {
		d, ok := tab.Lookup(name)
		if !ok || len(d.CDIDevices) != 1 {
			t.Fatalf("device %s: table entry %+v (found %v)", name, d, ok)
		}
		dev := cache.GetDevice(d.CDIDevices[0])
		if dev == nil {
			t.Fatalf("device %s: CDI ID %s does not resolve", name, d.CDIDevices[0])
		}
		edits := dev.ContainerEdits
		if len(edits.DeviceNodes) == 0 {
			t.Errorf("%s: no device nodes", d.CDIDevices[0])
		}
		var mounts []string
		for _, m := range edits.Mounts {
			mounts = append(mounts, m.HostPath+":"+m.ContainerPath)
		}
		var wantEnv, wantMounts []string
		if i < 2 {
			wantEnv = []string{
				"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30",
				"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M",
				"CUDA_MPS_PIPE_DIRECTORY=" + pipe,
			}
			wantMounts = []string{pipe + ":" + pipe, layout.ShmDir() + ":" + plan.MPSShmContainerPath}
		}
		if !slices.Equal(edits.Env, wantEnv) || !slices.Equal(mounts, wantMounts) {
			t.Errorf("%s: env %v mounts %v, want env %v mounts %v", d.CDIDevices[0], edits.Env, mounts, wantEnv, wantMounts)
		}
	}
}

// draMPSDeviceNames returns the sorted names of devs.
func draMPSDeviceNames(devs []resourceapi.Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.Name)
	}
	slices.Sort(out)
	return out
}
