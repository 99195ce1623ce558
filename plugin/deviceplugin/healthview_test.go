package deviceplugin

import (
	"github.com/featureplug/featureplug/plugin/kubeletsim"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/featureplug/featureplug/discovery"
)

// TestUnhealthyAndOnHealthChange: the manager's unhealthy set, which
// other APIs (the DRA sink's taints) serve, follows health events and
// recovery, and OnHealthChange is called on each change of the set (not
// for more events on a device already unhealthy).
func TestUnhealthyAndOnHealthChange(t *testing.T) {
	clock := newFakeClock()
	var changes atomic.Int32
	opts := DefaultOptions()
	opts.KubeletDir = kubeletsim.ShortTempDir(t)
	opts.Clock = clock
	opts.HealthRecovery = time.Minute
	opts.OnHealthChange = func() { changes.Add(1) }
	m, err := NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	keys := func() []string {
		var out []string
		for _, d := range m.Unhealthy() {
			out = append(out, d.Key)
		}
		return out
	}
	if got := keys(); len(got) != 0 {
		t.Fatalf("unhealthy at start: %v", got)
	}

	m.Health(discovery.HealthEvent{GPUUUID: "GPU-b", Kind: discovery.EventXID, XID: 79})
	m.Health(discovery.HealthEvent{GPUUUID: "GPU-a", MIGUUID: "MIG-a1", Kind: discovery.EventECCDoubleBit})
	m.Health(discovery.HealthEvent{GPUUUID: "GPU-b", Kind: discovery.EventXID, XID: 48}) // already unhealthy
	if got, want := keys(), []string{"GPU-b", "MIG-a1"}; !slices.Equal(got, want) {
		t.Errorf("unhealthy %v, want %v (sorted)", got, want)
	}
	if got := m.Unhealthy()[0]; got.GPUUUID != "GPU-b" || got.Kind != discovery.EventXID || got.XID != 48 {
		t.Errorf("GPU-b record %+v, want the latest event (XID 48)", got)
	}
	if got := m.Unhealthy()[1]; got.GPUUUID != "GPU-a" || got.MIGUUID != "MIG-a1" || got.Kind != discovery.EventECCDoubleBit {
		t.Errorf("MIG-a1 record %+v", got)
	}
	if n := changes.Load(); n != 2 {
		t.Errorf("OnHealthChange called %d times for two devices turning unhealthy, want 2", n)
	}

	clock.Advance(time.Minute) // both quiet for a minute: recovered
	if got := keys(); len(got) != 0 {
		t.Errorf("unhealthy after the quiet period: %v", got)
	}
	if n := changes.Load(); n != 4 {
		t.Errorf("OnHealthChange called %d times after two recoveries, want 4", n)
	}
}
