package rules

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/featureplug/featureplug/discovery"
)

// healthFile is a rules file with one rule (lines 4-6) and a health
// section from line 7.
const healthFile = header + "- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\nhealth:\n"

func h100Node() *discovery.Inventory { return testInventory(testGPU(0, "NVIDIA H100 80GB HBM3")) }

// TestHealthPerNodePool: an override changes one XID's effect on one node
// pool and not on another; a node no entry selects keeps the defaults.
func TestHealthPerNodePool(t *testing.T) {
	rs, err := Parse("r.yaml", []byte(healthFile+`- name: inference
  nodeSelector: {matchLabels: {pool: inference}}
  xids: {94: until-quiet}
  quietPeriod: 10m
  fenceOnNVMLFailure: false
- name: training
  nodeSelector: {matchLabels: {pool: training}}
  resolutions: {RESET_GPU: until-reboot}
  events: {ecc-volatile-double-bit: none}
  quietPeriods: {nvlink-errors: 1h}
  unknownXID: count
`))
	if err != nil {
		t.Fatal(err)
	}
	if w := rs.Warnings(); len(w) > 0 {
		t.Errorf("warnings: %v", w)
	}
	xid94 := discovery.HealthEvent{Kind: discovery.EventXID, XID: 94}
	xid95 := discovery.HealthEvent{Kind: discovery.EventXID, XID: 95, ResetPending: true}
	tests := []struct {
		pool             string
		source           string
		effect94         discovery.HealthEffect
		quiet94          time.Duration
		effect95         discovery.HealthEffect
		fences           bool
		volatileECC      discovery.HealthEffect
		nvlinkQuiet      time.Duration
		unknownXIDEffect discovery.HealthEffect
	}{
		{"inference", `health[0] "inference"`, "until-quiet", 10 * time.Minute, "until-reset", false, "until-quiet", 10 * time.Minute, "until-quiet"},
		{"training", `health[1] "training"`, "count", 0, "until-reboot", true, "none", time.Hour, "count"},
		{"batch", "", "count", 0, "until-reset", true, "until-quiet", 5 * time.Minute, "until-quiet"},
	}
	for _, tt := range tests {
		p, err := rs.Plan(h100Node(), map[string]string{"pool": tt.pool})
		if err != nil {
			t.Fatal(err)
		}
		if p.HealthSource != tt.source || (p.Health == nil) != (tt.source == "") {
			t.Errorf("%s: health %+v from %q, want %q", tt.pool, p.Health, p.HealthSource, tt.source)
		}
		policy := discovery.HealthPolicy{}.With(p.Health)
		d94, d95 := discovery.Decide(xid94, policy), discovery.Decide(xid95, policy)
		if d94.Effect != tt.effect94 || d94.QuietPeriod != tt.quiet94 || d95.Effect != tt.effect95 {
			t.Errorf("%s: XID 94 %s %v, XID 95 %s; want %s %v, %s", tt.pool, d94.Effect, d94.QuietPeriod, d95.Effect, tt.effect94, tt.quiet94, tt.effect95)
		}
		if policy.Fences() != tt.fences {
			t.Errorf("%s: fences %v, want %v", tt.pool, policy.Fences(), tt.fences)
		}
		if d := discovery.Decide(discovery.HealthEvent{Kind: discovery.EventECCVolatileDoubleBit}, policy); d.Effect != tt.volatileECC {
			t.Errorf("%s: volatile ECC evidence %s, want %s", tt.pool, d.Effect, tt.volatileECC)
		}
		if q := policy.QuietPeriodFor(discovery.EventNVLinkErrors); q != tt.nvlinkQuiet {
			t.Errorf("%s: nvlink-errors quiet period %v, want %v", tt.pool, q, tt.nvlinkQuiet)
		}
		if e, _ := policy.XIDEffect(999); e != tt.unknownXIDEffect {
			t.Errorf("%s: unknown XID %s, want %s", tt.pool, e, tt.unknownXIDEffect)
		}
	}
	if got := rs.HealthSummary(); got != "health: inference (nodeSelector pool=inference), training (nodeSelector pool=training)" {
		t.Errorf("HealthSummary = %q", got)
	}
}

// TestHealthPlanIsItsOwn: the plan's policy is a copy; changing it does not
// change the next plan.
func TestHealthPlanIsItsOwn(t *testing.T) {
	rs, err := Parse("r.yaml", []byte(healthFile+"- name: all\n  xids: {94: none}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := rs.Plan(h100Node(), nil)
	p1.Health.XIDs[94] = "until-reboot"
	p2, _ := rs.Plan(h100Node(), nil)
	if p2.Health.XIDs[94] != "none" {
		t.Errorf("a plan's change reached the rule set: %v", p2.Health.XIDs)
	}
}

// TestHealthErrors: every problem names the file, line, entry, field and
// value, and all of them come at once.
func TestHealthErrors(t *testing.T) {
	tests := []struct {
		name  string
		entry string
		want  string
	}{
		{"unknown field", "- name: a\n  xid: {94: none}\n", `r.yaml:9: health[0] "a": unknown field "xid"`},
		{"no name", "- xids: {94: none}\n", `r.yaml:8: health[0]: name: required: health entries are named in plans and explanations`},
		{"duplicate name", "- name: a\n- name: a\n  nodeSelector: {matchLabels: {p: x}}\n", `r.yaml:9: health[1] "a": name: name already used by health[0] (have "a")`},
		{"bad selector", "- name: a\n  nodeSelector: {matchLabels: {\"a b\": x}}\n", `r.yaml:9: health[0] "a": nodeSelector: `},
		{"bad XID", "- name: a\n  xids: {ninety: none}\n", `r.yaml:9: health[0] "a": xids.ninety: an XID is a number from 1 (have "ninety")`},
		{"XID 0", "- name: a\n  xids: {0: none}\n", `r.yaml:9: health[0] "a": xids.0: an XID is a number from 1 (have "0")`},
		{"bad effect", "- name: a\n  xids: {79: reboot}\n", `r.yaml:9: health[0] "a": xids.79: not an effect (have none, count, until-quiet, until-reset, until-reboot) (have "reboot")`},
		{"effect not a string", "- name: a\n  xids: {79: 5}\n", `r.yaml:9: health[0] "a": xids.79: not an effect (have none, count, until-quiet, until-reset, until-reboot) (have "5")`},
		{"bad resolution", "- name: a\n  resolutions: {RESET: none}\n", `r.yaml:9: health[0] "a": resolutions.RESET: not a resolution of NVIDIA's XID catalog (have IGNORE, RESTART_APP, `},
		{"bad unknownXID", "- name: a\n  unknownXID: ignore\n", `r.yaml:9: health[0] "a": unknownXID: not an effect`},
		{"events: xid", "- name: a\n  events: {xid: none}\n", `r.yaml:9: health[0] "a": events.xid: XIDs are set in xids, resolutions and unknownXID (have "xid")`},
		{"events: reset-cleared", "- name: a\n  events: {reset-cleared: none}\n", `r.yaml:9: health[0] "a": events.reset-cleared: reset-cleared is the evidence that ends until-reset holds`},
		{"events: unknown kind", "- name: a\n  events: {nvlink: none}\n", `r.yaml:9: health[0] "a": events.nvlink: not a kind of health event (have ecc-double-bit, gpu-lost, `},
		{"bad quiet period", "- name: a\n  quietPeriod: soon\n", `r.yaml:9: health[0] "a": quietPeriod: not a duration (e.g. "90s", "10m", "1h30m"; "0s": no recovery) (have "soon")`},
		{"negative quiet period", "- name: a\n  quietPeriods: {xid: -5m}\n", `r.yaml:9: health[0] "a": quietPeriods.xid: must be 0 or more (0s: no recovery) (have "-5m")`},
		{"quiet period without a unit", "- name: a\n  quietPeriod: 300\n", `r.yaml:9: health[0] "a": quietPeriod: a duration needs a unit, e.g. "300s" or "300m" (have "300")`},
		{"fence not a bool", "- name: a\n  fenceOnNVMLFailure: sometimes\n", `r.yaml:9: health[0] "a": fenceOnNVMLFailure: must be true or false, not string (have sometimes)`},
		{"not a list", "  xids: {}\n", `r.yaml:8: health: must be a list, not object`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("r.yaml", []byte(healthFile+tt.entry))
			var e *Error
			if !errors.As(err, &e) || !strings.HasPrefix(e.Error(), tt.want) {
				t.Errorf("error:\n got %v\nwant %s", err, tt.want)
			}
		})
	}

	// Every problem at once, the rules' with the health section's.
	_, err := Parse("r.yaml", []byte(header+"- name: gpu\n  devices: gpus\n  resource: nvidia.com/gpu\nhealth:\n- name: a\n  xids: {79: reboot}\n  quietPeriod: soon\n"))
	if err == nil || strings.Count(err.Error(), "\n") != 2 {
		t.Errorf("want three errors, got %v", err)
	}
}

func TestHealthWarnings(t *testing.T) {
	rs, err := Parse("r.yaml", []byte(healthFile+`- name: all
  xids: {999: until-reset}
  events: {gpu-lost: until-reset}
- name: later
  nodeSelector: {matchLabels: {pool: a}}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`r.yaml:9: health[0] "all": xids.999: XID 999 is not in NVIDIA's XID catalog (XIDs 1-172); the override applies if a driver reports it`,
		`r.yaml:10: health[0] "all": events.gpu-lost: gpu-lost events carry no NVML evidence of a pending reset, so until-reset holds them for the quiet period (have "until-reset")`,
		`r.yaml:11: health[1] "later": health[0] "all" before it selects every node, so this entry never applies`,
	}
	got := rs.Warnings()
	if len(got) != len(want) {
		t.Fatalf("warnings:\n%s", strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("warning %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}
