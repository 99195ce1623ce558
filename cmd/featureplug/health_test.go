package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/plugin/health"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
)

// TestHealthCommand: featureplug health prints a running agent's devices,
// Healthy, held by an XID with its reason, since and deadline, and all of
// them while NVML fails, with the line that says so; -o json gives the
// same report; an agent that is not there is a failure naming the URL,
// and a bad -o a usage error.
func TestHealthCommand(t *testing.T) {
	dir := kubeletsim.ShortTempDir(t)
	startKubelet(t, dir)
	p := startAgent(t, "--fake-node", "dgx-h100", "--publish", "none", "--kubelet-dir", dir,
		"--health-recovery", "1h", "--rediscover-interval", "200ms")
	post := func(path string) {
		t.Helper()
		resp, err := http.Post(p.metrics+path, "", nil)
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("POST %s: %v %v", path, resp, err)
		}
		_ = resp.Body.Close()
	}
	tryReport := func() (health.Report, error) {
		var r health.Report
		out, err := execute(t, "health", "--agent", p.metrics, "-o", "json")
		if err == nil {
			err = json.Unmarshal([]byte(out), &r)
		}
		return r, err
	}
	eventually(t, "8 devices reported", func() bool { r, err := tryReport(); return err == nil && len(r.Devices) == 8 })
	report := func() health.Report {
		t.Helper()
		r, err := tryReport()
		if err != nil {
			t.Fatalf("health -o json: %v", err)
		}
		return r
	}

	post("/fake/xid?gpu=3&xid=62")
	eventually(t, "GPU 3 reported Unhealthy", func() bool {
		for _, d := range report().Devices {
			if d.Device.Reason == "xid-62" {
				return true
			}
		}
		return false
	})
	out, err := execute(t, "health", "--agent", p.metrics)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 9 || !strings.HasPrefix(lines[0], "RESOURCE") {
		t.Fatalf("health table:\n%s", out)
	}
	unhealthy := 0
	for _, l := range lines[1:] {
		if strings.Contains(l, "Unhealthy") {
			unhealthy++
			if !strings.Contains(l, "xid-62") || !strings.Contains(l, "(in 59m") && !strings.Contains(l, "(in 1h0m") {
				t.Errorf("GPU 3's line %q: want reason xid-62 and its deadline in about an hour", l)
			}
		} else if !strings.Contains(l, "Healthy") {
			t.Errorf("line %q says neither Healthy nor Unhealthy", l)
		}
	}
	if unhealthy != 1 {
		t.Errorf("%d Unhealthy lines, want 1:\n%s", unhealthy, out)
	}

	post("/fake/nvml?fail=unknown")
	eventually(t, "NVML reported failing", func() bool { return !report().NVML.Available })
	out, _ = execute(t, "health", "--agent", p.metrics)
	if !strings.HasPrefix(out, "NVML fails since") || strings.Count(out, "Unhealthy") != 8 || !strings.Contains(out, "nvml-unavailable") {
		t.Errorf("health while NVML fails:\n%s", out)
	}
	post("/fake/nvml")
	eventually(t, "NVML answering again", func() bool { return report().NVML.Available })

	_, stderr, code, _ := executeRoot(t, "health", "--agent", "http://127.0.0.1:1")
	if code != exitFailed {
		t.Errorf("health with no agent: exit %d, want %d", code, exitFailed)
	}
	if _, err := execute(t, "health", "--agent", "http://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "http://127.0.0.1:1/debug/health") {
		t.Errorf("health with no agent: %v; want an error naming the URL (stderr %q)", err, stderr)
	}
	if _, _, code, _ := executeRoot(t, "health", "-o", "yaml"); code != exitUsage {
		t.Errorf("health -o yaml: exit %d, want %d", code, exitUsage)
	}
}
