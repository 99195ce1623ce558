package agent

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
)

// TestNVMLFailingAtStart: an agent whose NVML fails at start (every call
// answers ERROR_GPU_IS_LOST) starts anyway, advertises nothing, says why on
// /readyz and in featureplug_nvml_available, and serves every GPU once NVML
// answers, at the next re-discovery.
func TestNVMLFailingAtStart(t *testing.T) {
	src := openFakeT(t, "dgx-h100")
	src.SetNVMLFailure(nvml.ERROR_GPU_IS_LOST)
	dir := kubeletsim.ShortTempDir(t)
	k, err := kubeletsim.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	a, err := New(agentconfig.Config{
		NodeName: "unit", Source: src, Rules: "single", RulesEngine: testRulesEngine(),
		Plugin: deviceplugin.Options{KubeletDir: dir}, RediscoverInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	runAgent(t, a)
	srv := httptest.NewServer(a.handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for deadline := time.Now().Add(testWait); ; time.Sleep(20 * time.Millisecond) {
		code, body := get("/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "NVML fails since") && strings.Contains(body, "ERROR_GPU_IS_LOST") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz with NVML failing at start: %d %q", code, body)
		}
	}
	if _, body := get("/metrics"); !strings.Contains(body, "featureplug_nvml_available 0") {
		t.Error("featureplug_nvml_available is not 0 while NVML fails")
	}
	if labels := a.nvmlLabels(); labels["featureplug.io/nvml-unavailable"] != "true" {
		t.Errorf("labels while NVML fails: %v", labels)
	}

	src.SetNVMLFailure(nvml.SUCCESS)
	deadline := time.Now().Add(testWait)
	for {
		if _, healthy := k.Capacity("nvidia.com/gpu"); healthy == 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 8 healthy GPUs once NVML answers (capacity %v)", k.Devices("nvidia.com/gpu"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, body := get("/metrics"); !strings.Contains(body, "featureplug_nvml_available 1") {
		t.Error("featureplug_nvml_available is not 1 once NVML answers")
	}
	if labels := a.nvmlLabels(); len(labels) != 0 {
		t.Errorf("labels once NVML answers: %v", labels)
	}
}
