package agent

import "github.com/featureplug/featureplug/cmd/internal/agentconfig"

// migGeometryRuleSet is a rule set that says whether discovery must read
// the MIG geometry and placements (discovery.ReadMIGGeometry) for it:
// rules that partition GPUs on demand, or that name DRA devices as
// NVIDIA's driver does. The rules package's *RuleSet is one.
type migGeometryRuleSet interface{ NeedsMIGGeometry() bool }

// needsMIGGeometry reports whether rs wants the MIG geometry read.
func needsMIGGeometry(rs agentconfig.RuleSet) bool {
	g, ok := rs.(migGeometryRuleSet)
	return ok && g.NeedsMIGGeometry()
}

// withMIGGeometryFor makes the current inventory one read with the MIG
// geometry when rs needs it and the inventory was read for rules that did
// not: at start (discovery comes before the rules) and when a rules edit
// starts asking for it. It keeps the inventory when discovery fails or the
// GPU source changed meanwhile (the next rediscovery reads it).
func (a *Agent) withMIGGeometryFor(rs agentconfig.RuleSet) {
	if a.inv == nil || !needsMIGGeometry(rs) || needsMIGGeometry(a.ruleSet) {
		return
	}
	inv, lib, err := a.discoverFor(rs)
	if cur := a.lib.Load(); err != nil || cur == nil || lib != cur.Interface {
		a.log.Warn("could not read the MIG geometry the rules need; the next discovery reads it", "err", err)
		return
	}
	a.setInventory(inv)
}
