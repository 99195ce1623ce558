package deviceplugin

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/rules/plan"
)

// bundledLinks is the link matrix featureplug discovers on a bundled fake
// node; the plugin tests' GPU i (gpuDevice: NUMA node i/4) is its GPU i.
func bundledLinks(t testing.TB, node string) discovery.LinkMatrix {
	t.Helper()
	n, err := fakenode.Named(node)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := discovery.Discover(n.NVML())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range inv.GPUs {
		if g.NUMANode != g.Index/4 {
			t.Fatalf("%s: GPU %d on NUMA node %d; the plugin tests put it on %d", node, g.Index, g.NUMANode, g.Index/4)
		}
	}
	return inv.Links
}

// dgxH100Plan is h100Plan on the real DGX H100 topology.
func dgxH100Plan(t testing.TB, name string) *plan.Plan {
	p := h100Plan(name)
	p.Links = bundledLinks(t, "dgx-h100")
	return p
}

// gpuIDs returns the UUIDs of GPUs idx.
func gpuIDs(idx ...int) []string {
	out := make([]string, len(idx))
	for i, x := range idx {
		out[i] = gpuUUID(x)
	}
	return out
}

// TestPreferredWholeGPUs picks on the real DGX H100 (bundled dgx-h100):
// NVSwitch connects every pair by NV18, so NVLink prefers nothing; each GPU
// sits behind its own PCIe switch, so a pair is NODE on one CPU socket and
// SYS across. Scores (discovery.Link.Score: 100 per lane + 20 NODE, 10 SYS):
// a same-socket pair 1820, a cross-socket pair 1810. Derivation per case:
//
//   - size 2 / 4 / 8: a set within one socket scores highest; lowest
//     indexes first: {0,1}, {0,1,2,3}, all.
//   - size 4 without 2 and 3: {4,5,6,7} = 6x1820 beats {0,1,4,5} =
//     2x1820 + 4x1810.
//   - size 2 from {3,4,5,6,7}: {4,5} (1820; with 3 only 1810).
//   - must 5, size 2: a partner on socket 1, lowest: {4,5}; must 6, size 4:
//     socket 1 whole.
//   - must 3 and 4 (one per socket), size 3: any third GPU adds 1820+1810,
//     always two NUMA nodes: lowest index, {0,3,4}. Must 7 and 0: {0,7}.
//   - size 3 from {0,1,4,5,6}: {4,5,6} = 3x1820 beats {0,1,4} = 1820+2x1810.
//   - size 5: {0,1,2,3,4} = 6x1820 + 4x1810 beats {0,1,2,4,5} = 4x1820 +
//     6x1810.
func TestPreferredWholeGPUs(t *testing.T) {
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	tests := []preferredCase{
		{"size 2 within a socket", all, nil, 2, []int{0, 1}},
		{"size 4 is a whole socket", all, nil, 4, []int{0, 1, 2, 3}},
		{"size 8 takes all", all, nil, 8, all},
		{"size 4 when socket 0 is partly used", []int{0, 1, 4, 5, 6, 7}, nil, 4, []int{4, 5, 6, 7}},
		{"size 2 when socket 0 has one left", []int{3, 4, 5, 6, 7}, nil, 2, []int{4, 5}},
		{"must-include pulls its socket", all, []int{5}, 2, []int{4, 5}},
		{"must-include in size 4", all, []int{6}, 4, []int{4, 5, 6, 7}},
		{"must-include across sockets", all, []int{3, 4}, 3, []int{0, 3, 4}},
		{"must-include fills the size", all, []int{7, 0}, 2, []int{0, 7}},
		{"size 3 from two split sockets prefers the socket with three", []int{0, 1, 4, 5, 6}, nil, 3, []int{4, 5, 6}},
		{"size 5 spans sockets", all, nil, 5, []int{0, 1, 2, 3, 4}},
		{"duplicates in available are ignored", []int{6, 6, 7, 7}, nil, 2, []int{6, 7}},
	}
	runPreferredCases(t, "dgx-h100", tests)
}

// TestPreferredPCIePairs picks on an HGX B200 server (bundled hgx-b200):
// NV18 between every pair as on the DGX H100, but GPUs 0-1, 2-3, 4-5 and
// 6-7 share a PCIe switch (PIX, +50: 1850), other same-socket pairs are
// NODE (1820), cross-socket pairs SYS (1810). Derivation per case:
//
//   - size 2: a PIX pair, lowest: {0,1}; without 0: {2,3} (1850) beats
//     {1,2} (1820).
//   - size 2 from {1,2,4,6}: no PIX pair left; same socket: {1,2} (1820).
//   - size 4 without 1: {4,5,6,7} = 2x1850 + 4x1820 beats {0,2,3,x}
//     (one PIX pair at most on socket 0).
//   - must 3, size 2: its switch partner {2,3}.
//   - size 3 from all: {0,1,x}: 1850 + 2x1820 with x = 2, the lowest.
func TestPreferredPCIePairs(t *testing.T) {
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	tests := []preferredCase{
		{"size 2 is a switch pair", all, nil, 2, []int{0, 1}},
		{"size 2 without 0 is the next pair", all[1:], nil, 2, []int{2, 3}},
		{"size 2 without pairs stays on a socket", []int{1, 2, 4, 6}, nil, 2, []int{1, 2}},
		{"size 4 prefers two whole pairs", []int{0, 2, 3, 4, 5, 6, 7}, nil, 4, []int{4, 5, 6, 7}},
		{"must-include takes its switch partner", all, []int{3}, 2, []int{2, 3}},
		{"size 3 is a pair and a neighbour", all, nil, 3, []int{0, 1, 2}},
	}
	runPreferredCases(t, "hgx-b200", tests)
}

func TestPreferredNUMATieBreak(t *testing.T) {
	// Four GPUs behind PCIe host bridges (equal scores): GPUs 0 and 3 on
	// NUMA node 1, GPUs 1 and 2 on node 0.
	links := make(discovery.LinkMatrix, 4)
	for i := range links {
		links[i] = make([]discovery.Link, 4)
		for j := range links[i] {
			if i != j {
				links[i][j] = discovery.Link{PCIe: discovery.PCIeHostBridge}
			}
		}
	}
	devs := gpus(0, 1, 2, 3)
	for i, n := range []int{1, 0, 0, 1} {
		devs[i].NUMANode = n
	}
	ds := newDeviceSet(plan.Resource{Name: "a.b/c", Devices: devs}, links)
	tests := []struct {
		name            string
		available, must []int
		want            []int
	}{
		{"same NUMA node, lowest index", []int{0, 1, 2, 3}, nil, []int{0, 3}},
		{"same NUMA node when 0 is taken", []int{1, 2, 3}, nil, []int{1, 2}},
		{"must-include picks its node", []int{0, 1, 2, 3}, []int{2}, []int{1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ds.preferred(gpuIDs(tt.available...), gpuIDs(tt.must...), 2, ReplicasDistributed)
			if err != nil {
				t.Fatal(err)
			}
			if want := gpuIDs(tt.want...); !slices.Equal(got, want) {
				t.Errorf("preferred = %v, want GPUs %v", got, tt.want)
			}
		})
	}
}

func TestPreferredLargeNodeUsesGreedy(t *testing.T) {
	// 32 GPUs in NVLink groups of 8: choosing 16 is past the exhaustive
	// bound and must still return two whole groups.
	n := 32
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	if binomialAtMost(n, 16, maxCombinations) {
		t.Fatal("test no longer exercises the greedy search")
	}
	ds := newDeviceSet(plan.Resource{Name: "a.b/c", Devices: gpus(idx...)}, nvlinkGroups(n, 8))
	got, err := ds.preferred(gpuIDs(idx...), gpuIDs(9), 8, ReplicasDistributed)
	if err != nil {
		t.Fatal(err)
	}
	if want := gpuIDs(8, 9, 10, 11, 12, 13, 14, 15); !slices.Equal(got, want) {
		t.Errorf("preferred = %v, want GPUs 8-15", got)
	}
	got, err = ds.preferred(gpuIDs(idx[4:]...), nil, 16, ReplicasDistributed)
	if err != nil {
		t.Fatal(err)
	}
	if want := gpuIDs(8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23); !slices.Equal(got, want) {
		t.Errorf("preferred = %v, want GPUs 8-23", got)
	}
}

func TestPreferredErrors(t *testing.T) {
	ds := newDeviceSet(h100Plan("nvidia.com/gpu").Resources[0], bundledLinks(t, "dgx-h100"))
	tests := []struct {
		name            string
		available, must []string
		size            int
		want            []string
	}{
		{"size over available", gpuIDs(0, 1), nil, 3, []string{"size 3", "2 available"}},
		{"must not available", gpuIDs(0, 1), gpuIDs(2), 2, []string{"must-include", gpuUUID(2)}},
		{"must over size", gpuIDs(0, 1, 2), gpuIDs(0, 1, 2), 2, []string{"3 must-include devices", "size 2"}},
		{"unknown available", []string{"GPU-nope"}, nil, 1, []string{"unknown device IDs", "GPU-nope"}},
		{"unknown must", gpuIDs(0), []string{"GPU-nope"}, 1, []string{"unknown device IDs", "GPU-nope"}},
		{"zero size", gpuIDs(0), nil, 0, []string{"size 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ds.preferred(tt.available, tt.must, tt.size, ReplicasDistributed)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("preferred error = %v, want InvalidArgument", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// replicaID is replica k of GPU i.
func replicaID(i, k int) string { return fmt.Sprintf("%s::%d", gpuUUID(i), k) }

// allReplicas lists replicas 0..r-1 of GPUs 0..n-1.
func allReplicas(n, r int, skip ...string) []string {
	var out []string
	for i := range n {
		for k := range r {
			if id := replicaID(i, k); !slices.Contains(skip, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

func TestPreferredReplicas(t *testing.T) {
	res := plan.Resource{
		Name:    "example.com/shared",
		Sharing: plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 4},
		Devices: gpus(0, 1, 2, 3),
	}
	ds := newDeviceSet(res, nvlinkGroups(4, 4))
	used := []string{replicaID(0, 0), replicaID(0, 1), replicaID(2, 0)}
	tests := []struct {
		name      string
		policy    ReplicaPolicy
		available []string
		must      []string
		size      int
		want      []string
	}{
		{"distributed spreads", ReplicasDistributed, allReplicas(4, 4), nil, 4,
			[]string{replicaID(0, 0), replicaID(1, 0), replicaID(2, 0), replicaID(3, 0)}},
		{"distributed wraps around", ReplicasDistributed, allReplicas(4, 4), nil, 6,
			[]string{replicaID(0, 0), replicaID(0, 1), replicaID(1, 0), replicaID(1, 1), replicaID(2, 0), replicaID(3, 0)}},
		{"distributed prefers least used", ReplicasDistributed, allReplicas(4, 4, used...), nil, 2,
			[]string{replicaID(1, 0), replicaID(3, 0)}},
		{"distributed with must-include", ReplicasDistributed, allReplicas(4, 4), []string{replicaID(2, 3)}, 2,
			[]string{replicaID(0, 0), replicaID(2, 3)}},
		{"packed fills one device", ReplicasPacked, allReplicas(4, 4), nil, 3,
			[]string{replicaID(0, 0), replicaID(0, 1), replicaID(0, 2)}},
		{"packed prefers most used", ReplicasPacked, allReplicas(4, 4, used...), nil, 3,
			[]string{replicaID(0, 2), replicaID(0, 3), replicaID(2, 1)}},
		{"packed stays with must-include", ReplicasPacked, allReplicas(4, 4), []string{replicaID(3, 1)}, 3,
			[]string{replicaID(3, 0), replicaID(3, 1), replicaID(3, 2)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ds.preferred(tt.available, tt.must, tt.size, tt.policy)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("preferred = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestPreferredOverGRPC asks over the socket on the real DGX H100 topology
// (picks derived in TestPreferredWholeGPUs).
func TestPreferredOverGRPC(t *testing.T) {
	e := startEnv(t, DefaultOptions(), dgxH100Plan(t, "nvidia.com/gpu"))
	e.waitRegistered(1, "nvidia.com/gpu")
	all := gpuIDs(0, 1, 2, 3, 4, 5, 6, 7)
	for _, tt := range []struct {
		must []string
		size int
		want []string
	}{
		{nil, 2, gpuIDs(0, 1)},
		{nil, 4, gpuIDs(0, 1, 2, 3)},
		{gpuIDs(6), 4, gpuIDs(4, 5, 6, 7)},
	} {
		got, err := e.kubelet.GetPreferredAllocation(e.ctx(), "nvidia.com/gpu", all, tt.must, tt.size)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("size %d must %v: got %v, want %v", tt.size, tt.must, got, tt.want)
		}
	}
	_, err := e.kubelet.GetPreferredAllocation(e.ctx(), "nvidia.com/gpu", all[:2], nil, 3)
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("impossible request: error %v, want InvalidArgument", err)
	}
}

// preferredCase is one pick of eight whole GPUs: from available, with
// must, of size; want are GPU indexes.
type preferredCase struct {
	name      string
	available []int
	must      []int
	size      int
	want      []int
}

// runPreferredCases picks on eight whole GPUs with the links of a bundled
// fake node.
func runPreferredCases(t *testing.T, node string, tests []preferredCase) {
	t.Helper()
	ds := newDeviceSet(h100Plan("nvidia.com/gpu").Resources[0], bundledLinks(t, node))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ds.preferred(gpuIDs(tt.available...), gpuIDs(tt.must...), tt.size, ReplicasDistributed)
			if err != nil {
				t.Fatal(err)
			}
			if want := gpuIDs(tt.want...); !slices.Equal(got, want) {
				t.Errorf("preferred = %v, want GPUs %v", got, tt.want)
			}
		})
	}
}
