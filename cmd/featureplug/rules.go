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
	"github.com/featureplug/featureplug/rules/catalog"
	"github.com/featureplug/featureplug/rules/plan"
)

// explainOutput is what `featureplug rules explain -o yaml|json` prints.
type explainOutput struct {
	Rules    string   `json:"rules"`
	Warnings []string `json:"warnings,omitempty"`
	// Unavailable says, per resource, why the agent would hold it back.
	Unavailable map[string]string `json:"unavailable,omitempty"`
	// DRA is, per resource, its DRA DeviceClass (dra_explain.go).
	DRA map[string]rules.DRAClass `json:"dra,omitempty"`
	// HealthPolicy is the node's effective health policy.
	HealthPolicy rules.HealthView `json:"healthPolicy"`
	*plan.Plan
}

// unavailableResources names the resources of plan the agent would not
// advertise on this machine, and why: MPS resources need the MPS control
// program (their strategy needs a daemon).
func unavailableResources(plan *plan.Plan, mpsControl string) map[string]string {
	var out map[string]string
	for _, r := range plan.Resources {
		if !needsDaemon(r.Sharing) {
			continue
		}
		if _, err := mps.ResolveControlBinary(mpsControl); err != nil {
			if out == nil {
				out = map[string]string{}
			}
			out[r.Name] = "not advertised until its MPS control daemon is up: " + err.Error()
		}
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
	cmd.AddCommand(newRulesDiffCommand())   // rules_diff.go
	return cmd
}

func newRulesCheckCommand() *cobra.Command {
	var on checkNodeFlags // rules_check_node.go
	cmd := &cobra.Command{
		Use:   "check FILE...",
		Short: "Validate rules files, listing every error and warning",
		Long: `Check loads rules files and reports every problem, each naming the file, line,
rule, field and value. It also tries every rule on every device featureplug's
fake-node catalog can make (every bundled fake node, every product as a whole
GPU and in every MIG profile, +me profiles included), and counts device IDs on
the largest node of every product (16 GPUs), so a template that gives an
invalid resource name for some device, or a rule that would advertise more
device IDs than the caps allow, is an error here rather than on a node.

With --fake-node or --node, check instead tries the file on that node exactly
as run would: a plan run would refuse, a device it would leave out, or a plan
that would withdraw every resource is an error, with run's own message.
A file check accepts never crashes run.`,
		Example: `  featureplug rules check /etc/featureplug/rules.yaml
  featureplug rules check mixed
  featureplug rules check --fake-node dgx-h100 rules.yaml
  featureplug rules check --node gpu-node-7 rules.yaml`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			target, err := on.target(cmd)
			if err != nil {
				return err
			}
			return checkRules(cmd.OutOrStdout(), cmd.ErrOrStderr(), args, target)
		},
	}
	on.addFlags(cmd.Flags())
	return cmd
}

// checkRules loads each file and tries it on the node target names, or on
// every device of the fake-node catalog (every bundled node, every product
// and MIG profile) when it is nil, printing what is wrong with it, and
// fails when any file does not load or would not serve as it says there.
func checkRules(out, errOut io.Writer, files []string, target *checkTarget) error {
	bad := 0
	var nodes []rules.CheckNode
	for _, file := range files {
		rs, err := rules.Load(file)
		if err == nil && target == nil && nodes == nil {
			if nodes, err = catalog.Nodes(); err != nil {
				return fmt.Errorf("building the fake-node catalog: %w", err)
			}
		}
		var p *plan.Plan
		switch {
		case err != nil:
		case target != nil:
			p, err = rs.CheckOn(target.name, target.inv, target.labels)
		default:
			err = rs.CheckNodes(nodes)
		}
		if err != nil {
			bad++
			if target != nil {
				fmt.Fprintf(errOut, "%s: invalid on %s:\n", file, target.name)
			} else {
				fmt.Fprintf(errOut, "%s: invalid:\n", file)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				fmt.Fprintf(errOut, "  %s\n", line)
			}
			continue
		}
		if target != nil {
			printWarnings(errOut, rs)
			fmt.Fprintf(out, "%s: ok on %s, %d rules (%s): %s\n", file, target.name, len(rs.RuleNames()), strings.Join(rs.RuleNames(), ", "), servedSummary(p))
			continue
		}
		printWarnings(errOut, rs)
		fmt.Fprintf(out, "%s: ok, %d rules (%s)\n", file, len(rs.RuleNames()), strings.Join(rs.RuleNames(), ", "))
		if serve := rs.ServeSummary(); serve != "" { // rules that choose device-plugin or dra (issue 20)
			fmt.Fprintf(out, "  %s\n", serve)
		}
		if health := rs.HealthSummary(); health != "" {
			fmt.Fprintf(out, "  %s\n", health)
		}
	}
	if bad > 0 {
		return &exitError{code: 1, err: fmt.Errorf("rules check: %d of %d files invalid", bad, len(files))}
	}
	return nil
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
		Args: cobra.NoArgs,
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
				if rs, err = rules.Load(rulesFile); err != nil {
					return &exitError{code: 1, err: err}
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
			if err := plan.CheckServes(); err != nil { // what run refuses on a reload, as check does
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %v\n", err)
			}
			return printExplanation(cmd.OutOrStdout(), cmd.ErrOrStderr(), output, rs, plan, unavailableResources(plan, mpsControl))
		},
	}
	src.addFlags(cmd.Flags())
	cluster.addFlags(cmd.Flags())
	cmd.Flags().StringVar(&rulesFile, "rules", "", "rules file: a path or a builtin name ("+strings.Join(rules.BuiltinNames(), ", ")+"); default: none")
	cmd.Flags().StringToStringVar(&nodeLabels, "node-labels", nil, "labels of the node, for rules with a nodeSelector (k=v,..., repeatable)")
	addDeprecatedAlias(cmd, "node-label", "node-labels")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, yaml or json")
	cmd.Flags().StringVar(&mpsControl, "mps-control", mps.DefaultControlBinary, "the MPS control program MPS-shared resources need")
	return cmd
}

// printExplanation writes a plan in the chosen format.
func printExplanation(out, errOut io.Writer, format string, rs *rules.RuleSet, plan *plan.Plan, unavailable map[string]string) error {
	doc := explainOutput{Rules: rs.Source(), Warnings: rs.Warnings(), Unavailable: unavailable, HealthPolicy: rules.NewHealthView(plan), Plan: plan}
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
	if _, err := fmt.Fprintf(out, "Rules: %s\n\n", rs.Source()); err != nil {
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
	return rules.WriteHealthView(out, plan)
}
