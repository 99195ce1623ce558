package rules

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// dynamicTally is what CheckNodes learned of one dynamic rule: the GPU
// products with MIG geometry it matched, in the order first matched, and
// their profile names.
type dynamicTally struct {
	products []string
	profiles map[string][]string
}

// dynamicOn checks a dynamic rule on one device of a check node: on a
// MIG-capable GPU it matches whose geometry is known, the resource
// template on every profile it would offer and the wholeGPU template; it
// records the GPU's profiles for dynamicProfiles.
func (c *checkRun) dynamicOn(n CheckNode, pl *planner, r *rule, t *target) {
	g := t.gpu
	if t.kind != plan.DeviceGPU || !g.MIGCapable || g.MIGGeometry == nil || !pl.evaluate(r, t).match {
		return
	}
	rs := c.rs
	tally, ok := c.dynamic[r.index]
	if !ok {
		tally = &dynamicTally{profiles: map[string][]string{}}
		c.dynamic[r.index] = tally
	}
	if _, seen := tally.profiles[g.Product]; !seen {
		tally.products = append(tally.products, g.Product)
		tally.profiles[g.Product] = g.MIGGeometry.ProfileNames()
	}
	for _, p := range g.MIGGeometry.Profiles {
		if r.dynamic.profiles != nil && !slices.Contains(r.dynamic.profiles, p.Name) {
			continue
		}
		if r.tmpl == nil {
			continue
		}
		name, err := executeTemplate(r.tmpl, discovery.MIGAttributes(g, wouldBe(g, &p)))
		desc := fmt.Sprintf("%s MIG profile %s", g.Product, p.Name)
		switch {
		case err != nil:
			c.add(fmt.Sprintf("%d\x00dyn-fails\x00%v", r.index, err),
				rs.checkError(r, fmt.Sprintf("template fails on %s, %s: %v", n.Name, desc, err)))
		default:
			if verr := plan.ValidateResourceName(name); verr != nil {
				c.add(fmt.Sprintf("%d\x00dyn-invalid\x00%s", r.index, name),
					rs.checkError(r, fmt.Sprintf("template gives %q on %s, %s: %v", name, n.Name, desc, verr)))
			}
		}
	}
	if tmpl := r.dynamic.wholeTmpl; tmpl != nil {
		name, err := executeTemplate(tmpl, t.attrs)
		if err == nil {
			err = plan.ValidateResourceName(name)
		}
		if err != nil {
			c.add(fmt.Sprintf("%d\x00dyn-whole\x00%v", r.index, err), &Error{Source: rs.source, Line: r.line, Rule: r.index, RuleName: r.name,
				Field: "mig.wholeGPU", Value: strconv.Quote(r.dynamic.wholeGPU), Msg: fmt.Sprintf("on %s, %s: %v (gives %q)", n.Name, g.Product, err, name)})
		}
	}
}

// dynamicProfiles reports, for every dynamic rule that matched a catalog
// GPU with MIG geometry, each profile it lists that none of those GPUs
// has: a misspelt or wrong-sized name ("3g.40gb" on an H200, whose 3g is
// 3g.71gb) would otherwise offer nothing.
func (c *checkRun) dynamicProfiles() {
	for _, r := range c.rs.rules {
		tally, ok := c.dynamic[r.index]
		if r.dynamic == nil || !ok || r.dynamic.profiles == nil {
			continue
		}
		for i, p := range r.dynamic.profiles {
			found := false
			for _, prod := range tally.products {
				found = found || slices.Contains(tally.profiles[prod], p)
			}
			if found {
				continue
			}
			have := make([]string, len(tally.products))
			var alike []string
			for k, prod := range tally.products {
				have[k] = prod + ": " + strings.Join(tally.profiles[prod], ", ")
				for _, q := range tally.profiles[prod] {
					if sameShape(p, q) {
						alike = append(alike, prod+" "+q)
					}
				}
			}
			hint := ""
			if len(alike) > 0 {
				hint = "; the same slice count there: " + strings.Join(alike, ", ")
			} else if h := profileHint(p); strings.HasPrefix(h, ";") {
				hint = h
			}
			c.add("", &Error{Source: c.rs.source, Line: r.line, Rule: r.index, RuleName: r.name,
				Field: fmt.Sprintf("mig.profiles[%d]", r.dynamic.written[i]), Value: strconv.Quote(p),
				Msg: fmt.Sprintf("is a MIG profile of none of the catalog GPUs the rule matches (%s)%s", strings.Join(have, "; "), hint)})
		}
	}
}

// sameShape reports whether two profile names have the same compute slice
// count and suffix ("3g.40gb" and "3g.71gb"; "1g.10gb+me" and
// "1g.18gb+me") but differ.
func sameShape(a, b string) bool {
	ga, ra, ok1 := strings.Cut(a, ".")
	gb, rb, ok2 := strings.Cut(b, ".")
	if !ok1 || !ok2 || a == b || ga != gb {
		return false
	}
	return memorySuffix(ra) == memorySuffix(rb)
}

// memorySuffix is what follows the memory size of a profile name's rest:
// "" for "40gb", "+me" for "10gb+me".
func memorySuffix(rest string) string {
	_, suffix, _ := strings.Cut(rest, "gb")
	return suffix
}
