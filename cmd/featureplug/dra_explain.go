package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/draclass"
	"github.com/featureplug/featureplug/rules/plan"
)

// draExplainView returns the DRA DeviceClass of every resource a rule set
// can give, for rules explain: the classes `featureplug dra classes`
// prints. When they cannot be made it says so on errOut and returns nil
// (the explanation then has no DRA view).
func draExplainView(errOut io.Writer, rs *rules.RuleSet) map[string]rules.DRAClass {
	res, err := draclass.CompileCatalog(rs)
	if err != nil {
		fmt.Fprintf(errOut, "warning: no DRA view: %v\n", err)
		return nil
	}
	view := make(map[string]rules.DRAClass, len(res.Classes)+len(res.DevicePlugin))
	for _, c := range res.Classes {
		if c.NVIDIA {
			continue // NVIDIA's classes, which compatibility adds, are no resource's
		}
		view[c.Resource] = rules.DRAClass{Name: c.Name, Selector: c.Selector, Fallback: c.Fallback, NodeSelectors: slices.Clone(c.NodeSelectors)}
	}
	for _, name := range res.DevicePlugin {
		view[name] = rules.DRAClass{Missing: "every rule giving it says serve: device-plugin"}
	}
	return view
}

// draExplainFill gives every resource of the view's plan an entry, so
// that the JSON and YAML forms say why a resource has no class.
func draExplainFill(view map[string]rules.DRAClass, resources []string) {
	if view == nil {
		return
	}
	for _, name := range resources {
		if _, ok := view[name]; !ok {
			view[name] = rules.DRAClass{Missing: "the rules give this name on no device of featureplug's catalog, so featureplug dra classes has no class for it"}
		}
	}
}

// resourceNames returns the names of a plan's resources.
func resourceNames(p *plan.Plan) []string {
	names := make([]string, len(p.Resources))
	for i, r := range p.Resources {
		names[i] = r.Name
	}
	return names
}
