package agent

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/rules/plan"
)

// Reasons and results of the plan report.
const (
	// reasonDeviceRuleError is the Warning Event reason when the plan
	// leaves devices out.
	reasonDeviceRuleError = "DeviceRuleError"
	// reloadPartial is the rule_reloads_total result of rules that serve
	// but leave some devices out.
	reloadPartial = "partial"
	// reloadRefused is the rule_reloads_total result of rules refused
	// because they would withdraw every resource (plan.DrainsNode), and
	// reasonRulesDrainRefused the reason of their Warning Event.
	reloadRefused           = "refused"
	reasonRulesDrainRefused = "RulesWouldDrainNode"
	// maxProblemsLogged bounds the problems one log line or Event lists.
	maxProblemsLogged = 5
)

// planReport reports the devices a plan leaves out because their rule's
// template fails or gives an invalid resource name (plan.Plan.Problems):
// a WARN line and a Warning Event on the Node each time the set of such
// devices changes, and the gauge featureplug_plan_device_errors.
type planReport struct {
	gauge prometheus.Gauge
	// last is the set of problems last reported, as plan.ProblemsKey gives it.
	last string
}

// planReporter returns the agent's plan report, registering its gauge on
// first use.
func (a *Agent) planReporter() *planReport {
	if a.planReport != nil {
		return a.planReport
	}
	r := &planReport{gauge: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "featureplug_plan_device_errors",
		Help: "Devices the current plan leaves out for what the node is (a VFIO group that cannot be passed through, a GPU that needs a reset, the single strategy on a mixed node); the rest of the plan serves. A template that fails on a device refuses the whole plan instead.",
	})}
	if err := a.registry.Register(r.gauge); err != nil {
		a.log.Error("registering featureplug_plan_device_errors", "err", err)
	}
	a.planReport = r
	return r
}

// reportPlanProblems reports the problems of the plan now served, once per
// change.
func (a *Agent) reportPlanProblems(p *plan.Plan) {
	r := a.planReporter()
	r.gauge.Set(float64(len(p.Problems)))
	key := plan.ProblemsKey(p.Problems)
	if key == r.last {
		return
	}
	r.last = key
	if len(p.Problems) == 0 {
		a.log.Info("every device the rules claim is served again", "rules", a.cfg.Rules)
		return
	}
	summary := plan.ProblemsSummary(p.Problems, maxProblemsLogged)
	a.log.Warn("devices left out of the plan because of their rules; the rest is served",
		"rules", a.cfg.Rules, "devices", len(p.Problems), "problems", summary)
	a.warnEvent(reasonDeviceRuleError, fmt.Sprintf("rules %s: %d devices left out, the rest is served: %s",
		a.cfg.Rules, len(p.Problems), summary))
}

// takeRules makes rs the current rules when it can plan on this node, and
// counts the reload: "applied" when every device the rules claim is
// served, "partial" when some are left out (see reportPlanProblems),
// "invalid" when the rules cannot plan, leave out every device they
// claim or make a plan a sink refuses, and "refused" when they would take
// every resource away without saying so (plan.DrainsNode). Invalid and
// refused rules keep the last good ones; with none yet (the first load)
// invalid ones are kept, so that a later discovery can plan with them, and
// replan reports why nothing serves.
func (a *Agent) takeRules(rs agentconfig.RuleSet) bool {
	a.planReporter()
	if a.inv == nil {
		a.ruleSet = rs
		a.metrics.ruleReloads.WithLabelValues("applied").Inc()
		return true
	}
	p, err := a.planFor(rs)
	if err == nil && len(p.Resources) == 0 && len(p.Problems) > 0 {
		err = fmt.Errorf("no device could be planned: every device the rules claim is left out: %s", plan.ProblemsSummary(p.Problems, maxProblemsLogged))
	}
	if err == nil {
		err = a.check(a.gate(p))
	}
	if err != nil {
		a.metrics.ruleReloads.WithLabelValues("invalid").Inc()
		if a.ruleSet == nil {
			a.ruleSet = rs
			return true
		}
		a.reportRuleError("InvalidRules", err)
		return false
	}
	if plan.DrainsNode(a.plan, p) {
		a.refuseDrain(rs)
		return false
	}
	a.ruleSet = rs
	result := "applied"
	if len(p.Problems) > 0 {
		result = reloadPartial
	}
	a.metrics.ruleReloads.WithLabelValues(result).Inc()
	return true
}

// refuseDrain says that rs would withdraw every resource the last good
// plan serves without saying so (a truncated or emptied file): log,
// metric and Warning Event; the last good plan keeps serving.
func (a *Agent) refuseDrain(rs agentconfig.RuleSet) {
	a.metrics.ruleReloads.WithLabelValues(reloadRefused).Inc()
	a.metrics.ruleErrors.Inc()
	msg := fmt.Sprintf("rules %s would serve no resource on this node, where %s serves %d; refused (a file that means it says so explicitly), serving the last good plan",
		rs.Source(), a.cfg.NodeName, len(a.plan.Resources))
	a.log.Error(msg, "rules", a.cfg.Rules, "resources", a.plan.Capacity())
	a.warnEvent(reasonRulesDrainRefused, msg)
}
