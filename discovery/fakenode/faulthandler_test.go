package fakenode_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery/fakenode"
)

// TestFaultHandlerHooks: the HTTP hooks play the reset, recovery-action,
// health-evidence and NVML-failure faults on the node, and refuse bad
// input naming it.
func TestFaultHandlerHooks(t *testing.T) {
	n, err := fakenode.Named("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(fakenode.FaultHandler(n))
	defer srv.Close()
	post := func(path, body string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var b strings.Builder
		buf := make([]byte, 512)
		for {
			k, err := resp.Body.Read(buf)
			b.Write(buf[:k])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, b.String()
	}
	lib := n.NVML()
	dev, _ := lib.DeviceGetHandleByIndex(2)

	if code, body := post("/fake/health?gpu=2", `{"rowRemapPending": true}`); code != http.StatusNoContent {
		t.Fatalf("POST /fake/health = %d %q", code, body)
	}
	if _, _, pending, _, ret := dev.GetRemappedRows(); ret != nvml.SUCCESS || !pending {
		t.Errorf("row remapping pending after /fake/health: %v, %v", pending, ret)
	}
	if code, body := post("/fake/recovery-action?gpu=2&action=gpu-reset", ""); code != http.StatusNoContent {
		t.Fatalf("POST /fake/recovery-action = %d %q", code, body)
	}
	if action, _, _, _ := fields(t, n, 2, 0); action != uint32(nvml.GPU_RECOVERY_ACTION_GPU_RESET) {
		t.Errorf("recovery action %d, want gpu-reset", action)
	}
	if code, body := post("/fake/reset?gpu=2", ""); code != http.StatusNoContent {
		t.Fatalf("POST /fake/reset = %d %q", code, body)
	}
	if _, _, pending, _, _ := dev.GetRemappedRows(); pending {
		t.Error("row remapping still pending after /fake/reset")
	}
	if action, _, _, _ := fields(t, n, 2, 0); action != uint32(nvml.GPU_RECOVERY_ACTION_NONE) {
		t.Errorf("recovery action %d after the reset, want none", action)
	}

	if code, body := post("/fake/nvml?fail=unknown", ""); code != http.StatusNoContent {
		t.Fatalf("POST /fake/nvml?fail=unknown = %d %q", code, body)
	}
	if _, ret := lib.DeviceGetCount(); ret != nvml.ERROR_UNKNOWN {
		t.Errorf("DeviceGetCount while NVML fails: %v, want ERROR_UNKNOWN", ret)
	}
	set, ret := lib.EventSetCreate()
	if ret != nvml.ERROR_UNKNOWN || set != nil {
		t.Errorf("EventSetCreate while NVML fails: %v", ret)
	}
	post("/fake/nvml?fail=gpu-is-lost", "")
	if _, ret := lib.DeviceGetHandleByIndex(0); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("DeviceGetHandleByIndex: %v, want ERROR_GPU_IS_LOST", ret)
	}
	post("/fake/nvml", "")
	if c, ret := lib.DeviceGetCount(); ret != nvml.SUCCESS || c != 8 {
		t.Errorf("DeviceGetCount once NVML answers: %d, %v", c, ret)
	}

	for path, want := range map[string]string{
		"/fake/recovery-action?gpu=2&action=reboot-please": `action: "reboot-please" is not a recovery action`,
		"/fake/nvml?fail=sometimes":                        `fail: "sometimes" is not an NVML failure`,
		"/fake/reset?gpu=99":                               "99",
		"/fake/health?gpu=2":                               "body:",
	} {
		body := ""
		if strings.HasPrefix(path, "/fake/health") {
			body = `{"rowRemapPendin": true}`
		}
		if code, got := post(path, body); code != http.StatusBadRequest || !strings.Contains(got, want) {
			t.Errorf("POST %s = %d %q, want 400 naming %q", path, code, got, want)
		}
	}
}
