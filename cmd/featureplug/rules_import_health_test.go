package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRulesImportHealthChecks: --env carries NVIDIA's health-check
// variables into the rules' health section, which explain then shows as the
// node's policy; a malformed --env is a usage error.
func TestRulesImportHealthChecks(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("version: v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "rules.yaml")
	_, stderr, err := runRules(t, "import", cfg, "-o", out, "--env", "DP_DISABLE_HEALTHCHECKS=109,48", "--env", "DP_ENABLE_HEALTHCHECKS=13")
	if err != nil {
		t.Fatalf("import: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "warning: NVIDIA's plugin always ignores XIDs 13, 31, 43, 45, 68, 109") {
		t.Errorf("stderr lacks the ignored-XIDs warning:\n%s", stderr)
	}
	stdout, _, err := runRules(t, "explain", "--rules", out, "--fake-node", "workstation", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		HealthPolicy struct {
			Source string
			XIDs   []struct {
				XID    uint64
				Effect string
			}
		}
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]string{}
	for _, x := range doc.HealthPolicy.XIDs {
		got[x.XID] = x.Effect
	}
	if doc.HealthPolicy.Source != `health[0] "nvidia-healthchecks"` || got[13] != "until-quiet" || got[48] != "none" || got[109] != "none" {
		t.Errorf("health policy = %+v", doc.HealthPolicy)
	}

	for _, bad := range []string{"DP_DISABLE_HEALTHCHECKS", "=all"} {
		_, _, err := runRules(t, "import", cfg, "--env", bad)
		if exitCode(err) != 2 || !strings.Contains(err.Error(), "want NAME=VALUE") {
			t.Errorf("--env %s: %v (exit %d), want a usage error", bad, err, exitCode(err))
		}
	}
	if _, _, err := runRules(t, "import", cfg, "--env", "DP_DISABLE_HEALTHCHECK=all"); exitCode(err) != 1 || !strings.Contains(err.Error(), "DP_DISABLE_HEALTHCHECK: not a variable rules import maps") {
		t.Errorf("unknown variable: %v", err)
	}
}
