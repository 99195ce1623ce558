package nvidiaconfig_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/nvidiaconfig"
)

// nvidiaUnhealthy is what NVIDIA's device plugin does with an XID under its
// environment, modelled on its internal/rm/health.go: "all" or "xids" in
// DP_DISABLE_HEALTHCHECKS turns health checks off unless
// DP_ENABLE_HEALTHCHECKS is "all"; an enabled XID wins over a disabled one
// and over the XIDs it always ignores.
func nvidiaUnhealthy(env map[string]string, xid uint64) bool {
	list := func(s string) (all bool, xids map[uint64]bool) {
		xids = map[uint64]bool{}
		for _, p := range strings.Split(strings.ToLower(s), ",") {
			p = strings.TrimSpace(p)
			if p == "all" || p == "xids" {
				return true, nil
			}
			if x, err := strconv.ParseUint(p, 10, 64); err == nil {
				xids[x] = true
			}
		}
		return false, xids
	}
	disableAll, disabled := list(env[nvidiaconfig.EnvDisableHealthChecks])
	enableAll, enabled := list(env[nvidiaconfig.EnvEnableHealthChecks])
	switch {
	case enableAll:
		return true
	case disableAll:
		return false
	case enabled[xid]:
		return true
	case disabled[xid]:
		return false
	}
	switch xid {
	case 13, 31, 43, 45, 68, 109:
		return false
	}
	return true
}

// TestImportHealthChecks converts NVIDIA's health-check environment and
// checks that the imported health section marks a GPU unhealthy for the
// same XIDs as NVIDIA's plugin: every XID when a variable says all, the
// XIDs a list names otherwise (the others follow NVIDIA's XID catalog,
// which the warnings point out).
func TestImportHealthChecks(t *testing.T) {
	var every []uint64
	for x := uint64(1); x <= 172; x++ {
		every = append(every, x)
	}
	every = append(every, 999)
	tests := []struct {
		name    string
		env     map[string]string
		checked []uint64 // the XIDs whose effect must match NVIDIA's
		rules   []string // parts of the converted file
		warns   []string // parts of the warnings, in order
	}{
		{"disable a list", map[string]string{"DP_DISABLE_HEALTHCHECKS": " 109, 48 ,x"}, []uint64{48, 109},
			[]string{"xids: {48: none, 109: none}"},
			[]string{`DP_DISABLE_HEALTHCHECKS= 109, 48 ,x: "x" is not an XID`, "always ignores XIDs 13, 31, 43, 45, 68, 109; featureplug follows NVIDIA's XID catalog instead (13: count, 31: count, 43: none, 45: count, 68: count)"}},
		{"enable over disable", map[string]string{"DP_DISABLE_HEALTHCHECKS": "48,94", "DP_ENABLE_HEALTHCHECKS": "48,13,109"}, []uint64{13, 48, 94, 109},
			[]string{"xids: {13: until-quiet, 48: until-reset, 94: none, 109: until-reset}"},
			[]string{"(31: count, 43: none, 45: count, 68: count)"}},
		{"disable all", map[string]string{"DP_DISABLE_HEALTHCHECKS": "ALL"}, every,
			[]string{"    RESET_GPU: none\n", "  unknownXID: none\n"},
			[]string{`DP_DISABLE_HEALTHCHECKS="ALL": featureplug still acts on what is not an XID`}},
		{"xids is all", map[string]string{"DP_DISABLE_HEALTHCHECKS": "13,xids"}, every, []string{"unknownXID: none"}, []string{"still acts on what is not an XID"}},
		{"disable all ignores enabled XIDs", map[string]string{"DP_DISABLE_HEALTHCHECKS": "all", "DP_ENABLE_HEALTHCHECKS": "79"}, every,
			[]string{"unknownXID: none"},
			[]string{`DP_ENABLE_HEALTHCHECKS="79": NVIDIA's plugin runs no health check at all with DP_DISABLE_HEALTHCHECKS=all`, "still acts on what is not an XID"}},
		{"enable all", map[string]string{"DP_ENABLE_HEALTHCHECKS": "all", "DP_DISABLE_HEALTHCHECKS": "79"}, every,
			[]string{"    RESTART_APP: until-quiet\n", "  unknownXID: until-quiet\n"},
			[]string{`DP_DISABLE_HEALTHCHECKS="79": NVIDIA's plugin checks every XID with DP_ENABLE_HEALTHCHECKS=all`}},
		{"empty", map[string]string{"DP_DISABLE_HEALTHCHECKS": ""}, nil, nil, []string{"always ignores XIDs"}},
	}
	cfg, err := nvidiaconfig.ParseConfig("config.yaml", "", "", []byte("version: v1\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := nvidiaconfig.Convert([]*nvidiaconfig.Config{cfg}, nvidiaconfig.Options{Env: tt.env})
			if err != nil {
				t.Fatal(err)
			}
			for _, part := range tt.rules {
				if !strings.Contains(string(res.Rules), part) {
					t.Errorf("rules lack %q:\n%s", part, res.Rules)
				}
			}
			if len(res.Warnings) != len(tt.warns) {
				t.Errorf("warnings:\n%s", strings.Join(res.Warnings, "\n"))
			}
			for i := range min(len(res.Warnings), len(tt.warns)) {
				if !strings.Contains(res.Warnings[i], tt.warns[i]) {
					t.Errorf("warning %d:\n got %s\nwant %s", i, res.Warnings[i], tt.warns[i])
				}
			}
			rs, err := rules.Parse("imported.yaml", res.Rules)
			if err != nil {
				t.Fatalf("the imported rules do not load: %v\n%s", err, res.Rules)
			}
			p, err := rs.Plan(&discovery.Inventory{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			policy := discovery.HealthPolicy{}.With(p.Health)
			for _, xid := range tt.checked {
				d := discovery.Decide(discovery.HealthEvent{Kind: discovery.EventXID, XID: xid, ResetPending: true}, policy)
				if want := nvidiaUnhealthy(tt.env, xid); d.Effect.Unhealthy() != want {
					t.Errorf("XID %d: %s (%s); NVIDIA's plugin marks it unhealthy: %v", xid, d.Effect, d.Because, want)
				}
			}
		})
	}
}

func TestImportHealthChecksUnknownVariable(t *testing.T) {
	cfg, err := nvidiaconfig.ParseConfig("config.yaml", "", "", []byte("version: v1\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = nvidiaconfig.Convert([]*nvidiaconfig.Config{cfg}, nvidiaconfig.Options{Env: map[string]string{"DP_DISABLE_HEALTHCHECK": "all"}})
	if err == nil || err.Error() != "--env: DP_DISABLE_HEALTHCHECK: not a variable rules import maps (it maps DP_DISABLE_HEALTHCHECKS and DP_ENABLE_HEALTHCHECKS)" {
		t.Errorf("error = %v", err)
	}
}
