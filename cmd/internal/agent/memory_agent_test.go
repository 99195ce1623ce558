package agent

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
)

// TestAfterStartupOnceRegistered: the agent runs Config.AfterStartup and
// releases the binary's start-up pages only once the kubelet has taken
// every resource, and says so in its log.
func TestAfterStartupOnceRegistered(t *testing.T) {
	src := openFakeT(t, "dgx-a100")
	dir := kubeletsim.ShortTempDir(t)
	kubelet := startKubeletT(t, dir)
	records := make(kubeRecords, 4096)
	// At AfterStartup: whether the manager had every resource of its plan
	// registered, and the resources the kubelet has.
	type state struct {
		ready     bool
		resources []string
	}
	afterStartup := make(chan state, 1)
	var a *Agent
	a, err := New(Config{
		NodeName: "n", Source: src, Rules: "mixed", RulesEngine: testRulesEngine(),
		Plugin:              deviceplugin.Options{KubeletDir: dir},
		RediscoverInterval:  time.Hour,
		Logger:              slog.New(records),
		ReleaseStartupPages: true,
		AfterStartup:        func() { afterStartup <- state{a.isReady(), kubelet.Resources()} },
	})
	if err != nil {
		t.Fatal(err)
	}
	runAgent(t, a)
	timeout := time.After(testWait)
	for released := false; !released; {
		select {
		case r := <-records:
			released = strings.HasPrefix(r, "released the binary's start-up pages")
		case <-timeout:
			t.Fatal("no \"released the binary's start-up pages\" in the log")
		}
	}
	select {
	case got := <-afterStartup:
		// The mixed rules make four resources of the fake DGX A100.
		if !got.ready || len(got.resources) != 4 {
			t.Errorf("AfterStartup ran with every resource registered = %v, the kubelet holding %v; want true and 4 resources", got.ready, got.resources)
		}
	case <-time.After(testWait):
		t.Fatal("AfterStartup did not run after the release")
	}
}
