package agent

import (
	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// RuleSet is a loaded rules file as the agent uses it: where it came from,
// what identifies its content (plan.Plan.RulesDigest: plan.RulesDigest of
// a file's content, a builtin's source), what was odd about it, and the
// plan it makes of an inventory and the node's labels.
type RuleSet interface {
	Source() string
	Digest() string
	Warnings() []string
	Plan(inv *discovery.Inventory, nodeLabels map[string]string) (*plan.Plan, error)
}

// RulesEngine loads rules for the agent. The command wires the rules
// package into it, so the agent, like every sink, depends only on the plan
// contract and never on the rules engine itself (docs/architecture.md).
type RulesEngine struct {
	// Default returns the builtin rules used when Config.Rules is empty.
	Default func() RuleSet
	// Load reads a builtin by name (the agent reads a rules file itself,
	// through its file watcher, and parses it).
	Load func(name string) (RuleSet, error)
	// Parse reads the content of a rules file read from source.
	Parse func(source string, data []byte) (RuleSet, error)
	// Builtins are the names Load takes; any other Config.Rules is a path.
	Builtins []string
	// MaxFileSize bounds a rules file; a larger one is refused.
	MaxFileSize int64
}

// complete reports whether every function of the engine is set.
func (e RulesEngine) complete() bool {
	return e.Default != nil && e.Load != nil && e.Parse != nil && e.MaxFileSize > 0
}
