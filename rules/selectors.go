package rules

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
)

// checkSharing checks that a rule gives its literal resource name the
// sharing of the earlier rules that give it, where both may select the
// same node: "one resource name has one sharing" holds per node. Rules
// that certainly select the same nodes (no selectors, or the same one) with
// two sharings are an error; rules whose selectors may overlap are a
// warning, and the node's plan refuses them if they meet on one node.
// Rules whose selectors cannot select one node (nvidia.com/device-plugin.config
// In [a] and In [b]) may share the name differently.
func (c *checker) checkSharing(r *rule, earlier []*rule) {
	for _, first := range earlier {
		if first.sharing.Same(r.sharing) {
			continue
		}
		switch {
		case selectorString(first.selector) == selectorString(r.selector):
			on := "every node"
			if r.selector != nil {
				on = fmt.Sprintf("the same nodes (nodeSelector %q)", r.selector.String())
			}
			c.ruleError(r, path{"sharing"}, r.sharing.String(),
				fmt.Sprintf("resource %q is also given by rules[%d] %q with sharing %s, on %s; a resource has one sharing per node",
					r.resource, first.index, first.name, first.sharing.String(), on))
			return
		case !disjoint(first.selector, r.selector):
			c.ruleWarning(r, path{"sharing"}, r.sharing.String(),
				fmt.Sprintf("resource %q is also given by rules[%d] %q with sharing %s, and their node selectors may select the same node; "+
					"a resource has one sharing per node, so such a node's plan would be refused (make the selectors exclusive)",
					r.resource, first.index, first.name, first.sharing.String()))
			return
		}
	}
}

// selectorString is a selector's canonical text, "" for none (every node).
func selectorString(s labels.Selector) string {
	if s == nil || s.Empty() {
		return ""
	}
	return s.String()
}

// disjoint reports whether no set of node labels can match both selectors:
// some key has requirements in each that cannot hold together (In [a] and
// In [b]; In [a] and NotIn [a]; Exists and DoesNotExist). It errs on the
// side of "may overlap".
func disjoint(a, b labels.Selector) bool {
	if a == nil || b == nil {
		return false
	}
	ra, _ := a.Requirements()
	rb, _ := b.Requirements()
	for _, x := range ra {
		for _, y := range rb {
			if x.Key() == y.Key() && (excludes(x, y) || excludes(y, x)) {
				return true
			}
		}
	}
	return false
}

// excludes reports whether requirement x rules out every value y allows,
// for one key.
func excludes(x, y labels.Requirement) bool {
	xv, yv := sets.New(x.ValuesUnsorted()...), sets.New(y.ValuesUnsorted()...)
	switch x.Operator() {
	case selection.In, selection.Equals, selection.DoubleEquals:
		switch y.Operator() {
		case selection.In, selection.Equals, selection.DoubleEquals:
			return !xv.HasAny(yv.UnsortedList()...)
		case selection.NotIn, selection.NotEquals:
			return yv.IsSuperset(xv)
		case selection.DoesNotExist:
			return true
		}
	case selection.Exists:
		return y.Operator() == selection.DoesNotExist
	}
	return false
}
