package e2e

// End-to-end check of MPS as NVIDIA's device plugin does it: an MPS
// client's Allocate carries the pipe directory and a
// shared /dev/shm, a container gets one replica (failRequestsGreaterThanOne
// is forced), and the MPS-shared GPUs are in EXCLUSIVE_PROCESS compute
// mode while shared and back in DEFAULT once the rule is gone.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/test/harness"
)

// mpscfgRules shares GPUs 0 and 1 with MPS, 4 ways, and serves the other
// whole GPUs as nvidia.com/gpu.
const mpscfgRules = `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: mps
  devices: gpu
  matchFeatures:
  - feature: nvidia.gpu
    matchExpressions:
      index: {op: In, value: ["0", "1"]}
  resource: example.com/mps
  sharing:
    strategy: mps
    replicas: 4
    mps: {pinnedMemoryLimitMiB: 0, activeThreadPercentage: 0}
- name: whole
  devices: gpu
  resource: nvidia.com/gpu
`

// mpscfgRulesNoMPS serves every whole GPU as nvidia.com/gpu.
const mpscfgRulesNoMPS = `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: whole
  devices: gpu
  resource: nvidia.com/gpu
`

// mpscfgComputeModes returns the compute.mode attribute of every GPU the
// agent published, by UUID, from /debug/content.
func mpscfgComputeModes(a *agent) (map[string]string, error) {
	code, body, err := a.get("/debug/content")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/debug/content: %d %s", code, body)
	}
	var c struct {
		Features *struct {
			Instances map[string]struct {
				Elements []struct {
					Attributes map[string]string `json:"attributes"`
				} `json:"elements"`
			} `json:"instances"`
		}
	}
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		return nil, fmt.Errorf("decoding /debug/content: %w", err)
	}
	if c.Features == nil {
		return nil, fmt.Errorf("/debug/content has no features yet")
	}
	out := map[string]string{}
	for _, e := range c.Features.Instances["nvidia.gpu"].Elements {
		out[e.Attributes["uuid"]] = e.Attributes["compute.mode"]
	}
	return out, nil
}

// mpscfgWaitModes re-discovers (SIGHUP) and waits until the published
// compute mode of each GPU in want is what want says.
func mpscfgWaitModes(t *testing.T, a *agent, want map[string]string) {
	t.Helper()
	a.hup(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := waitFor(ctx, func() (bool, string) {
		got, err := mpscfgComputeModes(a)
		if err != nil {
			return false, err.Error()
		}
		for uuid, mode := range want {
			if got[uuid] != mode {
				return false, fmt.Sprintf("compute modes %v, want %v", got, want)
			}
		}
		return true, ""
	}); err != nil {
		t.Fatalf("published compute modes: %v", err)
	}
}

func TestMPSConfigAllocateShmAndComputeMode(t *testing.T) {
	if testing.Short() {
		t.Skip("runs featureplug")
	}
	inv := discover(t, "dgx-h100")
	gpu := func(i int) string { return inv.GPUs[i].UUID }

	mpsRoot := shortTempDir(t) // the daemons' sockets need a short path
	rulesFile := filepath.Join(shortTempDir(t), "rules.yaml")
	writeFileAtomic(t, rulesFile, []byte(mpscfgRules))

	kubeletDir := shortTempDir(t)
	peer := harness.StartKubeletPeer(t, kubeletDir)
	a := startAgent(t, agentSpec{Node: "mpscfg", FakeNode: "dgx-h100", Rules: rulesFile, KubeletDir: kubeletDir,
		Extra: append([]string{"--mps-root", mpsRoot}, mpsControlFlags(t)...)})
	waitCapacities(t, peer, map[string]int64{"example.com/mps": 2 * 4, "nvidia.com/gpu": 6})

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	alloc, err := peer.Allocate(ctx, "mps-client", "main", "example.com/mps", 1)
	if err != nil {
		t.Fatalf("Allocate 1 example.com/mps: %v", err)
	}
	pipe := filepath.Join(mpsRoot, "example.com_mps", "pipe")
	shm := filepath.Join(mpsRoot, "shm")
	if got := alloc.Envs["CUDA_MPS_PIPE_DIRECTORY"]; got != pipe {
		t.Errorf("CUDA_MPS_PIPE_DIRECTORY = %q, want %q", got, pipe)
	}
	for _, m := range []harness.Mount{{ContainerPath: pipe, HostPath: pipe}, {ContainerPath: "/dev/shm", HostPath: shm}} {
		if !slices.Contains(alloc.Mounts, m) {
			t.Errorf("mounts = %+v, want %+v among them", alloc.Mounts, m)
		}
	}
	if fi, err := os.Stat(shm); err != nil || fi.Mode()&(os.ModeSticky|0o777) != os.ModeSticky|0o777 {
		t.Errorf("shared memory directory %s: %v, %v; want a directory with mode 1777", shm, fi, err)
	}
	// failRequestsGreaterThanOne is forced for MPS: two replicas in one
	// container are refused.
	if _, err := peer.Allocate(ctx, "mps-greedy", "main", "example.com/mps", 2); err == nil {
		t.Error("Allocate 2 example.com/mps in one container succeeded, want a refusal (failRequestsGreaterThanOne)")
	}
	peer.RemovePod("mps-greedy")

	// The MPS GPUs are EXCLUSIVE_PROCESS while shared; the others are not.
	for _, i := range []int{0, 1} {
		a.waitMetric(t, "featureplug_mps_compute_mode_exclusive", func(v float64) bool { return v == 1 }, fmt.Sprintf("gpu=%q", gpu(i)))
	}
	mpscfgWaitModes(t, a, map[string]string{gpu(0): "ExclusiveProcess", gpu(1): "ExclusiveProcess", gpu(2): "Default"})

	// Without the MPS rule every GPU is whole again, the modes are
	// restored (before the new plan is served) and the shm directory is
	// gone.
	peer.RemovePod("mps-client")
	writeFileAtomic(t, rulesFile, []byte(mpscfgRulesNoMPS))
	if err := peer.WaitCapacity(ctx, "nvidia.com/gpu", 8, 8); err != nil {
		t.Fatalf("after removing the MPS rule: %v", err)
	}
	mpscfgWaitModes(t, a, map[string]string{gpu(0): "Default", gpu(1): "Default", gpu(2): "Default"})
	if _, err := os.Stat(shm); !os.IsNotExist(err) {
		t.Errorf("shared memory directory %s after the last MPS resource went: %v, want it removed", shm, err)
	}
	if _, body, err := a.get("/metrics"); err != nil || strings.Contains(body, fmt.Sprintf("featureplug_mps_compute_mode_exclusive{gpu=%q}", gpu(0))) {
		t.Errorf("featureplug_mps_compute_mode_exclusive{gpu=%s} still exported after the MPS rule went (or /metrics failed: %v)", gpu(0), err)
	}
}

// mpsControlFlags are the agent flags that give it a stand-in for
// nvidia-cuda-mps-control, which a fake node has not: the fake control
// binary of the mps package's tests (plugin/mps/testdata), copied to a
// directory of t's.
func mpsControlFlags(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(build.root, "plugin", "mps", "testdata", "nvidia-cuda-mps-control"))
	if err != nil {
		t.Fatal(err)
	}
	control := filepath.Join(t.TempDir(), "nvidia-cuda-mps-control")
	if err := os.WriteFile(control, src, 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{"--mps-control", control}
}
