package agent

import (
	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// RuleSet is a loaded rules file as the agent uses it: where it came from,
// what was odd about it, and the plan it makes of an inventory and the
// node's labels. The rules package's *RuleSet is one.
type RuleSet interface {
	Source() string
	Warnings() []string
	Plan(inv *discovery.Inventory, nodeLabels map[string]string) (*plan.Plan, error)
}

// RulesEngine loads rules for the agent. The command wires the rules
// package into it, so the agent, like every sink, depends only on the plan
// contract and never on the rules engine itself (docs/architecture.md).
type RulesEngine struct {
	// Default returns the builtin rules used when Config.Rules is empty.
	Default func() RuleSet
	// Load reads a builtin by name or a rules file by path.
	Load func(nameOrPath string) (RuleSet, error)
	// Parse reads the content of a rules file read from source.
	Parse func(source string, data []byte) (RuleSet, error)
	// Builtins are the names Load takes as builtins, not paths.
	Builtins []string
	// MaxFileSize bounds a rules file; a larger one is refused.
	MaxFileSize int64
}

// complete reports whether every function of the engine is set.
func (e RulesEngine) complete() bool {
	return e.Default != nil && e.Load != nil && e.Parse != nil && e.MaxFileSize > 0
}

// NewRulesEngine builds a RulesEngine from a rules package's functions,
// whatever its concrete rule-set type R: a failed Load or Parse gives a nil
// RuleSet, never an interface holding a nil R.
func NewRulesEngine[R RuleSet](def func() R, load func(string) (R, error), parse func(string, []byte) (R, error),
	builtins []string, maxFileSize int64) RulesEngine {
	return RulesEngine{
		Default: func() RuleSet { return def() },
		Load: func(nameOrPath string) (RuleSet, error) {
			rs, err := load(nameOrPath)
			if err != nil {
				return nil, err
			}
			return rs, nil
		},
		Parse: func(source string, data []byte) (RuleSet, error) {
			rs, err := parse(source, data)
			if err != nil {
				return nil, err
			}
			return rs, nil
		},
		Builtins:    builtins,
		MaxFileSize: maxFileSize,
	}
}
