package main

import (
	"github.com/spf13/cobra"

	"github.com/featureplug/featureplug/rules/plan"
)

// claimFlags are the flags of rules explain's claim mode
// (rules_explain_claim.go); it reads explain's --serve too.
type claimFlags struct {
	file         string
	allFakeNodes bool
}

// addFlags adds the claim mode's flags to explain.
func (f *claimFlags) addFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.file, "claim", "", "explain, per node, which devices the ResourceClaims and ResourceClaimTemplates of this YAML file would be allocated "+
		"(for a firstAvailable request, which subrequest), as kube-scheduler allocates them; DeviceClasses in the file join featureplug's")
	fs.BoolVar(&f.allFakeNodes, "all-fake-nodes", false, "with --claim: explain every bundled fake node")
}

// defaultServe is the agent's --serve the explanation assumes.
func (f *claimFlags) defaultServe(cmd *cobra.Command) (plan.Serve, error) {
	s := plan.Serve(cmd.Flags().Lookup("serve").Value.String())
	if s != plan.ServeDevicePlugin && s != plan.ServeDRA {
		return "", usageErrorf("--serve: %q is not a kubelet API (use %s or %s)", s, plan.ServeDevicePlugin, plan.ServeDRA)
	}
	return s, nil
}
