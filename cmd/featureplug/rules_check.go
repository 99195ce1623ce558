package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/featureplug/featureplug/cmd/internal/agent"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/catalog"
	"github.com/featureplug/featureplug/rules/plan"
)

// Exit codes of rules check besides 0 (every file valid).
const (
	// checkInvalid: a file is invalid, does not apply to --node, or has a
	// warning under --strict.
	checkInvalid = exitFailed
	// checkUsage: no file, a file that does not exist, a bad flag.
	checkUsage = exitUsage
	// checkClusterUnreadable: --node could not be read from the cluster.
	checkClusterUnreadable = exitCluster
)

// checkFlags are the flags of rules check.
type checkFlags struct {
	files   []string
	strict  bool
	node    string
	cluster clusterFlags
}

func newRulesCheckCommand() *cobra.Command {
	var f checkFlags
	cmd := &cobra.Command{
		Use:   "check [--rules] FILE...",
		Short: "Validate rules files, listing every error and warning",
		Long: `Check loads rules files and reports every problem, each naming the file, line,
rule, field and value. It also tries every rule on every device featureplug's
fake-node catalog can make (every bundled fake node, every product as a whole
GPU and in every MIG profile, +me profiles included), so a template that gives
an invalid resource name for some device, or a rule that would advertise more
device IDs than the caps allow, is an error here rather than on a node.
A file check accepts never crashes run.

Warnings (a rule that can never match, such as an attribute featureplug never
publishes) do not fail the check unless --strict is given: use --strict in CI.
With --node, each file is also planned on that Node of the cluster, from its
published NodeFeature and labels, as "rules explain --node" does: devices it
would leave out and MPS resources its agent cannot run are warnings, rules that
do not apply to the node are errors.

Exit codes: 0 every file is valid (warnings allowed without --strict); 1 a
file is invalid, does not apply to --node, or has a warning under --strict;
2 a usage error (no file, a file that does not exist, a bad flag); 3 --node
could not be read from the cluster.`,
		Example: `  featureplug rules check /etc/featureplug/rules.yaml
  featureplug rules check --strict manifests/examples/rules/*.yaml
  featureplug rules check --rules rules.yaml --node gpu-node-7`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(f.files) == 0 {
				return usageErrorf("rules check: no rules file (give FILE... or --rules FILE)")
			}
			return f.check(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	addRulesFiles(cmd, &f.files, "rules file to check (repeatable; files may also be given as arguments)")
	cmd.Flags().BoolVar(&f.strict, "strict", false, "fail (exit 1) on warnings too, such as a rule that can never match")
	cmd.Flags().StringVar(&f.node, "node", "", "also plan the files on this Node of the cluster, from its published NodeFeature and labels")
	f.cluster.addFlags(cmd.Flags())
	return cmd
}

// checkReport counts what a check found.
type checkReport struct {
	missing, invalid, warned int
}

// check loads each file and tries it on every device of the fake-node
// catalog (and on --node), printing what is wrong with it.
func (f *checkFlags) check(ctx context.Context, out, errOut io.Writer) error {
	var node *clusterNode
	if f.node != "" {
		var err error
		if node, err = f.readNode(ctx); err != nil {
			return &exitError{code: checkClusterUnreadable, err: err}
		}
	}
	var rep checkReport
	var nodes []rules.CheckNode
	for _, file := range f.files {
		rs, err := loadRules(file)
		if exitCode := codeOf(err); exitCode == checkUsage {
			rep.missing++
			fmt.Fprintf(errOut, "%s: %v\n", file, errors.Unwrap(err))
			continue
		}
		if err == nil && nodes == nil {
			if nodes, err = catalog.Nodes(); err != nil {
				return fmt.Errorf("building the fake-node catalog: %w", err)
			}
		}
		if err == nil {
			err = rs.CheckNodes(nodes)
		}
		var warnings []string
		if err == nil {
			warnings = rs.Warnings()
			if node != nil {
				var nodeWarnings []string
				nodeWarnings, err = checkOnNode(rs, node)
				warnings = append(warnings, nodeWarnings...)
			}
		}
		if err != nil {
			rep.invalid++
			fmt.Fprintf(errOut, "%s: invalid:\n", file)
			for _, line := range strings.Split(errorText(err), "\n") {
				fmt.Fprintf(errOut, "  %s\n", line)
			}
			continue
		}
		for _, w := range warnings {
			fmt.Fprintf(errOut, "warning: %s\n", w)
		}
		verdict := "ok"
		if len(warnings) > 0 {
			rep.warned++
			verdict = fmt.Sprintf("ok, %s", plural(len(warnings), "warning"))
			if f.strict {
				verdict = fmt.Sprintf("fails under --strict: %s", plural(len(warnings), "warning"))
			}
		}
		fmt.Fprintf(out, "%s: %s, %s (%s)\n", file, verdict, plural(len(rs.RuleNames()), "rule"), strings.Join(rs.RuleNames(), ", "))
		for _, line := range []string{rs.ServeSummary(), rs.HealthSummary(), settingsSummary(rs)} {
			if line != "" {
				fmt.Fprintf(out, "  %s\n", line)
			}
		}
	}
	n := len(f.files)
	switch {
	case rep.missing > 0:
		return &exitError{code: checkUsage, err: fmt.Errorf("rules check: %d of %d files not found", rep.missing, n)}
	case rep.invalid > 0:
		return &exitError{code: checkInvalid, err: fmt.Errorf("rules check: %d of %d files invalid", rep.invalid, n)}
	case f.strict && rep.warned > 0:
		return &exitError{code: checkInvalid, err: fmt.Errorf("rules check --strict: %d of %d files have warnings", rep.warned, n)}
	}
	return nil
}

// readNode reads --node's inputs from the cluster.
func (f *checkFlags) readNode(ctx context.Context) (*clusterNode, error) {
	r, err := f.cluster.reader()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, f.cluster.timeout)
	defer cancel()
	n, err := r.Node(ctx, f.node)
	if err != nil {
		return nil, err
	}
	nfs, err := r.NodeFeatures(ctx, f.node)
	if err != nil {
		return nil, err
	}
	return &clusterNode{name: f.node, labels: n.Labels, feature: pickNodeFeature(f.node, f.cluster.namespace, nfs)}, nil
}

// checkOnNode plans rs on a cluster node: an error when the rules do not
// apply to it (or it has published nothing to plan on), warnings for the
// devices the plan leaves out and the MPS resources its agent cannot run.
func checkOnNode(rs *rules.RuleSet, n *clusterNode) ([]string, error) {
	np := planNode(rs, n)
	if np.err != nil {
		return nil, fmt.Errorf("on node %s: %w", n.name, np.err)
	}
	var warnings []string
	var problems strings.Builder
	printProblems(&problems, "on node "+n.name+": ", np.plan.Problems)
	for _, line := range strings.Split(strings.TrimSpace(problems.String()), "\n") {
		if line != "" {
			warnings = append(warnings, strings.TrimPrefix(line, "warning: "))
		}
	}
	unavailable := nodeMPSUnavailable(np.plan, n)
	for _, name := range slices.Sorted(maps.Keys(unavailable)) {
		warnings = append(warnings, fmt.Sprintf("on node %s: %s: %s", n.name, name, unavailable[name]))
	}
	return warnings, nil
}

// codeOf is the exit code err carries (0 for nil, exitFailed for an error
// without one).
func codeOf(err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	}
	return exitFailed
}

// errorText is err's message without the exit code wrapper.
func errorText(err error) string {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.err.Error()
	}
	return err.Error()
}

// plural formats a count with a noun: "1 rule", "2 rules".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// nodeMPSUnavailable names the MPS resources of a cluster node's plan that
// its agent would hold back, and why, from what the agent publishes about
// its MPS control program (agent.AnnotationMPSControl). It is nil when the
// program is there or the agent does not say (an older agent).
func nodeMPSUnavailable(p *plan.Plan, n *clusterNode) map[string]string {
	state := ""
	if n.feature != nil {
		state = n.feature.Annotations[agent.AnnotationMPSControl]
	}
	if state == "" || state == agent.MPSControlFound {
		return nil
	}
	return unavailableResources(p, fmt.Errorf("the node's agent cannot start MPS control daemons: %s", state))
}
