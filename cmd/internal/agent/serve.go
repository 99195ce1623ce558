package agent

import (
	"fmt"

	"github.com/featureplug/featureplug/rules/plan"
)

// Which kubelet API serves a resource (issue 20): a rule may say serve:
// device-plugin or serve: dra; Config.DefaultServe (--serve) decides for
// the resources whose rules do not say. The device-plugin sink serves only
// the resources plan.Resource.ServedBy(DefaultServe) gives to the device
// plugins, and the DRA sink only the others, so a device is offered
// through exactly one API.

// checkDefaultServe validates cfg.DefaultServe, making "" device-plugin.
func checkDefaultServe(cfg *Config) error {
	switch cfg.DefaultServe {
	case "":
		cfg.DefaultServe = plan.ServeDevicePlugin
	case plan.ServeDevicePlugin, plan.ServeDRA:
	default:
		return fmt.Errorf("--serve: %q is not a kubelet API (use %s or %s)", cfg.DefaultServe, plan.ServeDevicePlugin, plan.ServeDRA)
	}
	return nil
}

// planFor makes the plan of rs for the current inventory and node labels,
// and refuses one whose DRA resources the agent cannot serve at all (no
// API server, no CDI spec: draSink.canServe). Every sharing strategy is
// served through DRA, MPS included (mps.go). Every plan the agent takes is
// made here, so such a plan reaches no sink: were it refused by the DRA
// sink only, the device plugins (applied first) would already have
// withdrawn the resources it moves to DRA, and they would be served by
// neither API.
func (a *Agent) planFor(rs RuleSet) (*plan.Plan, error) {
	p, err := rs.Plan(a.inv, a.nodeLabels)
	if err != nil {
		return nil, err
	}
	if a.dra != nil {
		if err := a.dra.canServe(p); err != nil {
			return nil, fmt.Errorf("%s: %w", rs.Source(), err)
		}
	}
	return p, nil
}
