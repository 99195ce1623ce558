package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/gpusource"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/plan"
)

// testWait bounds every wait of the agent's tests.
const testWait = 20 * time.Second

// testRuleSet is a rules.RuleSet with its digest, as
// cmd/internal/rulesengine makes them.
type testRuleSet struct {
	*rules.RuleSet
	digest string
}

func (r testRuleSet) Digest() string { return r.digest }

// testRulesEngine is the rules package as the agent's tests use it, wired
// as cmd/internal/rulesengine does (which imports this package, so the
// package's own tests cannot import it).
func testRulesEngine() agentconfig.RulesEngine {
	return agentconfig.RulesEngine{
		Default: func() agentconfig.RuleSet { return testRuleSet{rules.Default(), rules.Default().Source()} },
		Load: func(name string) (agentconfig.RuleSet, error) {
			rs, err := rules.Load(name)
			if err != nil {
				return nil, err
			}
			return testRuleSet{rs, rs.Source()}, nil
		},
		Parse: func(source string, data []byte) (agentconfig.RuleSet, error) {
			rs, err := rules.Parse(source, data)
			if err != nil {
				return nil, err
			}
			return testRuleSet{rs, plan.RulesDigest(data)}, nil
		},
		Builtins:    rules.BuiltinNames(),
		MaxFileSize: rules.MaxFileSize,
	}
}

// runAgent runs a until the test ends and checks that Run returned no
// error; the context it returns ends with the test.
func runAgent(t *testing.T, a *Agent) context.Context {
	t.Helper()
	ctx, stop := startAgentRun(t, a)
	t.Cleanup(stop)
	return ctx
}

// startAgentRun runs a until stop is called, which waits for Run to return
// and checks that it returned no error; calling stop again does nothing.
func startAgentRun(t *testing.T, a *Agent) (ctx context.Context, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
}

// openFakeT opens the bundled fake node name for the test; it is closed
// when the test ends (after the agents the test runs have stopped).
func openFakeT(t *testing.T, name string) *gpusource.Fake {
	t.Helper()
	src, err := gpusource.OpenFake(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	return src
}

// openFakeInventory opens the bundled fake node name (closed when the test
// ends) and discovers its inventory.
func openFakeInventory(t *testing.T, name string) (*gpusource.Fake, *discovery.Inventory) {
	t.Helper()
	src := openFakeT(t, name)
	inv, _, err := src.Discover()
	if err != nil {
		t.Fatal(err)
	}
	return src, inv
}

// sinkOf returns the agent's sink of type T.
func sinkOf[T Sink](t *testing.T, a *Agent) T {
	t.Helper()
	for _, s := range a.sinks {
		if x, ok := s.(T); ok {
			return x
		}
	}
	var zero T
	t.Fatalf("the agent has no sink of type %T", zero)
	return zero
}

// startKubeletT serves a simulated kubelet in dir until the test ends.
func startKubeletT(t *testing.T, dir string) *kubeletsim.Kubelet {
	t.Helper()
	k, err := kubeletsim.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k
}
