package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"time"

	"k8s.io/utils/clock"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/discovery/fswatch"
	"github.com/featureplug/featureplug/rules/plan"
)

// rulesFile returns the rules file the agent watches; ok is false for a
// builtin.
func (a *Agent) rulesFile() (string, bool) {
	if a.cfg.Rules == "" {
		return "", false
	}
	for _, name := range a.cfg.RulesEngine.Builtins {
		if name == a.cfg.Rules {
			return "", false
		}
	}
	return a.cfg.Rules, true
}

// loadRules loads the rules at start: a builtin, or the rules file once it
// has settled. An invalid file is reported and the last good rules stay; it
// returns whether the rules changed.
func (a *Agent) loadRules(ctx context.Context) bool {
	if path, ok := a.rulesFile(); ok {
		s, settled := fswatch.ReadStable(ctx, clock.RealClock{}, path, a.cfg.RulesEngine.MaxFileSize, a.fileSettle())
		if !settled {
			a.log.Warn("rules file is still changing; it is applied once it settles", "rules", path)
			return false
		}
		return a.applyRulesSnapshot(s)
	}
	if a.cfg.Rules == "" {
		return a.acceptRules(a.cfg.RulesEngine.Default(), nil)
	}
	rs, err := a.cfg.RulesEngine.Load(a.cfg.Rules)
	return a.acceptRules(rs, err)
}

// rereadRules reads the rules file again (SIGHUP) and takes it when it
// changed; the caller replans.
func (a *Agent) rereadRules(ctx context.Context) {
	if _, ok := a.rulesFile(); !ok {
		return
	}
	a.log.Info("re-reading the rules file on signal", "rules", a.cfg.Rules)
	a.loadRules(ctx)
}

func (a *Agent) fileSettle() time.Duration {
	if a.cfg.FileSettle > 0 {
		return a.cfg.FileSettle
	}
	return agentconfig.DefaultFileSettle
}

// applyRulesSnapshot takes a settled state of the rules file: a lost file
// keeps the last good plan and says so, a new content is loaded. It returns
// whether the rules changed.
func (a *Agent) applyRulesSnapshot(s fswatch.Snapshot) bool {
	if s.Key == a.rulesKey {
		return false
	}
	a.rulesKey = s.Key
	if s.Err != nil {
		a.reportRulesMissing(s.Err)
		return false
	}
	if a.rulesMissing {
		a.rulesMissing = false
		a.metrics.rulesMissing.Set(0)
		a.log.Info("rules file is back", "rules", a.cfg.Rules)
	} else if a.ruleSet != nil {
		a.log.Info("rules file changed", "rules", a.cfg.Rules)
	}
	rs, err := a.cfg.RulesEngine.Parse(a.cfg.Rules, s.Data)
	return a.acceptRules(rs, err)
}

// reportRulesMissing says that the rules file is gone (deleted, replaced by
// a directory, missing from a new ..data): log, metric and Event; the last
// good plan keeps serving.
func (a *Agent) reportRulesMissing(err error) {
	a.rulesMissing = true
	a.metrics.rulesMissing.Set(1)
	a.metrics.ruleReloads.WithLabelValues("missing").Inc()
	serving := a.servingDescription()
	a.log.Warn("rules file lost; keeping "+serving, "rules", a.cfg.Rules, "err", err)
	a.warnEvent("RulesFileMissing", fmt.Sprintf("rules file %s lost (%v); serving %s until it is back", a.cfg.Rules, err, serving))
}

// warnEvent records a Warning Event on the Node (none without an API
// server).
func (a *Agent) warnEvent(reason, message string) {
	if a.events != nil {
		a.events.Warn(reason, message)
	}
}

func (a *Agent) servingDescription() string {
	if a.plan == nil {
		return "nothing yet"
	}
	return fmt.Sprintf("the last good plan (%d resources)", len(a.plan.Resources))
}

// acceptRules takes a loaded rule set, or reports why it cannot be taken.
func (a *Agent) acceptRules(rs agentconfig.RuleSet, err error) bool {
	if err != nil {
		a.metrics.ruleReloads.WithLabelValues("invalid").Inc()
		a.reportRuleError("InvalidRules", err)
		return false
	}
	for _, w := range rs.Warnings() {
		a.log.Warn("rules warning", "rules", rs.Source(), "warning", w)
	}
	a.withMIGGeometryFor(rs) // miggeometry.go
	// Rules that cannot plan on this node (or serve none of the devices
	// they claim, or that a sink refuses) must not replace the last good:
	// see planreport.go.
	return a.takeRules(rs)
}

func (a *Agent) reportRuleError(reason string, err error) {
	a.metrics.ruleErrors.Inc()
	serving := a.servingDescription()
	a.log.Error("rules rejected; keeping "+serving, "rules", a.cfg.Rules, "err", err)
	a.warnEvent(reason, fmt.Sprintf("rules %s rejected, serving %s: %v", a.cfg.Rules, serving, err))
}

// reportApplyError says that a sink (err names it) did not take a plan.
// That is not a rules problem, and is not reported as one.
func (a *Agent) reportApplyError(err error) {
	serving := a.servingDescription()
	a.log.Error("a sink did not take the plan; keeping "+serving, "err", err)
	a.warnEvent("PlanRejected", fmt.Sprintf("a sink did not take the plan, serving %s: %v", serving, err))
}

// planFor makes the plan of rs for the current inventory and node labels,
// stamped with the digest of rs, with the kubelet API of every resource
// resolved: the agent's default
// (--serve) fills in those whose rules do not choose, so that every sink
// reads plan.Resource.Serve. A plan in which a rule's resource template
// fails on a device, or names it invalidly, is an error with the message
// `rules check` gives on this node (plan.CheckTemplates): the agent
// refuses it whole, as check does, rather than serve the rest.
func (a *Agent) planFor(rs agentconfig.RuleSet) (*plan.Plan, error) {
	p, err := rs.Plan(a.inv, a.nodeLabels)
	if err != nil {
		return nil, err
	}
	if err := p.CheckTemplates(); err != nil {
		return nil, err
	}
	p.RulesDigest = rs.Digest()
	return p.WithServeDefault(a.cfg.DefaultServe), nil
}

func (a *Agent) replanIfLabelsChanged(ctx context.Context) {
	if a.plan == nil || a.ruleSet == nil {
		return
	}
	p, err := a.planFor(a.ruleSet)
	if err == nil && !reflect.DeepEqual(p, a.plan) {
		a.replan(ctx, "node labels")
	}
}

// replan makes a plan from the current rules and inventory and hands it to
// the sinks. A plan that cannot be made, or that a sink refuses or fails to
// apply, keeps the last good one; the sinks still see the current
// inventory.
func (a *Agent) replan(ctx context.Context, why string) {
	if a.ruleSet == nil {
		a.applyLastGood(ctx)
		return
	}
	p, err := a.planFor(a.ruleSet)
	if err != nil {
		a.metrics.planErrors.Inc()
		a.reportRuleError("PlanFailed", err)
		a.applyLastGood(ctx)
		return
	}
	if err := a.serve(ctx, p); err != nil {
		a.metrics.planErrors.Inc()
		a.reportApplyError(err)
		if errors.Is(err, errRefused) {
			a.applyLastGood(ctx)
		}
		return
	}
	a.plan = p
	a.health.SetPlan(p)
	a.planServed(p) // annotation digest and ResourcesChanged Event: explain.go
	a.log.Info("plan applied", "trigger", why, "resources", p.Capacity())
	a.reportPlanProblems(p) // devices left out by their rule: planreport.go
}

// applyLastGood hands the sinks the current inventory with the last good
// plan (nil before any); sinks that already serve that plan change
// nothing, the publisher publishes the new inventory.
func (a *Agent) applyLastGood(ctx context.Context) {
	if err := a.serve(ctx, a.plan); err != nil {
		a.reportApplyError(err)
	}
}

// regate serves the last good plan again after a gate's answer changed (an
// MPS daemon came up or went down), advertising or withholding what it
// holds back.
func (a *Agent) regate(ctx context.Context) {
	if a.plan == nil {
		return
	}
	before := a.served
	if err := a.serve(ctx, a.plan); err != nil {
		a.reportApplyError(err)
		return
	}
	if a.served != before {
		a.log.Info("served resources updated", "trigger", "a readiness gate", "held", a.served.Held())
	}
}

// refreshNodeLabels takes the Node's labels for the rules' node selectors
// from the node watch's cache (no request). While the Node is not in the
// cache the last labels stay, or only --node-labels at start.
func (a *Agent) refreshNodeLabels() {
	labels := maps.Clone(a.cfg.NodeLabels)
	if labels == nil {
		labels = map[string]string{}
	}
	if n, ok := a.nodes.Cached(); ok {
		for k, v := range n.Labels {
			if _, set := labels[k]; !set {
				labels[k] = v
			}
		}
	} else if a.cfg.Kube != nil && a.nodeLabels != nil {
		return
	}
	a.nodeLabels = labels
}

// waitNodeLabels waits up to apiTimeout for the Node's labels, before the
// first plan, when the rules select on node labels (or cannot say). When
// they do not, the first plan is registered at once (register first: the
// kubelet needs only the devices), and the watch's first list arrives
// later as a label change that changes no plan.
func (a *Agent) waitNodeLabels(ctx context.Context) {
	if a.cfg.Kube == nil || a.ruleSet == nil {
		return
	}
	if u, ok := a.ruleSet.(interface{ UsesNodeLabels() bool }); ok && !u.UsesNodeLabels() {
		a.log.Debug("the rules have no node selector: planning without waiting for the Node's labels")
		return
	}
	if !a.nodes.Wait(ctx, apiTimeout) && ctx.Err() == nil {
		a.log.Warn("the Node is not listed yet; node selectors see only --node-labels until it is",
			"node", a.cfg.NodeName, "waited", apiTimeout)
	}
}

// apiTimeout bounds how long the agent's loop waits for the API server at
// start (the first list of its Node), so that an unreachable API server
// never stalls planning or serving.
const apiTimeout = 5 * time.Second

// nodeLabelsChanged takes the Node's labels from the watch's cache and
// replans when the plan they give differs.
func (a *Agent) nodeLabelsChanged(ctx context.Context) {
	before := a.nodeLabels
	a.refreshNodeLabels()
	if !maps.Equal(before, a.nodeLabels) {
		a.log.Info("node labels changed", "node", a.cfg.NodeName)
		a.replanIfLabelsChanged(ctx)
	}
}
