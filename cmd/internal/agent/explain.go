package agent

import (
	"strings"

	"github.com/featureplug/featureplug/rules/plan"
)

// ReasonResourcesChanged is the reason of the Normal Event the agent
// records on its Node when the set of resources it serves, their device
// counts or their sharing change.
const ReasonResourcesChanged = "ResourcesChanged"

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
