package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/featureplug/featureplug/rules"
)

// Exit codes of `featureplug rules diff`, so that a CI pipeline tells a
// blocked change from a broken pipeline. When the known nodes already
// block, the exit is diffExitBlocked even if other nodes' data is missing.
const (
	// diffExitPass: no change the policy blocks.
	diffExitPass = 0
	// diffExitBlocked: the policy blocks a change (a loss, the rules
	// failing on a node, a warning with --fail-on-warning).
	diffExitBlocked = 1
	// diffExitInput: a usage or input error (a flag, a rules file, the
	// kubeconfig, a selector, the ConfigMap named).
	diffExitInput = 2
	// diffExitIncomplete: the API server cannot be reached or answers
	// with an error, or a node's data cannot be compared.
	diffExitIncomplete = 3
)

// diffStatus names each exit code in the JSON report.
var diffStatus = [...]string{diffExitPass: "pass", diffExitBlocked: "blocked", diffExitInput: "invalid", diffExitIncomplete: "incomplete"}

// Values of --current besides a rules file.
const (
	// currentServed (the default) compares with what each node serves,
	// as its NodeFeature records it.
	currentServed = ""
	// currentConfigMap compares with the rules of the agents' ConfigMap.
	currentConfigMap = "configmap"
)

// diffFlags are the flags of `rules diff`.
type diffFlags struct {
	cluster   clusterFlags
	rulesFile string
	current   string
	selector  string
	output    string
	policy    diffPolicy
}

// diffPolicy decides which changes block. By default any loss blocks.
type diffPolicy struct {
	// AllowLoss lets every loss pass.
	AllowLoss bool `json:"allowLoss"`
	// AllowLossOf are resource names (path.Match patterns) whose loss
	// passes.
	AllowLossOf []string `json:"allowLossOf,omitempty"`
	// FailOnWarning blocks on any warning.
	FailOnWarning bool `json:"failOnWarning"`
}

// lossAllowed reports whether the policy lets resource lose capacity.
func (p *diffPolicy) lossAllowed(resource string) bool {
	if p.AllowLoss {
		return true
	}
	for _, pat := range p.AllowLossOf {
		if ok, _ := path.Match(pat, resource); ok {
			return true
		}
	}
	return false
}

// String says the policy in words, for the table.
func (p *diffPolicy) String() string {
	var s string
	switch {
	case p.AllowLoss:
		s = "losses pass (--allow-loss)"
	case len(p.AllowLossOf) > 0:
		s = "a loss blocks, except of " + strings.Join(p.AllowLossOf, ", ")
	default:
		s = "any loss blocks (--allow-loss, --allow-loss-of to pass)"
	}
	if p.FailOnWarning {
		return s + "; warnings block"
	}
	return s + "; warnings do not block (--fail-on-warning)"
}

func newRulesDiffCommand() *cobra.Command {
	return newRulesDiffCommandWith((*clusterFlags).reader)
}

// newRulesDiffCommandWith is newRulesDiffCommand reading the cluster
// through connect (tests hand it objects in memory).
func newRulesDiffCommandWith(connect func(*clusterFlags) (clusterReader, error)) *cobra.Command {
	f := &diffFlags{}
	cmd := &cobra.Command{
		Use:   "diff --rules NEW",
		Short: "Show what a rules file would change on every node, and gate on losses",
		Long: `Diff evaluates a proposed rules file on every node's published features
(featureplug's NodeFeature) and labels, or on the nodes --selector selects, and
compares the result with what each node serves now, as its agent records it in
the NodeFeature (annotation featureplug.io/resources: per resource the devices,
their sharing and the kubelet API serving them). --current FILE compares with
the plan of another rules file instead, --current configmap with the agents'
ConfigMap.

Nodes with the same outcome are shown together. Every change is typed: a
resource added or removed, its device count up or down, its sharing changed,
its serving API changed (device plugin <-> DRA), and, for resources served
through DRA, a DeviceClass selection changed. Each node's agent records the
digest of the rules it applied: nodes that run other rules than the
ConfigMap (or --current) are named as such.

A loss is a resource removed, or one whose devices or capacity (devices
times sharing replicas) shrink, or one moved to DRA that no DeviceClass in the
cluster serves by its extended resource name. By default any loss on any
node blocks; --allow-loss lets all pass, --allow-loss-of only those of the
named resources. The rules failing on a node always block; warnings block with
--fail-on-warning.

Exit codes:
  0  no change blocks
  1  blocked by the policy
  2  usage or input error: a flag, a rules file, the kubeconfig, a selector
     (one that matches no node included), the ConfigMap named
  3  the API server cannot be reached or answers with an error, or a node's
     data cannot be compared (its NodeFeature records nothing served)

-o json always prints one object: exitCode, status, error (when it fails),
and the changes with an op each.`,
		Example: `  featureplug rules diff --rules new-rules.yaml
  featureplug rules diff --rules new-rules.yaml --selector nvidia.com/gpu.family=hopper -o json
  featureplug rules diff --rules new-rules.yaml --allow-loss-of 'nvidia.com/mig-*'
  featureplug rules diff --rules new-rules.yaml --current old-rules.yaml --kubeconfig ~/.kube/prod`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return f.write(cmd.OutOrStdout(), nil, inputError(fmt.Errorf("rules diff takes no arguments (have %q): give the proposed rules with --rules", args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := f.run(cmd.Context(), func() (clusterReader, error) { return connect(&f.cluster) })
			return f.write(cmd.OutOrStdout(), rep, err)
		},
	}
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return f.write(cmd.OutOrStdout(), nil, &exitError{code: diffExitInput, err: err})
	})
	f.addFlags(cmd.Flags())
	return cmd
}

func (f *diffFlags) addFlags(fs *pflag.FlagSet) {
	f.cluster.addFlags(fs)
	fs.StringVar(&f.rulesFile, "rules", "", "the proposed rules file: a path or a builtin name ("+strings.Join(rules.BuiltinNames(), ", ")+")")
	fs.StringVar(&f.current, "current", currentServed,
		`what to compare with: a rules file (path or builtin), or "configmap" for the agents' ConfigMap (default: what each node serves)`)
	fs.StringVarP(&f.selector, "selector", "l", "", "label selector of the Nodes to evaluate (default: every node); one that matches no node is an error")
	fs.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fs.BoolVar(&f.policy.AllowLoss, "allow-loss", false, "let every loss of resources pass")
	fs.StringSliceVar(&f.policy.AllowLossOf, "allow-loss-of", nil, "let the loss of these resources pass (names or patterns such as 'nvidia.com/mig-*'; repeatable)")
	fs.BoolVar(&f.policy.FailOnWarning, "fail-on-warning", false, "block on any warning (rules warnings, nodes whose data is not exact)")
	fs.BoolVar(&f.policy.FailOnWarning, "strict", false, "the same as --fail-on-warning")
}

// write prints the report of a run (rep nil: nothing was read) in the
// chosen format and returns the run's error, an *exitError for codes
// other than 1.
func (f *diffFlags) write(w io.Writer, rep *diffReport, err error) error {
	if rep == nil {
		rep = &diffReport{Policy: f.policy, Selector: f.selector}
	}
	err = rep.finish(err)
	if f.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if werr := enc.Encode(rep); werr != nil {
			return werr
		}
	} else if rep.compared {
		if werr := writeDiff(w, rep); werr != nil {
			return werr
		}
	}
	return err
}

// run reads the rules and the cluster and compares. connect makes the
// API client; it is called after the rules files are read, so that a bad
// file is an input error with or without a cluster.
func (f *diffFlags) run(ctx context.Context, connect func() (clusterReader, error)) (*diffReport, error) {
	if err := checkOutput(f.output, "table", "json"); err != nil {
		return nil, inputError(err)
	}
	if f.rulesFile == "" {
		return nil, inputError(errors.New("--rules: the proposed rules file is required"))
	}
	if _, err := labels.Parse(f.selector); err != nil {
		return nil, inputError(fmt.Errorf("--selector %q: %w", f.selector, err))
	}
	for _, pat := range f.policy.AllowLossOf {
		if _, err := path.Match(pat, ""); err != nil {
			return nil, inputError(fmt.Errorf("--allow-loss-of %q: %w", pat, err))
		}
	}
	d := &diffRun{policy: f.policy}
	var err error
	if d.next, err = loadRulesFile(f.rulesFile); err != nil {
		return nil, inputError(err)
	}
	if f.current != currentServed && f.current != currentConfigMap {
		if d.cur, err = loadRulesFile(f.current); err != nil {
			return nil, inputError(fmt.Errorf("--current: %w", err))
		}
	}
	rep := d.newReport(f)
	r, err := connect()
	if err != nil {
		return rep, inputError(err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.cluster.timeout)
	defer cancel()
	if err := d.readConfigMap(ctx, r, &f.cluster, f.current == currentConfigMap, rep); err != nil {
		return rep, err
	}
	nodes, err := clusterNodes(ctx, r, &f.cluster, f.selector)
	if err != nil {
		return rep, &exitError{code: diffExitIncomplete, err: err}
	}
	if len(nodes) == 0 {
		if f.selector == "" {
			return rep, inputError(errors.New("the cluster lists no Nodes (is --kubeconfig or --context the cluster you mean?)"))
		}
		return rep, inputError(fmt.Errorf("--selector %q matches no Node", f.selector))
	}
	if err := d.compare(ctx, r, nodes, rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// readConfigMap reads the agents' ConfigMap: the baseline with --current
// configmap (where any failure is an error), otherwise only to name the
// nodes that run it (where a failure is said in the report).
func (d *diffRun) readConfigMap(ctx context.Context, r clusterReader, f *clusterFlags, baseline bool, rep *diffReport) error {
	name := fmt.Sprintf("%s/%s", f.namespace, f.configMap)
	rep.ConfigMap = &diffConfigMap{Name: name, Key: f.configMapKey}
	cm, err := r.ConfigMap(ctx, f.namespace, f.configMap)
	var cr *clusterRules
	if err == nil {
		cr, err = configMapRules(cm, f)
		if err != nil && baseline {
			return inputError(fmt.Errorf("--current configmap: %w", err))
		}
	} else if baseline {
		err = fmt.Errorf("--current configmap: the agents' rules: %w (give the rules to compare with as --current FILE, or the ConfigMap with --namespace, --configmap and --configmap-key)", err)
		if apierrors.IsNotFound(err) {
			return inputError(err)
		}
		return &exitError{code: diffExitIncomplete, err: err}
	}
	if err != nil {
		rep.ConfigMap.Error = err.Error()
		if apierrors.IsNotFound(err) {
			rep.ConfigMap.Error = "not found"
		}
		return nil
	}
	rep.ConfigMap.Digest = cr.digest
	if baseline {
		d.cur = cr
		rep.Baseline, rep.Current, rep.CurrentDigest = "rules", cr.where, cr.digest
	} else {
		d.configMap = cr
	}
	return nil
}

// inputError makes err exit with diffExitInput.
func inputError(err error) error { return &exitError{code: diffExitInput, err: err} }
