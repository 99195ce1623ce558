// Package rulesengine wires the rules package into the agent: it is the one
// place where the daemon meets the rules engine, so that the agent itself
// depends only on the plan contract (rules/plan).
package rulesengine

import (
	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/plan"
)

// ruleSet is a rules.RuleSet with the digest of what it was read from.
type ruleSet struct {
	*rules.RuleSet
	digest string
}

// Digest implements agentconfig.RuleSet.
func (r ruleSet) Digest() string { return r.digest }

// New returns the rules package as the agent's RulesEngine. A failed Load
// or Parse gives a nil RuleSet, never an interface holding a nil
// *rules.RuleSet.
func New() agentconfig.RulesEngine {
	return agentconfig.RulesEngine{
		Default: func() agentconfig.RuleSet {
			rs := rules.Default()
			return ruleSet{rs, rs.Source()}
		},
		Load: func(name string) (agentconfig.RuleSet, error) {
			rs, err := rules.Load(name)
			if err != nil {
				return nil, err
			}
			return ruleSet{rs, rs.Source()}, nil
		},
		Parse: func(source string, data []byte) (agentconfig.RuleSet, error) {
			rs, err := rules.Parse(source, data)
			if err != nil {
				return nil, err
			}
			return ruleSet{rs, plan.RulesDigest(data)}, nil
		},
		Builtins:    rules.BuiltinNames(),
		MaxFileSize: rules.MaxFileSize,
	}
}
