package e2e

import (
	"context"
	"path/filepath"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/featureplug/featureplug/plugin/kubeletsim"
)

// discoveryFaultEvidenceNode is a fake node whose GPUs 0-2 carry evidence
// of earlier failures that NVML keeps across processes (pending row
// remapping; a failed remapping with 2 volatile double-bit ECC errors;
// pending retired pages) and GPUs 3-4 none.
func discoveryFaultEvidenceNode() string {
	return filepath.Join(build.root, "discovery", "testdata", "evidence.yaml")
}

// TestFault05NVMLEvidenceAtStart starts the agent on a node whose GPUs
// failed before it started: NVML will not replay their XIDs, but it keeps
// pending row remappings, pending retired pages and volatile double-bit
// ECC counts. The agent reads them at start-up, before it serves: the
// kubelet's first device list has GPUs 0-2 Unhealthy and 3-4 Healthy, and
// health_events_total counts each kind.
func TestFault05NVMLEvidenceAtStart(t *testing.T) {
	node := discoveryFaultEvidenceNode()
	inv := discover(t, node)
	if len(inv.GPUs) != 5 {
		t.Fatalf("%s has %d GPUs, want 5", node, len(inv.GPUs))
	}
	dir := shortTempDir(t)
	k, err := kubeletsim.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	a := startAgent(t, agentSpec{
		Node:       "fault-evidence",
		FakeNode:   node,
		Rules:      "single",
		KubeletDir: dir,
		StateDir:   filepath.Join(shortTempDir(t), "state"),
	})
	const resource = "nvidia.com/gpu"
	want := map[string]string{}
	for i, g := range inv.GPUs {
		want[g.UUID] = pluginapi.Healthy
		if i < 3 {
			want[g.UUID] = pluginapi.Unhealthy
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err = k.WaitFor(ctx, resource, func(devs []*pluginapi.Device) bool {
		if len(devs) != len(want) {
			return false
		}
		for _, d := range devs {
			if want[d.GetID()] != d.GetHealth() {
				return false
			}
		}
		return true
	})
	if err != nil {
		got := map[string]string{}
		for _, d := range k.Devices(resource) {
			got[d.GetID()] = d.GetHealth()
		}
		t.Fatalf("device health %v, want %v: %v", got, want, err)
	}
	if n := k.Updates(resource); n != 1 {
		t.Errorf("%d device lists; the first must already have GPUs 0-2 Unhealthy", n)
	}
	for _, kind := range []string{"row-remap-pending", "row-remap-failure", "ecc-volatile-double-bit", "retired-pages-pending"} {
		a.waitMetric(t, "featureplug_plugin_health_events_total", func(v float64) bool { return v >= 1 }, `kind="`+kind+`"`)
	}
	if v := a.metric(t, "featureplug_plugin_devices", `health="unhealthy"`); v != 3 {
		t.Errorf("featureplug_plugin_devices{health=unhealthy} = %v, want 3", v)
	}
}
