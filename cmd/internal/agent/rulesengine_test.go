package agent

import (
	"context"
	"github.com/featureplug/featureplug/plugin/kubeletsim"
	"sync"
	"testing"

	"github.com/featureplug/featureplug/rules"
)

// testRulesEngine is the rules package as the agent's tests use it, wired
// as cmd/internal/rulesengine does (which imports this package, so its
// internal tests cannot import it).
func testRulesEngine() RulesEngine {
	return NewRulesEngine(rules.Default, rules.Load, rules.Parse, rules.BuiltinNames(), rules.MaxFileSize)
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
func openFakeT(t *testing.T, name string) *FakeSource {
	t.Helper()
	src, err := OpenFake(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(src.Close)
	return src
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
