package rules

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/featureplug/featureplug/rules/plan"
)

// A rule's serve field chooses the kubelet API its resource is served
// through (plan.Resource.Serve): "device-plugin" or "dra". Absent, the
// agent's --serve decides. A resource is served through one API on a node,
// so the rules that give one resource name on a node must say the same
// serve (absent being a value of its own, since only the agent knows what
// it stands for): a conflict is a load error when the name is literal and
// the rules select the same nodes, a warning when their node selectors may
// overlap, and a plan error on a node where it happens (the agent then
// keeps its last good plan).

// serveValues are the values serve takes, in the order messages list them.
var serveValues = []plan.Serve{plan.ServeDevicePlugin, plan.ServeDRA}

// compileServe validates a rule's serve.
func (c *checker) compileServe(r *rule, s plan.Serve) {
	r.serve = s
	switch s {
	case "":
		return
	case plan.ServeDevicePlugin:
		return
	case plan.ServeDRA:
		// Every sharing strategy is served through DRA: time-slicing and
		// MPS as consumable capacity, the agent running MPS's control
		// daemon and its device's CDI spec entry carrying the client
		// settings. GPUs for VMs are published with their PCI attributes
		// and prepared as their VFIO device nodes.
		return
	default:
		c.ruleError(r, path{"serve"}, strconv.Quote(string(s)),
			fmt.Sprintf("must be %s, or absent to leave it to the agent's --serve", serveList()))
	}
}

// serveList lists the values serve takes: `"device-plugin" or "dra"`.
func serveList() string {
	quoted := make([]string, len(serveValues))
	for i, v := range serveValues {
		quoted[i] = strconv.Quote(string(v))
	}
	return strings.Join(quoted[:len(quoted)-1], ", ") + " or " + quoted[len(quoted)-1]
}

// describeServe says what a rule wrote in serve, for messages.
func describeServe(s plan.Serve) string {
	if s == "" {
		return "no serve (the agent's --serve)"
	}
	return "serve: " + string(s)
}

// checkServe compares a rule giving a literal resource name with the
// earlier rules giving the same name: the same nodes with another serve
// is an error, node selectors that may overlap a warning (as
// checkSharing does for sharing).
func (c *checker) checkServe(r *rule, earlier []*rule) {
	for _, first := range earlier {
		if first.serve == r.serve {
			continue
		}
		switch {
		case selectorString(first.selector) == selectorString(r.selector):
			on := "every node"
			if r.selector != nil {
				on = fmt.Sprintf("the same nodes (nodeSelector %q)", r.selector.String())
			}
			c.ruleError(r, path{"serve"}, serveValue(r.serve),
				fmt.Sprintf("resource %q is also given by rules[%d] %q with %s, on %s; a resource is served through one API on a node, "+
					"so give both rules the same serve", r.resource, first.index, first.name, describeServe(first.serve), on))
			return
		case !disjoint(first.selector, r.selector):
			c.ruleWarning(r, path{"serve"}, serveValue(r.serve),
				fmt.Sprintf("resource %q is also given by rules[%d] %q with %s, and their node selectors may select the same node; "+
					"a resource is served through one API on a node, so such a node's plan is refused when both rules claim devices there "+
					"(make the selectors exclusive)", r.resource, first.index, first.name, describeServe(first.serve)))
			return
		}
	}
}

// serveValue is a serve as errors show values ("" when absent).
func serveValue(s plan.Serve) string {
	if s == "" {
		return ""
	}
	return strconv.Quote(string(s))
}

// sameServe checks, on a node, that a rule claiming a device for a
// resource an earlier rule already gives says the same serve; otherwise it
// fails the plan, naming both rules, and returns false.
func (pl *planner) sameServe(c *claim, r *rule, name, desc string) bool {
	if c.rule == r || c.rule.serve == r.serve {
		return true
	}
	pl.fail(r, "serve", serveValue(r.serve),
		fmt.Sprintf("resource %q of %s is also given by rules[%d] %q with %s; a resource is served through one API on a node, "+
			"so give both rules the same serve", name, desc, c.rule.index, c.rule.name, describeServe(c.rule.serve)))
	return false
}

// ServeSummary says which rules choose the API their resource is served
// through, for `rules check`: "serve: dra: a100-dra; device-plugin: t4;
// the agent's --serve: by-model" (rules in file order). It is "" when no
// rule says serve.
func (rs *RuleSet) ServeSummary() string {
	by := make(map[plan.Serve][]string)
	explicit := false
	for _, r := range rs.rules {
		by[r.serve] = append(by[r.serve], r.name)
		explicit = explicit || r.serve != ""
	}
	if !explicit {
		return ""
	}
	var parts []string
	for _, s := range []plan.Serve{plan.ServeDRA, plan.ServeDevicePlugin, ""} {
		if len(by[s]) == 0 {
			continue
		}
		label := string(s)
		if s == "" {
			label = "the agent's --serve"
		}
		parts = append(parts, label+": "+strings.Join(by[s], ", "))
	}
	return "serve: " + strings.Join(parts, "; ")
}
