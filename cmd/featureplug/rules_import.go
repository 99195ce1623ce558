package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/nvidiaconfig"
)

func newRulesImportCommand() *cobra.Command {
	var opts nvidiaconfig.Options
	var output string
	var env []string
	cmd := &cobra.Command{
		Use:   "import FILE...",
		Short: "Convert NVIDIA device-plugin configs into a rules file",
		Long: `Import converts NVIDIA k8s-device-plugin config files (version v1) into one
featureplug rules file that advertises what NVIDIA's plugin advertises with them:
flags.migStrategy, sharing.timeSlicing and sharing.mps (replicas,
renameByDefault, failRequestsGreaterThanOne). Every rule's comment names the
file, config and field it comes from.

A file is a config, or a ConfigMap manifest whose data keys are named configs.
Several configs (a ConfigMap's keys, or several files, each named after the
file without its extension) become rules selecting nodes by the
` + nvidiaconfig.NodeLabel + ` label, as NVIDIA's config manager does;
--default-config names the config for nodes without the label.

Fields NVIDIA's plugin ignores (a rename other than renameByDefault's, devices,
resources.gpus/mig) are ignored here too, and every field without an
equivalent in the rules is reported as a warning saying what to do instead.
"featureplug run --rules" also reads a config file as it is.

NVIDIA's plugin takes its health checks from its environment, not the config:
give it with --env (DP_DISABLE_HEALTHCHECKS, DP_ENABLE_HEALTHCHECKS, read as
NVIDIA's plugin reads them: "all" or "xids", or XID lists) and the rules get a
health section that does the same; every difference from NVIDIA's behaviour
(the XIDs it always ignores, "all" disabling everything) is a warning.`,
		Example: `  featureplug rules import nvidia-config.yaml > rules.yaml
  featureplug rules import --default-config b configmap.yaml -o rules.yaml
  featureplug rules import a.yaml b.yaml --default-config a
  featureplug rules import nvidia-config.yaml --env DP_DISABLE_HEALTHCHECKS=109,48`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if opts.Env, err = parseEnv(env); err != nil {
				return &exitError{code: 2, err: err}
			}
			return importRules(cmd.OutOrStdout(), cmd.ErrOrStderr(), args, output, opts)
		},
	}
	cmd.Flags().StringArrayVar(&env, "env", nil, "NAME=VALUE of NVIDIA's device-plugin environment ("+nvidiaconfig.EnvDisableHealthChecks+", "+
		nvidiaconfig.EnvEnableHealthChecks+"), repeatable: becomes the rules' health section")
	cmd.Flags().StringVar(&opts.Default, "default-config", "", "config for nodes without the "+nvidiaconfig.NodeLabel+
		" label (NVIDIA's config.default); default: the only config, else NVIDIA's built-in defaults")
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the rules to this file instead of standard output")
	return cmd
}

// parseEnv reads --env NAME=VALUE flags (a value may hold commas and "=").
func parseEnv(flags []string) (map[string]string, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	env := make(map[string]string, len(flags))
	for _, f := range flags {
		name, value, ok := strings.Cut(f, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--env %q: want NAME=VALUE, e.g. %s=all", f, nvidiaconfig.EnvDisableHealthChecks)
		}
		env[name] = value
	}
	return env, nil
}

// importRules converts the files, checks that the rules load, and writes
// them with the warnings on errOut.
func importRules(out, errOut io.Writer, files []string, output string, opts nvidiaconfig.Options) error {
	cfgs, err := nvidiaconfig.ReadFiles(files)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("rules import:\n%w", err)}
	}
	res, err := nvidiaconfig.Convert(cfgs, opts)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("rules import:\n%w", err)}
	}
	source := "imported rules"
	if output != "" {
		source = output
	}
	rs, err := rules.Parse(source, res.Rules)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("rules import: the converted rules do not load (a bug, please report it):\n%w\n%s", err, res.Rules)}
	}
	warnings := append(slices.Clone(res.Warnings), rs.Warnings()...)
	for _, s := range res.Settings {
		warnings = append(warnings, fmt.Sprintf("%s: %s: a rules file cannot carry it: run the agent with %s (as the rules file's header says); run --rules with the config itself applies it (have %s)",
			s.Where, s.Field, s, s.Written))
	}
	warnings = append(warnings, res.Refused...)
	for _, w := range warnings {
		fmt.Fprintf(errOut, "warning: %s\n", w)
	}
	if output == "" {
		_, err = out.Write(res.Rules)
		return err
	}
	if err := os.WriteFile(output, res.Rules, 0o644); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("rules import: %w", err)}
	}
	fmt.Fprintf(errOut, "%s: %d rules (%s)\n", output, len(rs.RuleNames()), strings.Join(rs.RuleNames(), ", "))
	return nil
}
