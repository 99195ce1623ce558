package discovery_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/featureplug/featureplug/discovery"
)

func period(d time.Duration) *discovery.Period {
	p := discovery.Period(d)
	return &p
}

func TestDecide(t *testing.T) {
	xid := func(x uint64, resetPending bool) discovery.HealthEvent {
		return discovery.HealthEvent{Kind: discovery.EventXID, XID: x, ResetPending: resetPending}
	}
	kind := func(k discovery.HealthEventKind) discovery.HealthEvent { return discovery.HealthEvent{Kind: k} }
	action := func(a discovery.RecoveryAction) discovery.HealthEvent {
		return discovery.HealthEvent{Kind: discovery.EventRecoveryAction, RecoveryAction: a, ResetPending: true}
	}
	noQuiet := false
	tests := []struct {
		name      string
		ev        discovery.HealthEvent
		policy    discovery.HealthPolicy
		effect    discovery.HealthEffect
		quiet     time.Duration
		endsReset bool
		because   string // a part of Because
	}{
		{"restart-app XID is counted", xid(94, true), discovery.HealthPolicy{}, "count", 0, false, "catalog RESTART_APP"},
		{"ignore XID does nothing", xid(43, false), discovery.HealthPolicy{}, "none", 0, false, "catalog IGNORE"},
		{"reset XID with NVML's evidence", xid(109, true), discovery.HealthPolicy{}, "until-reset", 0, false, "catalog RESET_GPU"},
		{"reset XID without evidence falls back to the quiet period", xid(109, false), discovery.HealthPolicy{}, "until-quiet", 5 * time.Minute, false, "no reset pending"},
		{"fallen off the bus needs a reboot", xid(79, false), discovery.HealthPolicy{}, "until-reboot", 0, false, "catalog RESTART_BM"},
		{"contact-support XID is held for the quiet period", xid(142, false), discovery.HealthPolicy{}, "until-quiet", 5 * time.Minute, false, "catalog CONTACT_SUPPORT"},
		{"XID without a resolution is an unknown XID", xid(167, false), discovery.HealthPolicy{}, "until-quiet", 5 * time.Minute, false, "no resolution"},
		{"XID not in the catalog", xid(999, false), discovery.HealthPolicy{}, "until-quiet", 5 * time.Minute, false, "not in the catalog"},
		{"unknownXID override", xid(999, false), discovery.HealthPolicy{UnknownXID: "count"}, "count", 0, false, "policy unknownXID"},
		{"unknownXID covers XIDs without a resolution", xid(167, false), discovery.HealthPolicy{UnknownXID: "none"}, "none", 0, false, "policy unknownXID"},
		{"XID override wins over the catalog", xid(94, false), discovery.HealthPolicy{XIDs: map[uint64]discovery.HealthEffect{94: "until-quiet"}}, "until-quiet", 5 * time.Minute, false, "policy xids"},
		{"XID override wins over a resolution override", xid(109, true), discovery.HealthPolicy{
			XIDs:        map[uint64]discovery.HealthEffect{109: "none"},
			Resolutions: map[discovery.XIDResolution]discovery.HealthEffect{"RESET_GPU": "until-reboot"},
		}, "none", 0, false, "policy xids"},
		{"resolution override", xid(95, true), discovery.HealthPolicy{Resolutions: map[discovery.XIDResolution]discovery.HealthEffect{"RESET_GPU": "until-reboot"}}, "until-reboot", 0, false, "policy resolutions RESET_GPU"},
		{"quiet period per kind", xid(142, false), discovery.HealthPolicy{
			QuietPeriod:  period(time.Minute),
			QuietPeriods: map[discovery.HealthEventKind]discovery.Period{"xid": discovery.Period(time.Hour)},
		}, "until-quiet", time.Hour, false, ""},
		{"default quiet period from the policy", kind(discovery.EventGPULost), discovery.HealthPolicy{QuietPeriod: period(time.Minute)}, "until-quiet", time.Minute, false, "gpu-lost: default"},
		{"a quiet period of 0 never recovers", kind(discovery.EventNVLinkDown), discovery.HealthPolicy{QuietPeriod: period(0)}, "until-quiet", 0, false, ""},
		{"double-bit ECC with evidence", discovery.HealthEvent{Kind: discovery.EventECCDoubleBit, ResetPending: true}, discovery.HealthPolicy{}, "until-reset", 0, false, "ecc-double-bit: default"},
		{"pending row remapping", discovery.HealthEvent{Kind: discovery.EventRowRemapPending, ResetPending: true}, discovery.HealthPolicy{}, "until-reset", 0, false, ""},
		{"evidence that does not count", kind(discovery.EventECCVolatileDoubleBit), discovery.HealthPolicy{
			Events: map[discovery.HealthEventKind]discovery.HealthEffect{"ecc-volatile-double-bit": "none"},
		}, "none", 0, false, "policy events"},
		{"recovery action: node reboot", action(discovery.RecoveryNodeReboot), discovery.HealthPolicy{}, "until-reboot", 0, false, "recovery-action node-reboot: recovery action"},
		{"recovery action: drain and reset", action(discovery.RecoveryDrainAndReset), discovery.HealthPolicy{}, "until-reset", 0, false, ""},
		{"recovery action: one newer than go-nvml", action("action-9"), discovery.HealthPolicy{}, "until-reset", 0, false, ""},
		{"recovery action overridden", action(discovery.RecoveryGPUReset), discovery.HealthPolicy{
			Events: map[discovery.HealthEventKind]discovery.HealthEffect{"recovery-action": "count"},
		}, "count", 0, false, "policy events"},
		{"reset cleared ends until-reset holds", kind(discovery.EventResetCleared), discovery.HealthPolicy{}, "none", 0, true, ""},
		{"NVLink errors", kind(discovery.EventNVLinkErrors), discovery.HealthPolicy{}, "until-quiet", 5 * time.Minute, false, ""},
		{"a policy that was not validated: the safe side", xid(94, false), discovery.HealthPolicy{XIDs: map[uint64]discovery.HealthEffect{94: "reboot"}}, "until-quiet", 5 * time.Minute, false, `unknown effect "reboot"`},
		{"fencing does not change events", xid(94, false), discovery.HealthPolicy{FenceOnNVMLFailure: &noQuiet}, "count", 0, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := discovery.Decide(tt.ev, tt.policy)
			if d.Effect != tt.effect || d.QuietPeriod != tt.quiet || d.EndsReset != tt.endsReset {
				t.Errorf("Decide = %+v, want effect %s, quiet period %v, endsReset %v", d, tt.effect, tt.quiet, tt.endsReset)
			}
			if !strings.Contains(d.Because, tt.because) {
				t.Errorf("because %q, want it to contain %q", d.Because, tt.because)
			}
		})
	}
}

func TestHealthPolicyWith(t *testing.T) {
	yes, no := true, false
	base := discovery.HealthPolicy{
		XIDs:               map[uint64]discovery.HealthEffect{13: "none", 94: "count"},
		QuietPeriod:        period(time.Minute),
		FenceOnNVMLFailure: &yes,
	}
	over := &discovery.HealthPolicy{
		XIDs:               map[uint64]discovery.HealthEffect{94: "until-quiet"},
		Resolutions:        map[discovery.XIDResolution]discovery.HealthEffect{"RESET_GPU": "until-reboot"},
		QuietPeriods:       map[discovery.HealthEventKind]discovery.Period{"xid": discovery.Period(time.Hour)},
		FenceOnNVMLFailure: &no,
		UnknownXID:         "count",
	}
	got := base.With(over)
	want := discovery.HealthPolicy{
		XIDs:               map[uint64]discovery.HealthEffect{13: "none", 94: "until-quiet"},
		Resolutions:        map[discovery.XIDResolution]discovery.HealthEffect{"RESET_GPU": "until-reboot"},
		QuietPeriod:        period(time.Minute),
		QuietPeriods:       map[discovery.HealthEventKind]discovery.Period{"xid": discovery.Period(time.Hour)},
		FenceOnNVMLFailure: &no,
		UnknownXID:         "count",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("With = %+v\nwant %+v", got, want)
	}
	if base.XIDs[94] != "count" || !*base.FenceOnNVMLFailure {
		t.Errorf("With changed its receiver: %+v", base)
	}
	if got.Fences() || !(discovery.HealthPolicy{}).Fences() {
		t.Error("Fences: false when set false, true by default")
	}
	if !reflect.DeepEqual(base.With(nil), base) || !(discovery.HealthPolicy{}).IsZero() || over.IsZero() {
		t.Error("With(nil) is the policy; the zero policy is zero, an override is not")
	}
}

func TestHealthHolds(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		decision discovery.HealthDecision
		held     bool
		now      time.Time
		bootID   string
		ended    bool
	}{
		{"count holds nothing", discovery.HealthDecision{Effect: "count"}, false, at, "a", false},
		{"quiet, within the period", discovery.HealthDecision{Effect: "until-quiet", QuietPeriod: time.Minute}, true, at.Add(59 * time.Second), "a", false},
		{"quiet, past the period", discovery.HealthDecision{Effect: "until-quiet", QuietPeriod: time.Minute}, true, at.Add(time.Minute), "a", true},
		{"quiet without recovery", discovery.HealthDecision{Effect: "until-quiet"}, true, at.Add(24 * time.Hour), "a", false},
		{"reboot, same boot", discovery.HealthDecision{Effect: "until-reboot"}, true, at.Add(24 * time.Hour), "a", false},
		{"reboot, new boot", discovery.HealthDecision{Effect: "until-reboot"}, true, at, "b", true},
		{"reboot, boot unknown now", discovery.HealthDecision{Effect: "until-reboot"}, true, at, "", false},
		{"reset does not end by time or boot", discovery.HealthDecision{Effect: "until-reset"}, true, at.Add(24 * time.Hour), "b", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, held := tt.decision.Hold(at, "a")
			if held != tt.held {
				t.Fatalf("Hold held = %v, want %v", held, tt.held)
			}
			if held && h.Ended(tt.now, tt.bootID) != tt.ended {
				t.Errorf("%+v.Ended(%v, %q) = %v, want %v", h, tt.now, tt.bootID, !tt.ended, tt.ended)
			}
		})
	}
}

func TestStrongerEffect(t *testing.T) {
	effects := discovery.HealthEffects()
	for i, a := range effects {
		for j, b := range effects {
			want := a
			if j > i {
				want = b
			}
			if got := discovery.StrongerEffect(a, b); got != want {
				t.Errorf("StrongerEffect(%s, %s) = %s, want %s", a, b, got, want)
			}
		}
		if a.Unhealthy() != (i >= 2) || !a.Valid() {
			t.Errorf("%s: Unhealthy %v Valid %v", a, a.Unhealthy(), a.Valid())
		}
	}
	if discovery.HealthEffect("reboot").Valid() {
		t.Error(`"reboot" is not an effect`)
	}
}

func TestLinkSetText(t *testing.T) {
	s := discovery.LinkSet(0).Add(3).Add(17)
	text, _ := s.MarshalText()
	var back discovery.LinkSet
	if err := back.UnmarshalText(text); err != nil || back != s || string(text) != "3,17" || s.Len() != 2 {
		t.Errorf("LinkSet %v -> %q -> %v (%v)", s, text, back, err)
	}
	if err := back.UnmarshalText([]byte("3,x")); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("bad link: %v", err)
	}
}

func TestReadBootID(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(file, []byte("0f4a29c2-5e3b-4d6a-9c1e-7b8d2f3a4e5c\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id, err := discovery.ReadBootID(file); err != nil || id != "0f4a29c2-5e3b-4d6a-9c1e-7b8d2f3a4e5c" {
		t.Errorf("ReadBootID = %q, %v", id, err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{empty, filepath.Join(dir, "missing")} {
		if id, err := discovery.ReadBootID(path); err == nil {
			t.Errorf("ReadBootID(%s) = %q, want an error", path, id)
		}
	}
}
