package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/featureplug/featureplug/rules/plan"
)

// claimFlags are the flags of rules explain's claim mode
// (rules_explain_claim.go).
type claimFlags struct {
	file         string
	allFakeNodes bool
	serve        string // explain's --serve when it has none of its own
}

// addFlags adds the claim mode's flags; call it after explain's own, so
// that an explain --serve of its own is the one used.
func (f *claimFlags) addFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.file, "claim", "", "explain, per node, which devices the ResourceClaims and ResourceClaimTemplates of this YAML file would be allocated "+
		"(for a firstAvailable request, which subrequest), as kube-scheduler allocates them; DeviceClasses in the file join featureplug's")
	fs.BoolVar(&f.allFakeNodes, "all-fake-nodes", false, "with --claim: explain every bundled fake node")
	if fs.Lookup("serve") == nil {
		fs.StringVar(&f.serve, "serve", string(plan.ServeDevicePlugin),
			"with --claim: the kubelet API of resources whose rule does not say serve, as the agent's run --serve: device-plugin or dra")
	}
}

// defaultServe is the agent's --serve the explanation assumes.
func (f *claimFlags) defaultServe(cmd *cobra.Command) (plan.Serve, error) {
	s := plan.Serve(cmd.Flags().Lookup("serve").Value.String())
	if s != plan.ServeDevicePlugin && s != plan.ServeDRA {
		return "", fmt.Errorf("--serve: %q is not a kubelet API (use %s or %s)", s, plan.ServeDevicePlugin, plan.ServeDRA)
	}
	return s, nil
}
