package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/featureplug/featureplug/rules"
)

// explainNodeFlags are the flags `rules explain` takes to explain a node of
// the cluster rather than this machine.
type explainNodeFlags struct {
	clusterFlags
	node string
}

func (f *explainNodeFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.node, "node", "", "explain this Node of the cluster from its published NodeFeature and labels, instead of this machine")
	f.clusterFlags.addFlags(fs)
}

// explain runs `rules explain --node`: without --rules it explains the
// rules of the agents' ConfigMap.
func (f *explainNodeFlags) explain(cmd *cobra.Command, rulesFile, output string) error {
	for _, local := range []string{"fake-node", "node-labels", "node-label", "mps-control", "driver-root", "nvml-library", "sysfs-root"} {
		if fl := cmd.Flags().Lookup(local); fl != nil && fl.Changed {
			return usageErrorf("--%s describes this machine: it cannot be used with --node", local)
		}
	}
	r, err := f.reader()
	if err != nil {
		return asClusterError(err)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	return asClusterError(explainNode(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), r, &f.clusterFlags, f.node, rulesFile, output))
}

func newRulesDiffCommand() *cobra.Command {
	var (
		cluster   clusterFlags
		rulesFile string
		current   string
		selector  string
		output    string
	)
	cmd := &cobra.Command{
		Use:   "diff --rules NEW",
		Short: "Show what a rules file would change on every node of the cluster",
		Long: `Diff evaluates a proposed rules file against every node's published features
(featureplug's NodeFeature) and labels, or the nodes --selector selects, and
prints what would change per node, nodes with identical outcomes together:
resources that appear (+), disappear (-) or change device count or sharing
(~), devices that would get no resource, and devices or nodes the rules could
not plan. It compares with the rules the agents run now: their ConfigMap, or
--current. Each node's agent records the digest of the rules it applied; nodes
that run other (older) rules are shown as such.

It exits 1 when any node would lose every resource or hit an error, so it can
gate a CI pipeline or a GitOps change.`,
		Example: `  featureplug rules diff --rules new-rules.yaml
  featureplug rules diff --rules new-rules.yaml --selector nvidia.com/gpu.family=hopper -o json
  featureplug rules diff --rules new-rules.yaml --current old-rules.yaml --kubeconfig ~/.kube/prod`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "json"); err != nil {
				return err
			}
			if rulesFile == "" {
				return fmt.Errorf("--rules: the proposed rules file is required")
			}
			r, err := cluster.reader()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), cluster.timeout)
			defer cancel()
			next, err := loadClusterRules(ctx, r, &cluster, rulesFile)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			printWarnings(cmd.ErrOrStderr(), next.rs)
			cur, err := loadClusterRules(ctx, r, &cluster, current)
			if err != nil {
				return &exitError{code: 1, err: fmt.Errorf("the current rules: %w", err)}
			}
			nodes, err := clusterNodes(ctx, r, &cluster, selector)
			if err != nil {
				return err
			}
			rep := diffNodes(cur, next, nodes)
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				err = enc.Encode(rep)
			} else {
				err = writeDiff(cmd.OutOrStdout(), rep)
			}
			if err != nil {
				return err
			}
			if rep.Failed {
				return &exitError{code: 1, err: fmt.Errorf("rules diff: %s would leave a node without resources or fail on it", rulesFile)}
			}
			return nil
		},
	}
	cluster.addFlags(cmd.Flags())
	cmd.Flags().StringVar(&rulesFile, "rules", "", "the proposed rules file: a path or a builtin name ("+strings.Join(rules.BuiltinNames(), ", ")+")")
	cmd.Flags().StringVar(&current, "current", "", "the rules to compare with (default: the agents' ConfigMap, see --configmap)")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector of the Nodes to evaluate (default: every node)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}
