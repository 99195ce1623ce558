package agent

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/cmd/internal/kube/kubeclientset"
	"github.com/featureplug/featureplug/discovery/gpusource"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
)

// TestRegisterFirst: with rules that select on no node label, the first
// plan is applied (and its resources registered) while the API server has
// not answered the Node list at all: the agent does not wait for it. The
// Node's labels arrive later; with rules that do select on them the agent
// still waits (TestNodeWatchReplans).
func TestRegisterFirst(t *testing.T) {
	src, err := gpusource.OpenFake("dgx-h100")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	kube := kubefake.NewClientset()
	release := make(chan struct{})
	listed := make(chan struct{}, 1)
	kube.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		select {
		case listed <- struct{}{}:
		default:
		}
		<-release // the API server answers only once the plan is applied
		return false, nil, nil
	})
	records := make(kubeRecords, 1000)
	a, err := New(agentconfig.Config{
		NodeName: "n", Source: src, Rules: "mixed", RulesEngine: testRulesEngine(),
		Kube:               kubeclientset.New(kube, nil),
		Plugin:             deviceplugin.Options{KubeletDir: t.TempDir()},
		RediscoverInterval: time.Hour,
		Logger:             slog.New(records),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer close(release)
	runAgent(t, a)
	// The agent asked for its Node (the watch runs) ...
	select {
	case <-listed:
	case <-time.After(testWait):
		t.Fatal("the agent never listed its Node")
	}
	// ... and applied its first plan without the answer: no "not listed
	// yet" warning (the sign of waiting apiTimeout) comes before it.
	timeout := time.After(testWait)
	for {
		select {
		case r := <-records:
			if strings.Contains(r, "is not listed yet") {
				t.Fatalf("the agent waited for its Node before planning: %s", r)
			}
			if strings.Contains(r, "plan applied") && strings.Contains(r, "trigger=start") {
				return
			}
		case <-timeout:
			t.Fatal("no plan applied while the Node list was unanswered")
		}
	}
}
