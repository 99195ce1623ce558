package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/catalog"
	"github.com/featureplug/featureplug/rules/plan"
)

// Exit codes of rules check besides 0 (every file valid).
const (
	// checkInvalid: a file is invalid, would not serve on the node as it
	// says, or has a warning under --strict.
	checkInvalid = exitFailed
	// checkUsage: no file, a file that does not exist, a bad flag. A
	// --node the cluster cannot give is exitCluster.
	checkUsage = exitUsage
)

// checkFlags are the flags of rules check.
type checkFlags struct {
	files  []string
	strict bool
	on     checkNodeFlags // --fake-node, --node: rules_check_node.go
}

func newRulesCheckCommand() *cobra.Command {
	var f checkFlags
	cmd := &cobra.Command{
		Use:   "check [--rules] FILE...",
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
that would withdraw every resource is an error, with run's own message. With
--node, MPS resources the node's agent cannot run (it publishes whether it
finds its MPS control program) are warnings. A file check accepts never
crashes run.

Warnings (a rule that can never match, such as an attribute featureplug never
publishes) do not fail the check unless --strict is given: use --strict in CI.

Exit codes: 0 every file is valid (warnings allowed without --strict); 1 a
file is invalid, would not serve on the node as it says, or has a warning
under --strict; 2 a usage error (no file, a file that does not exist, a bad
flag); 3 --node could not be read from the cluster.`,
		Example: `  featureplug rules check /etc/featureplug/rules.yaml
  featureplug rules check --strict manifests/examples/rules/*.yaml
  featureplug rules check --fake-node dgx-h100 rules.yaml
  featureplug rules check --rules rules.yaml --node gpu-node-7`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(f.files) == 0 {
				return usageErrorf("rules check: no rules file (give FILE... or --rules FILE)")
			}
			target, err := f.on.target(cmd)
			if err != nil {
				return err
			}
			return f.check(cmd.OutOrStdout(), cmd.ErrOrStderr(), target)
		},
	}
	addRulesFiles(cmd, &f.files, "rules file to check (repeatable; files may also be given as arguments)")
	cmd.Flags().BoolVar(&f.strict, "strict", false, "fail (exit 1) on warnings too, such as a rule that can never match")
	f.on.addFlags(cmd.Flags())
	return cmd
}

// checkReport counts what a check found.
type checkReport struct {
	missing, invalid, warned int
}

// check loads each file and tries it on the node target names, or on every
// device of the fake-node catalog (every bundled node, every product and MIG
// profile) when it is nil, printing what is wrong with it.
func (f *checkFlags) check(out, errOut io.Writer, target *checkTarget) error {
	var rep checkReport
	var nodes []rules.CheckNode
	for _, file := range f.files {
		rs, err := loadRules(file)
		if codeOf(err) == checkUsage {
			rep.missing++
			fmt.Fprintf(errOut, "%s: %v\n", file, errors.Unwrap(err))
			continue
		}
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
			rep.invalid++
			if target != nil {
				fmt.Fprintf(errOut, "%s: invalid on %s:\n", file, target.name)
			} else {
				fmt.Fprintf(errOut, "%s: invalid:\n", file)
			}
			for _, line := range strings.Split(errorText(err), "\n") {
				fmt.Fprintf(errOut, "  %s\n", line)
			}
			continue
		}
		warnings := rs.Warnings()
		if target != nil {
			warnings = append(warnings, target.warnings(p)...)
		}
		for _, w := range warnings {
			fmt.Fprintf(errOut, "warning: %s\n", w)
		}
		verdict := "ok"
		if target != nil {
			verdict += " on " + target.name
		}
		if len(warnings) > 0 {
			rep.warned++
			verdict = fmt.Sprintf("%s, %s", verdict, plural(len(warnings), "warning"))
			if f.strict {
				verdict = fmt.Sprintf("fails under --strict: %s", plural(len(warnings), "warning"))
			}
		}
		line := fmt.Sprintf("%s: %s, %s (%s)", file, verdict, plural(len(rs.RuleNames()), "rule"), strings.Join(rs.RuleNames(), ", "))
		if target != nil {
			line += ": " + servedSummary(p)
		}
		fmt.Fprintln(out, line)
		if target == nil {
			for _, summary := range []string{rs.ServeSummary(), rs.HealthSummary(), settingsSummary(rs)} {
				if summary != "" {
					fmt.Fprintf(out, "  %s\n", summary)
				}
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

// warnings are what a plan the check accepts on the target would still
// not serve: on a cluster node, the MPS resources its agent cannot run.
func (t *checkTarget) warnings(p *plan.Plan) []string {
	if t.cluster == nil {
		return nil
	}
	unavailable := nodeMPSUnavailable(p, t.cluster)
	var out []string
	for _, name := range slices.Sorted(maps.Keys(unavailable)) {
		out = append(out, fmt.Sprintf("on %s: %s: %s", t.name, name, unavailable[name]))
	}
	return out
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

// nodeMPSUnavailable names the MPS resources of a cluster node's plan that
// its agent would hold back, and why, from what the agent publishes about
// its MPS control program (labeler.AnnotationMPSControl). It is nil when the
// program is there or the agent does not say (an older agent).
func nodeMPSUnavailable(p *plan.Plan, n *clusterNode) map[string]string {
	state := ""
	if n.feature != nil {
		state = n.feature.Annotations[labeler.AnnotationMPSControl]
	}
	if state == "" || state == labeler.MPSControlFound {
		return nil
	}
	return unavailableResources(p, fmt.Errorf("the node's agent cannot start MPS control daemons: %s", state))
}
