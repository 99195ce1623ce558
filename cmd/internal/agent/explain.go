package agent

import (
	"strings"

	"github.com/featureplug/featureplug/rules/plan"
)

// ReasonResourcesChanged is the reason of the Normal Event the agent
// records on its Node when the set of resources it serves, their device
// counts or their sharing change.
const ReasonResourcesChanged = "ResourcesChanged"

// digestedRuleSet is a rule set read from a file, with its content's digest.
type digestedRuleSet struct {
	RuleSet
	digest string
}

// withDigest attaches the digest of data to rs (nil stays nil).
func withDigest(rs RuleSet, data []byte) RuleSet {
	if rs == nil {
		return nil
	}
	return digestedRuleSet{RuleSet: rs, digest: plan.RulesDigest(data)}
}

// rulesDigestOf returns the digest of a rule set: its content's digest
// when it came from a file, its source ("builtin:mixed") otherwise.
func rulesDigestOf(rs RuleSet) string {
	switch r := rs.(type) {
	case nil:
		return ""
	case digestedRuleSet:
		return r.digest
	default:
		return rs.Source()
	}
}

// planServed records a Normal Event on the Node when the resources of p,
// now served, differ from the plan served before (the first plan counts as
// a change from nothing).
func (a *Agent) planServed(p *plan.Plan) {
	changes := plan.ResourceChanges(a.reported, p)
	a.reported = p
	if len(changes) == 0 {
		return
	}
	msg := strings.Join(changes, "; ")
	a.log.Info("served resources changed", "changes", msg, "rulesDigest", p.RulesDigest)
	if a.events != nil {
		a.events.Normal(ReasonResourcesChanged, msg)
	}
}
