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
	// HealthPolicy is the node's effective health policy.
	HealthPolicy rules.HealthView `json:"healthPolicy"`
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
	cmd.AddCommand(newRulesDiffCommand())   // rules_diff.go
	return cmd
}

// printProblems prints the devices a plan leaves out because of their
// rules as warnings, one a line per distinct message: a MIG strategy that
// refuses a node leaves out every device for one reason, said once with
// the count. where, when set, prefixes each line ("on node gpu-1: ").
func printProblems(w io.Writer, where string, problems []plan.Problem) {
	var order []string
	devices := map[string][]string{}
	for _, p := range problems {
		if _, seen := devices[p.Message]; !seen {
			order = append(order, p.Message)
		}
		devices[p.Message] = append(devices[p.Message], p.Description)
	}
	for _, msg := range order {
		fmt.Fprintf(w, "warning: %sleft out: %s: %s\n", where, deviceList(devices[msg]), msg)
	}
}

// deviceList names devices for a message: "GPU 0 MIG 1 (2g.10gb)", or "16
// devices (GPU 0 MIG 0 (3g.20gb), ... and 12 more)".
func deviceList(descs []string) string {
	if len(descs) == 1 {
		return descs[0]
	}
	const shown = 4
	list := strings.Join(descs[:min(len(descs), shown)], ", ")
	if len(descs) > shown {
		list += fmt.Sprintf(", and %d more", len(descs)-shown)
	}
	return fmt.Sprintf("%d devices (%s)", len(descs), list)
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
		view       explainView
		claims     claimFlags // --claim: rules_explain_claim.go
	)
	cmd := &cobra.Command{
		Use:   "explain",
		Short: "Show what rules make of a node's devices, and why",
		Long: `Explain discovers the node's GPUs (through NVML, or a fake node), applies the
rules and prints, for every device, the resource it becomes, the rule that
claimed it, its sharing, and why each earlier rule did not claim it; then the
resources. Without --rules it explains the default rules (builtin "none").
When a resource is served through DRA (a rule's serve: dra, or --serve dra as
the agent is run with), or with --dra, the DRA view follows: per device and
resource the kubelet API that serves it, and per resource the DeviceClass and
CEL selector "featureplug dra classes" makes for it.

With --claim FILE it explains ResourceClaims instead: for each node (--fake-node,
this machine, --node, or every bundled fake node with --all-fake-nodes), which
devices kube-scheduler's allocator would give each request of each claim in the
file, for a firstAvailable request which subrequest, and how many of the node's
devices each request or subrequest matches (evaluating the classes' and the
claim's CEL selectors as the scheduler does), including devices the rules serve
through the device plugin, which a claim cannot get.`,
		Example: `  featureplug rules explain --rules mixed --fake-node dgx-a100
  featureplug rules explain --rules rules.yaml --fake-node ./node.yaml --node-labels pool=inference
  featureplug rules explain --rules /etc/featureplug/rules.yaml -o json
  featureplug rules explain --rules mixed --serve dra --claim claim.yaml --all-fake-nodes`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "yaml", "json"); err != nil {
				return err
			}
			if err := view.check(); err != nil {
				return err
			}
			if claims.file != "" {
				return claims.explain(cmd, src, &cluster, rulesFile, nodeLabels, output)
			}
			if claims.allFakeNodes {
				return usageErrorf("--all-fake-nodes explains a claim on every bundled fake node: it needs --claim")
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
			printProblems(cmd.ErrOrStderr(), "", plan.Problems)
			if err := plan.CheckServes(); err != nil { // what run refuses on a reload, as check does
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %v\n", err)
			}
			unavailable := unavailableResources(plan, mpsControlProblem(src, mpsControl, cmd.Flags().Changed("mps-control")))
			if err := view.print(cmd.OutOrStdout(), cmd.ErrOrStderr(), output, rs, plan, unavailable); err != nil {
				return err
			}
			if err := plan.CheckTemplates(); err != nil { // what run refuses, as rules check on the node does
				return &exitError{code: 1, err: fmt.Errorf("run refuses this plan on this node:\n%w", err)}
			}
			return nil
		},
	}
	src.addFlags(cmd.Flags())
	cluster.addFlags(cmd.Flags())
	addRulesFlag(cmd, &rulesFile, rulesFlagUsage("none; with --node, the agents' ConfigMap"))
	cmd.Flags().StringToStringVar(&nodeLabels, "node-labels", nil, "labels of the node, for rules with a nodeSelector (k=v,..., repeatable)")
	addDeprecatedAlias(cmd, "node-label", "node-labels")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, yaml or json")
	cmd.Flags().StringVar(&mpsControl, "mps-control", mps.DefaultControlBinary, "the MPS control program MPS-shared resources need")
	cmd.Flags().StringVar((*string)(&view.serve), "serve", string(plan.ServeDevicePlugin), "the kubelet API of resources whose rule does not say serve, as the agent's run --serve: device-plugin or dra")
	cmd.Flags().BoolVar(&view.dra, "dra", false, "show the DRA view (serving API, DeviceClass and CEL selector per resource) even when no resource is served through DRA")
	cmd.Flags().BoolVar(&view.health, "health", false, "show the node's health policy (what each XID and health event does) even when no health entry of the rules selects the node")
	claims.addFlags(cmd) // after --serve, which the claim mode reads too
	return cmd
}

// explainView is what rules explain shows besides the plan.
type explainView struct {
	// serve is the agent's --serve for resources whose rule does not say.
	serve plan.Serve
	// dra asks for the DRA view, which is shown anyway when a resource is
	// served through DRA.
	dra bool
	// health asks for the node's health policy, which is shown anyway
	// when a health entry of the rules selects the node.
	health bool
}

// showsHealth reports whether the explanation of p has the health policy.
func (v explainView) showsHealth(p *plan.Plan) bool { return v.health || p.Health != nil }

// check validates the view's flags.
func (v explainView) check() error {
	if v.serve != "" && v.serve != plan.ServeDevicePlugin && v.serve != plan.ServeDRA {
		return usageErrorf("--serve: %q is not a kubelet API (use %s or %s)", v.serve, plan.ServeDevicePlugin, plan.ServeDRA)
	}
	return nil
}

// showsDRA reports whether the explanation of p has the DRA view.
func (v explainView) showsDRA(p *plan.Plan) bool {
	if v.dra {
		return true
	}
	for i := range p.Resources {
		if p.Resources[i].ServedBy(v.serve) == plan.ServeDRA {
			return true
		}
	}
	return false
}

// printExplanation writes a plan in the chosen format, with the DRA view
// when a resource is served through DRA.
func printExplanation(out, errOut io.Writer, format string, rs *rules.RuleSet, plan *plan.Plan, unavailable map[string]string) error {
	return explainView{}.print(out, errOut, format, rs, plan, unavailable)
}

// print writes a plan in the chosen format.
func (v explainView) print(out, errOut io.Writer, format string, rs *rules.RuleSet, p *plan.Plan, unavailable map[string]string) error {
	if v.serve == "" {
		v.serve = plan.ServeDevicePlugin
	}
	doc := explainOutput{Rules: rs.Source(), Warnings: rs.Warnings(), AgentSettings: rs.AgentSettings(), Unavailable: unavailable,
		HealthPolicy: rules.NewHealthView(p), Plan: p}
	if v.showsDRA(p) {
		doc.DRA = draExplainView(errOut, rs) // dra_explain.go
		draExplainFill(doc.DRA, resourceNames(p))
	}
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
	if err := rules.WriteExplanationWith(out, p, rules.ExplainOptions{DRA: doc.DRA, DefaultServe: v.serve}); err != nil {
		return errors.Join(errors.New("writing the explanation"), err)
	}
	for _, name := range slices.Sorted(maps.Keys(unavailable)) {
		if _, err := fmt.Fprintf(out, "\n%s: %s\n", name, unavailable[name]); err != nil {
			return err
		}
	}
	if !v.showsHealth(p) {
		return nil
	}
	return rules.WriteHealthView(out, p)
}
