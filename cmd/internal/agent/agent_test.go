package agent

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/discovery/gpusource"
	"github.com/featureplug/featureplug/plugin/kubeletsim"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
)

// noEventsLib is an NVML whose event sets cannot be created, so the health
// watcher stops at once.
type noEventsLib struct{ nvml.Interface }

func (noEventsLib) EventSetCreate() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_UNKNOWN }

// noEventsSource is a fake node behind noEventsLib.
type noEventsSource struct{ *gpusource.Fake }

func (s noEventsSource) Discover() (*discovery.Inventory, nvml.Interface, error) {
	inv, lib, err := s.Fake.Discover()
	return inv, noEventsLib{lib}, err
}

// TestHealthzFailsWhenTheHealthWatcherStops: a health watcher that stops on
// its own (not because the agent stopped it) fails /healthz, naming it.
func TestHealthzFailsWhenTheHealthWatcherStops(t *testing.T) {
	src, err := gpusource.OpenFake("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dir := kubeletsim.ShortTempDir(t)
	a, err := New(agentconfig.Config{
		NodeName: "unit", Source: noEventsSource{src}, Rules: "none", RulesEngine: testRulesEngine(),
		Plugin: deviceplugin.Options{KubeletDir: dir},
	})
	if err != nil {
		t.Fatal(err)
	}
	runAgent(t, a)

	srv := httptest.NewServer(a.handler())
	defer srv.Close()
	deadline := time.Now().Add(testWait)
	for {
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		body := make([]byte, 512)
		n, _ := resp.Body.Read(body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body[:n]), "health watcher: stopped: creating NVML event set") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz = %d %q with a stopped health watcher; want 503 naming it", resp.StatusCode, body[:n])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
