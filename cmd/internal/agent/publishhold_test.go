package agent

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
)

// TestPublishHeldUntilRegistered: register first. With Config.PublishHold
// the agent writes no feature file while the kubelet has not taken its
// resources (the positive marker: a registration attempt that found no
// kubelet, logged after the plan was applied), and writes it once the
// kubelet has registered every resource, well before the hold runs out.
func TestPublishHeldUntilRegistered(t *testing.T) {
	src := openFakeT(t, "dgx-a100")
	dir := kubeletsim.ShortTempDir(t)
	features := filepath.Join(dir, "features")
	records := make(kubeRecords, 4096)
	a, err := New(agentconfig.Config{
		NodeName: "n", Source: src, Rules: "mixed", RulesEngine: testRulesEngine(),
		Publish: labeler.PublishFile, FeaturesFile: features,
		Plugin:             deviceplugin.Options{KubeletDir: dir},
		RediscoverInterval: time.Hour,
		PublishHold:        time.Hour,
		Logger:             slog.New(records),
	})
	if err != nil {
		t.Fatal(err)
	}
	runAgent(t, a)
	waitLog := func(what string) {
		t.Helper()
		timeout := time.After(testWait)
		for {
			select {
			case r := <-records:
				if strings.Contains(r, "wrote feature file") && what != "wrote feature file" {
					t.Fatalf("the feature file was written before the kubelet registered the resources: %s", r)
				}
				if strings.Contains(r, what) {
					return
				}
			case <-timeout:
				t.Fatalf("no %q in the log", what)
			}
		}
	}
	waitLog("registration with the kubelet failed")
	if _, err := os.Stat(features); !os.IsNotExist(err) {
		t.Fatalf("feature file before any registration: %v", err)
	}

	kubelet := startKubeletT(t, dir)
	waitLog("wrote feature file")
	// The mixed rules make four resources of the fake DGX A100; all were
	// registered before the write.
	if got := kubelet.Resources(); len(got) != 4 {
		t.Errorf("the feature file was written with the kubelet holding %v, want 4 resources", got)
	}
}
