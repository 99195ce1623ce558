// Package rulesengine wires the rules package into the agent: it is the one
// place where the daemon meets the rules engine, so that the agent itself
// depends only on the plan contract (rules/plan).
package rulesengine

import (
	"github.com/featureplug/featureplug/cmd/internal/agent"
	"github.com/featureplug/featureplug/rules"
)

// New returns the rules package as the agent's RulesEngine.
func New() agent.RulesEngine {
	return agent.NewRulesEngine(rules.Default, rules.Load, rules.Parse, rules.BuiltinNames(), rules.MaxFileSize)
}
