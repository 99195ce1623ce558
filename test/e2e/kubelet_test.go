package e2e

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/featureplug/featureplug/test/harness"
)

// mixedDGXA100 is the capacity per resource of the bundled dgx-a100 fake
// node under the builtin mixed rules: GPUs 4-7 whole, GPUs 0-3 in MIG.
var mixedDGXA100 = map[string]int64{
	"nvidia.com/gpu":         4,
	"nvidia.com/mig-1g.5gb":  6,
	"nvidia.com/mig-2g.10gb": 8,
	"nvidia.com/mig-3g.20gb": 2,
	"nvidia.com/mig-2g.20gb": 0,
	"nvidia.com/mig-1g.10gb": 0,
}

// waitCapacities waits until the peer reports each resource with the given
// capacity, all of it allocatable.
func waitCapacities(t *testing.T, peer *harness.KubeletPeer, want map[string]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for res, n := range want {
		if err := peer.WaitCapacity(ctx, res, n, n); err != nil {
			t.Fatalf("kubelet peer in %s: %v", peer.Dir, err)
		}
	}
}

// testKubelet runs the agent against the kubelet's own device manager:
// capacity per resource, allocations with the expected devices and
// environment, recovery after a kubelet restart, and an XID taking a device
// out of the allocatable count.
func (c *cluster) testKubelet(t *testing.T) {
	parent := t
	dir := shortTempDir(t)
	peer := harness.StartKubeletPeer(t, dir)
	start := time.Now()
	a := startAgent(t, agentSpec{
		Node:       "kube-dgx-a100",
		FakeNode:   "dgx-a100",
		Rules:      "mixed",
		KubeletDir: dir,
	})
	waitCapacities(t, peer, mixedDGXA100)
	t.Logf("all resources registered %s after the agent started", time.Since(start).Round(time.Millisecond))
	a.waitMetric(t, "featureplug_ready", func(v float64) bool { return v == 1 })

	inv := discover(t, "dgx-a100")
	var whole, migs1g []string
	uuidIndex := map[string]int{}
	for _, g := range inv.GPUs {
		uuidIndex[g.UUID] = g.Index
		if !g.MIGEnabled {
			whole = append(whole, g.UUID)
		}
		for _, m := range g.MIGDevices {
			if m.Profile == "1g.5gb" {
				migs1g = append(migs1g, m.UUID)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	t.Run("AllocateWholeGPUs", func(t *testing.T) {
		got, err := peer.Allocate(ctx, "train", "main", "nvidia.com/gpu", 2)
		if err != nil {
			t.Fatal(err)
		}
		defer peer.RemovePod("train")
		ids := got.DeviceIDs["nvidia.com/gpu"]
		if len(ids) != 2 {
			t.Fatalf("allocated %v, want 2 devices", ids)
		}
		for _, id := range ids {
			if !slices.Contains(whole, id) {
				t.Errorf("allocated %s, which is not a whole GPU (whole GPUs: %v)", id, whole)
			}
		}
		// GPUs 4+5 and 6+7 share a PCIe switch: a topology-aware
		// preference picks one of those pairs.
		if i, j := uuidIndex[ids[0]], uuidIndex[ids[1]]; min(i, j)%2 != 0 || max(i, j) != min(i, j)+1 {
			t.Errorf("allocated GPUs %d and %d, want a pair behind one PCIe switch (4+5 or 6+7)", i, j)
		}
		env := strings.Split(got.Envs["NVIDIA_VISIBLE_DEVICES"], ",")
		sort.Strings(env)
		if !slices.Equal(env, ids) {
			t.Errorf("NVIDIA_VISIBLE_DEVICES=%q, want the allocated devices %v", got.Envs["NVIDIA_VISIBLE_DEVICES"], ids)
		}
	})

	t.Run("AllocateMIG", func(t *testing.T) {
		got, err := peer.Allocate(ctx, "infer", "main", "nvidia.com/mig-1g.5gb", 1)
		if err != nil {
			t.Fatal(err)
		}
		defer peer.RemovePod("infer")
		ids := got.DeviceIDs["nvidia.com/mig-1g.5gb"]
		if len(ids) != 1 || !slices.Contains(migs1g, ids[0]) {
			t.Fatalf("allocated %v, want one of the 1g.5gb MIG devices %v", ids, migs1g)
		}
		if env := got.Envs["NVIDIA_VISIBLE_DEVICES"]; env != ids[0] {
			t.Errorf("NVIDIA_VISIBLE_DEVICES=%q, want %q", env, ids[0])
		}
	})

	t.Run("KubeletRestart", func(t *testing.T) {
		peer.Stop()
		start := time.Now()
		// The new kubelet outlives this subtest, as the first one would.
		peer = harness.StartKubeletPeer(parent, dir)
		waitCapacities(t, peer, mixedDGXA100)
		t.Logf("every resource back %s after the kubelet restarted", time.Since(start).Round(time.Millisecond))
		if _, err := peer.Allocate(ctx, "after-restart", "main", "nvidia.com/mig-3g.20gb", 1); err != nil {
			t.Fatalf("allocating after the kubelet restart: %v", err)
		}
		peer.RemovePod("after-restart")
	})

	t.Run("XIDMakesDeviceUnhealthy", func(t *testing.T) {
		a.injectXID(t, 5, 79)
		if err := peer.WaitCapacity(ctx, "nvidia.com/gpu", 4, 3); err != nil {
			t.Fatalf("after XID 79 on GPU 5: %v", err)
		}
		if _, ok := peer.Devices("nvidia.com/gpu")[inv.GPUs[5].UUID]; ok {
			t.Errorf("GPU 5 (%s) is still among the healthy devices after XID 79", inv.GPUs[5].UUID)
		}
		// The other resources keep every device.
		for res, n := range mixedDGXA100 {
			if res == "nvidia.com/gpu" {
				continue
			}
			if c, al := peer.Capacity(res); c != n || al != n {
				t.Errorf("%s: capacity %d, allocatable %d after an XID on a whole GPU, want %d, %d", res, c, al, n, n)
			}
		}
	})
}
