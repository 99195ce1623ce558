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
	return agent.RulesEngine{
		Default: func() agent.RuleSet { return rules.Default() },
		Load: func(nameOrPath string) (agent.RuleSet, error) {
			rs, err := rules.Load(nameOrPath)
			if err != nil {
				return nil, err // a nil interface, not a typed nil
			}
			return rs, nil
		},
		Parse: func(source string, data []byte) (agent.RuleSet, error) {
			rs, err := rules.Parse(source, data)
			if err != nil {
				return nil, err
			}
			return rs, nil
		},
		Builtins:    rules.BuiltinNames(),
		MaxFileSize: rules.MaxFileSize,
	}
}
