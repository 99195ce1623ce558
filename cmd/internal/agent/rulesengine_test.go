package agent

import "github.com/featureplug/featureplug/rules"

// testRulesEngine is the rules package as the agent's tests use it; the
// command's own wiring is cmd/internal/rulesengine, which imports this
// package and so cannot be used from its internal tests.
func testRulesEngine() RulesEngine {
	return RulesEngine{
		Default: func() RuleSet { return rules.Default() },
		Load: func(nameOrPath string) (RuleSet, error) {
			rs, err := rules.Load(nameOrPath)
			if err != nil {
				return nil, err
			}
			return rs, nil
		},
		Parse: func(source string, data []byte) (RuleSet, error) {
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
