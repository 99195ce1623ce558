package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/featureplug/featureplug/plugin/mps"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/plan"
)

// explainOutput is what `featureplug rules explain -o yaml|json` prints.
type explainOutput struct {
	Rules    string   `json:"rules"`
	Warnings []string `json:"warnings,omitempty"`
	// AgentSettings are the agent flags the rules file sets (an NVIDIA
	// config's flags.plugin.deviceListStrategy, ...).
	AgentSettings []rules.AgentSetting `json:"agentSettings,omitempty"`
	// Unavailable says, per resource, why the agent would hold it back.
	Unavailable map[string]string `json:"unavailable,omitempty"`
	// DRA is, per resource, its DRA DeviceClass (dra_explain.go).
	DRA map[string]rules.DRAClass `json:"dra,omitempty"`
	*plan.Plan
}

// unavailableResources names the resources of plan the agent would not
// advertise on this machine, and why: MPS resources need the MPS control
// program (their strategy needs a daemon), which problem says is missing.
func unavailableResources(plan *plan.Plan, problem error) map[string]string {
	if problem == nil {
		return nil
	}
	var out map[string]string
	for _, r := range plan.Resources {
		if !needsDaemon(r.Sharing) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[r.Name] = "not advertised until its MPS control daemon is up: " + problem.Error()
	}
	return out
}

// needsDaemon reports whether a resource's sharing strategy needs an MPS
// control daemon (plan.StrategySpec.Daemon).
func needsDaemon(s plan.Sharing) bool {
	spec, _ := s.Spec()
	return spec.Daemon
}

func newRulesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "Check rules files and explain what they make of a node's devices",
		Long: `Rules map a node's devices to extended resource names. "rules check" validates
rules files; "rules explain" shows, for every device of a node, the resource it
becomes, the rule that claimed it and why each earlier rule did not.

A rules file is a path or one of the builtin names: ` + strings.Join(rules.BuiltinNames(), ", ") + `.`,
	}
	cmd.AddCommand(newRulesCheckCommand(), newRulesExplainCommand())
	cmd.AddCommand(newRulesImportCommand()) // rules_import.go
	cmd.AddCommand(newRulesDiffCommand())   // rules_cluster_cmd.go
	return cmd
}

// printWarnings prints a rule set's warnings, one a line.
func printWarnings(w io.Writer, rs *rules.RuleSet) {
	for _, warning := range rs.Warnings() {
		fmt.Fprintf(w, "warning: %s\n", warning)
	}
}

func newRulesExplainCommand() *cobra.Command {
	var (
		src        sourceFlags
		cluster    explainNodeFlags // --node: rules_cluster_cmd.go
		rulesFile  string
		output     string
		nodeLabels map[string]string
		mpsControl string
	)
	cmd := &cobra.Command{
		Use:   "explain",
		Short: "Show what rules make of a node's devices, and why",
		Long: `Explain discovers the node's GPUs (through NVML, or a fake node), applies the
rules and prints, for every device, the resource it becomes, the rule that
claimed it, its sharing, and why each earlier rule did not claim it; then the
resources. Without --rules it explains the default rules (builtin "none").
Next to it is the DRA view: per resource the kubelet API that serves it (the
rule's serve, or the agent's --serve) and the DeviceClass and CEL selector
"featureplug dra classes" makes for it.`,
		Example: `  featureplug rules explain --rules mixed --fake-node dgx-a100
  featureplug rules explain --rules rules.yaml --fake-node ./node.yaml --node-labels pool=inference
  featureplug rules explain --rules /etc/featureplug/rules.yaml -o json`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "yaml", "json"); err != nil {
				return err
			}
			if cluster.node != "" {
				return cluster.explain(cmd, rulesFile, output)
			}
			rs := rules.Default()
			if rulesFile != "" {
				var err error
				if rs, err = loadRules(rulesFile); err != nil {
					return err
				}
			}
			inv, err := discoverInventory(cmd.Context(), src)
			if err != nil {
				return err
			}
			plan, err := rs.Plan(inv, nodeLabels)
			if err != nil {
				return &exitError{code: 1, err: fmt.Errorf("the rules do not apply to this node:\n%w", err)}
			}
			for _, p := range plan.Problems {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: left out: %s\n", p.String())
			}
			return printExplanation(cmd.OutOrStdout(), cmd.ErrOrStderr(), output, rs, plan, unavailableResources(plan, mpsControlProblem(src, mpsControl, cmd.Flags().Changed("mps-control"))))
		},
	}
	src.addFlags(cmd.Flags())
	cluster.addFlags(cmd.Flags())
	addRulesFlag(cmd, &rulesFile, rulesFlagUsage("none; with --node, the agents' ConfigMap"))
	cmd.Flags().StringToStringVar(&nodeLabels, "node-labels", nil, "labels of the node, for rules with a nodeSelector (k=v,..., repeatable)")
	addDeprecatedAlias(cmd, "node-label", "node-labels")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, yaml or json")
	cmd.Flags().StringVar(&mpsControl, "mps-control", mps.DefaultControlBinary, "the MPS control program MPS-shared resources need")
	return cmd
}

// printExplanation writes a plan in the chosen format.
func printExplanation(out, errOut io.Writer, format string, rs *rules.RuleSet, plan *plan.Plan, unavailable map[string]string) error {
	doc := explainOutput{Rules: rs.Source(), Warnings: rs.Warnings(), AgentSettings: rs.AgentSettings(), Unavailable: unavailable, Plan: plan}
	doc.DRA = draExplainView(errOut, rs) // dra_explain.go
	draExplainFill(doc.DRA, resourceNames(plan))
	switch format {
	case "json":
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	case "yaml":
		data, err := yaml.Marshal(doc)
		if err != nil {
			return fmt.Errorf("encoding the plan: %w", err)
		}
		_, err = out.Write(data)
		return err
	}
	printWarnings(errOut, rs)
	if _, err := fmt.Fprintf(out, "Rules: %s\n", rs.Source()); err != nil {
		return err
	}
	if s := settingsSummary(rs); s != "" {
		if _, err := fmt.Fprintf(out, "  %s\n", s); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintln(out); err != nil {
		return err
	}
	if err := rules.WriteExplanationWith(out, plan, rules.ExplainOptions{DRA: doc.DRA}); err != nil {
		return errors.Join(errors.New("writing the explanation"), err)
	}
	for _, name := range slices.Sorted(maps.Keys(unavailable)) {
		if _, err := fmt.Fprintf(out, "\n%s: %s\n", name, unavailable[name]); err != nil {
			return err
		}
	}
	return nil
}
