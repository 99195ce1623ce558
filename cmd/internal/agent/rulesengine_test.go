package agent

import (
	"context"
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return ctx
}
