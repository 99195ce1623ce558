package health

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/statedir"
	"github.com/featureplug/featureplug/plugin/health/healthtest"
	"github.com/featureplug/featureplug/rules/plan"
)

// newTracker returns a Tracker for a test, closed at its end.
func newTracker(t *testing.T, o Options) *Tracker {
	t.Helper()
	tr, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

// counter returns the value of the series of counter vec with labels.
func counter(t *testing.T, vec *prometheus.CounterVec, labels ...string) float64 {
	t.Helper()
	var m dto.Metric
	if err := vec.WithLabelValues(labels...).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestUnhealthyAndSubscribers: the unhealthy set, which every serving API
// reads, follows health events and recovery, and subscribers hear of each
// change of the set (not of more events on a device already unhealthy).
func TestUnhealthyAndSubscribers(t *testing.T) {
	clock := healthtest.NewClock()
	tr := newTracker(t, Options{Recovery: time.Minute, Clock: clock})
	var changes atomic.Int32
	tr.Subscribe(func() { changes.Add(1) })
	keys := func() []string {
		var out []string
		for _, d := range tr.Unhealthy() {
			out = append(out, d.Key)
		}
		return out
	}
	if got := keys(); len(got) != 0 || tr.Func() != nil {
		t.Fatalf("unhealthy at start: %v", got)
	}

	// Until-quiet decisions: XID 61 (contact support), and a double-bit
	// ECC error and XID 48 without NVML's evidence of a pending reset.
	tr.Record(discovery.HealthEvent{GPUUUID: "GPU-b", Kind: discovery.EventXID, XID: 61})
	tr.Record(discovery.HealthEvent{GPUUUID: "GPU-a", MIGUUID: "MIG-a1", Kind: discovery.EventECCDoubleBit})
	tr.Record(discovery.HealthEvent{GPUUUID: "GPU-b", Kind: discovery.EventXID, XID: 48}) // already unhealthy
	if got, want := keys(), []string{"GPU-b", "MIG-a1"}; !slices.Equal(got, want) {
		t.Errorf("unhealthy %v, want %v (sorted)", got, want)
	}
	if got := tr.Unhealthy()[0]; got.GPUUUID != "GPU-b" || got.Kind != discovery.EventXID || got.XID != 48 {
		t.Errorf("GPU-b record %+v, want the latest event (XID 48)", got)
	}
	bad := tr.Func()
	for _, c := range []struct {
		d    plan.Device
		want bool
	}{
		{plan.Device{ID: "GPU-b", GPUUUID: "GPU-b", Kind: plan.DeviceGPU}, true},
		{plan.Device{ID: "MIG-b0", GPUUUID: "GPU-b", Kind: plan.DeviceMIG}, true},
		{plan.Device{ID: "MIG-a1", GPUUUID: "GPU-a", Kind: plan.DeviceMIG}, true},
		{plan.Device{ID: "MIG-a0", GPUUUID: "GPU-a", Kind: plan.DeviceMIG}, false},
		{plan.Device{ID: "GPU-c", GPUUUID: "GPU-c", Kind: plan.DeviceGPU}, false},
	} {
		if got := bad(&c.d); got != c.want {
			t.Errorf("unhealthy(%s) = %v, want %v", c.d.ID, got, c.want)
		}
	}
	if n := changes.Load(); n != 2 {
		t.Errorf("subscribers called %d times for two devices turning unhealthy, want 2", n)
	}
	clock.Advance(time.Minute) // both quiet for a minute: recovered
	if got := keys(); len(got) != 0 {
		t.Errorf("unhealthy after the quiet period: %v", got)
	}
	if n := changes.Load(); n != 4 {
		t.Errorf("subscribers called %d times after two recoveries, want 4", n)
	}
}

// TestFailedWriteRetried: a state file that cannot be written (its
// directory cannot be made) is written once it can be, by the retry
// backoff alone (no new event), and a tracker started from it afterwards
// holds the device Unhealthy.
func TestFailedWriteRetried(t *testing.T) {
	clock := healthtest.NewClock()
	root := t.TempDir()
	blocker := filepath.Join(root, "state")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := statedir.Dir(filepath.Join(blocker, "featureplug"))
	tr := newTracker(t, Options{Recovery: time.Hour, StateDir: dir, Clock: clock,
		RetryBackoff: DefaultRetryBackoff})
	tr.Record(discovery.HealthEvent{GPUUUID: "GPU-a", Kind: discovery.EventXID, XID: 79})
	if got := counter(t, tr.metrics.writes, "error"); got != 1 {
		t.Fatalf("health_state_writes_total{error} = %v after a write into a file, want 1", got)
	}
	clock.Advance(2 * time.Second) // the first retry (1 s, jittered up to 1.5 s) fails too
	if got := counter(t, tr.metrics.writes, "error"); got != 2 {
		t.Fatalf("health_state_writes_total{error} = %v after the first retry, want 2", got)
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	clock.Advance(3 * time.Second) // the second retry (2 s, up to 3 s)
	if got := counter(t, tr.metrics.writes, "ok"); got != 1 {
		t.Fatalf("health_state_writes_total{ok} = %v once the directory can be made, want 1", got)
	}
	data, err := os.ReadFile(dir.Path(statedir.HealthFile))
	if err != nil || !strings.Contains(string(data), `"GPU-a"`) {
		t.Fatalf("state file: %q, %v", data, err)
	}
	clock.Advance(time.Minute)
	if got := counter(t, tr.metrics.writes, "ok") + counter(t, tr.metrics.writes, "error"); got != 3 {
		t.Errorf("%v writes in all, want 3: retries stop after a success", got)
	}
	restarted := newTracker(t, Options{Recovery: time.Hour, StateDir: dir, Clock: clock})
	if got := restarted.Unhealthy(); len(got) != 1 || got[0].Key != "GPU-a" {
		t.Errorf("after a restart: %+v, want GPU-a held Unhealthy", got)
	}
}

// TestStateFileRestored: records are restored until their deadline, a
// record saved without one gets a fresh quiet period, and an unreadable
// file is ignored.
func TestStateFileRestored(t *testing.T) {
	clock := healthtest.NewClock()
	dir := statedir.Dir(t.TempDir())
	write := func(st state) {
		t.Helper()
		b, _ := json.Marshal(st)
		if err := os.WriteFile(dir.Path(statedir.HealthFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	now := clock.Now()
	quiet := func(until time.Time) Hold {
		return Hold{Effect: discovery.EffectUntilQuiet, Until: until, Kind: discovery.EventXID, XID: 61, Reason: "xid-61", Since: now}
	}
	write(state{Version: stateVersion, Devices: []record{
		{Key: "GPU-1", GPUUUID: "GPU-1", Holds: []Hold{quiet(now.Add(-time.Second))}},
		{Key: "GPU-2", GPUUUID: "GPU-2", Holds: []Hold{quiet(now.Add(time.Hour))}},
		{Key: "GPU-3", GPUUUID: "GPU-3", Holds: []Hold{quiet(time.Time{})}},
		{Key: "GPU-4", GPUUUID: "GPU-4", Holds: []Hold{{Effect: discovery.EffectUntilReboot, BootID: "boot-0", Kind: discovery.EventXID, XID: 79}}},
		{Key: "GPU-5", GPUUUID: "GPU-5", Holds: []Hold{{Effect: discovery.EffectUntilReboot, BootID: "boot-1", Kind: discovery.EventXID, XID: 79}}},
		{Key: "GPU-6", GPUUUID: "GPU-6", Holds: []Hold{{Effect: discovery.EffectUntilReset, Kind: discovery.EventRetiredPagesPending}}},
	}})
	tr := newTracker(t, Options{Recovery: time.Minute, StateDir: dir, Clock: clock, BootID: "boot-1"})
	var keys []string
	for _, d := range tr.Unhealthy() {
		keys = append(keys, d.Key)
	}
	if want := []string{"GPU-2", "GPU-3", "GPU-5", "GPU-6"}; !slices.Equal(keys, want) {
		t.Errorf("restored %v, want %v (GPU-1's deadline passed, GPU-4 was held in another boot)", keys, want)
	}
	clock.Advance(time.Minute)
	keys = nil
	for _, d := range tr.Unhealthy() {
		keys = append(keys, d.Key)
	}
	if want := []string{"GPU-2", "GPU-5", "GPU-6"}; !slices.Equal(keys, want) {
		t.Errorf("a minute later: %v, want %v (GPU-3 got a fresh quiet period)", keys, want)
	}
	// A version 1 file (one deadline per device) reads as until-quiet holds.
	v1 := fmt.Sprintf(`{"version": 1, "devices": [{"device": "GPU-7", "gpuUUID": "GPU-7", "kind": "xid", "xid": 48, "recoverAt": %q}]}`,
		clock.Now().Add(time.Hour).Format(time.RFC3339))
	if err := os.WriteFile(dir.Path(statedir.HealthFile), []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := newTracker(t, Options{StateDir: dir, Clock: clock}).Unhealthy(); len(got) != 1 || got[0].Key != "GPU-7" || got[0].Effect != discovery.EffectUntilQuiet {
		t.Errorf("version 1 file restored %+v, want GPU-7 until-quiet", got)
	}
	for _, content := range []string{"{not json", `{"version": 99, "devices": []}`, `{"version": 1, "devices": [{"kind": "xid"}]}`,
		`{"version": 2, "devices": [{"device": "GPU-1", "gpuUUID": "GPU-1", "holds": [{"effect": "count"}]}]}`} {
		if err := os.WriteFile(dir.Path(statedir.HealthFile), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := newTracker(t, Options{StateDir: dir, Clock: clock}).Unhealthy(); len(got) != 0 {
			t.Errorf("state file %q restored %+v", content, got)
		}
	}
}
func TestXIDLabelBounded(t *testing.T) {
	for xid, want := range map[uint64]string{0: "", 79: "79", 48: "48", 119: "119", 1: "1", 18446744073709551611: "other", 100000: "other"} {
		if got := xidLabel(xid); got != want {
			t.Errorf("xidLabel(%d) = %q, want %q", xid, got, want)
		}
	}
	if got := kindLabel("made-up"); got != "other" {
		t.Errorf("kindLabel(made-up) = %q", got)
	}
}
