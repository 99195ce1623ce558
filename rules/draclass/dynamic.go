package draclass

import (
	"fmt"

	"github.com/featureplug/featureplug/rules"
)

// dynamicContributions are the classes of the resource names the rules
// that partition GPUs on demand give on nodes: one per offered profile's
// resource and per whole-GPU resource, as the plans' DynamicMIG name them.
// Their devices are the placements the DRA sink publishes for each
// profile (and the whole GPU), which carry the resource attribute, so
// their classes select on it: a placement device has no MIG device's
// attributes to match yet, and its resource is exactly what the rules
// decided. note records each name.
func (c *compiler) dynamicContributions(rs *rules.RuleSet, nodes []rules.CheckNode, note func(string)) map[string][]contribution {
	out := map[string][]contribution{}
	byName := map[string]int{}
	for i := range c.views {
		if c.views[i].Dynamic {
			byName[c.views[i].Name] = i
		}
	}
	if len(byName) == 0 {
		return out
	}
	seen := map[string]bool{}
	add := func(rule int, name, what string) {
		key := fmt.Sprint(rule, "\x00", name)
		if name == "" || seen[key] {
			return
		}
		seen[key] = true
		v := &c.views[rule]
		why := &rules.Error{Source: c.source, Line: v.Line, Rule: v.Index, RuleName: v.Name,
			Msg: "its devices are the " + what + " of GPUs partitioned on demand, published with their resource"}
		out[name] = append(out[name], contribution{rule: rule, fallback: why})
		note(name)
	}
	for _, n := range nodes {
		p, err := rs.Plan(n.Inventory, nil)
		if err != nil {
			continue // CheckNodes reports it
		}
		for _, g := range p.DynamicMIG {
			i, ok := byName[g.Rule]
			if !ok {
				continue
			}
			add(i, g.WholeGPU, "whole-GPU devices")
			for _, prof := range g.Profiles {
				add(i, prof.Resource, "MIG placements")
			}
		}
	}
	return out
}
