package agent

import (
	"testing"
	"time"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
)

// TestAfterStartupOnceRegistered: the agent runs Config.AfterStartup only
// once the kubelet has taken every resource.
func TestAfterStartupOnceRegistered(t *testing.T) {
	src := openFakeT(t, "dgx-a100")
	dir := kubeletsim.ShortTempDir(t)
	kubelet := startKubeletT(t, dir)
	// At AfterStartup: whether the manager had every resource of its plan
	// registered, and the resources the kubelet has.
	type state struct {
		ready     bool
		resources []string
	}
	afterStartup := make(chan state, 1)
	var a *Agent
	a, err := New(agentconfig.Config{
		NodeName: "n", Source: src, Rules: "mixed", RulesEngine: testRulesEngine(),
		Plugin:             deviceplugin.Options{KubeletDir: dir},
		RediscoverInterval: time.Hour,
		AfterStartup:       func() { afterStartup <- state{a.isReady(), kubelet.Resources()} },
	})
	if err != nil {
		t.Fatal(err)
	}
	runAgent(t, a)
	select {
	case got := <-afterStartup:
		// The mixed rules make four resources of the fake DGX A100.
		if !got.ready || len(got.resources) != 4 {
			t.Errorf("AfterStartup ran with every resource registered = %v, the kubelet holding %v; want true and 4 resources", got.ready, got.resources)
		}
	case <-time.After(testWait):
		t.Fatal("AfterStartup did not run")
	}
}
