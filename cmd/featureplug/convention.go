package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/featureplug/featureplug/rules"
)

// Exit codes shared by every command (rules check and rules diff add their
// own on top, documented in their help).
const (
	// exitFailed: the command ran and failed (invalid rules, no GPU, a
	// rules file that does not apply).
	exitFailed = 1
	// exitUsage: the command was not given what it needs: an unknown
	// command or flag, a bad flag value, wrong arguments, a rules file or
	// fake node that does not exist.
	exitUsage = 2
	// exitCluster: a command that reads the cluster (--node) could not:
	// no kubeconfig, the API server unreachable, an object missing.
	exitCluster = 3
)

// exitCodesHelp is the root command's description of the exit codes.
const exitCodesHelp = `Exit codes: 0 success; 1 the command failed (invalid rules, no GPU, rules
that do not apply); 2 a usage error (unknown command or flag, a bad flag value,
wrong arguments, a rules file or fake node that does not exist); 3 the cluster
could not be read (commands with --node). "rules check" and "rules diff"
document what else their codes mean.`

// usageErrorf is a usage error: main exits with exitUsage.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// asUsageError marks err as a usage error unless it already carries an
// exit code.
func asUsageError(err error) error {
	var ee *exitError
	if err == nil || errors.As(err, &ee) {
		return err
	}
	return &exitError{code: exitUsage, err: err}
}

// asClusterError gives err, an error reading the cluster, exitCluster
// unless it already carries an exit code.
func asClusterError(err error) error {
	var ee *exitError
	if err == nil || errors.As(err, &ee) {
		return err
	}
	return &exitError{code: exitCluster, err: err}
}

// rulesFlagUsage is the help of --rules on every command that reads one
// rules file.
func rulesFlagUsage(def string) string {
	u := "rules file: a path, a builtin name (" + strings.Join(rules.BuiltinNames(), ", ") + ") or an NVIDIA device-plugin config; also taken as the argument"
	if def != "" {
		u += "; default: " + def
	}
	return u
}

// addRulesFlag gives cmd the one way every command takes a rules file:
// --rules FILE, or FILE as its only argument (the two are the same flag:
// the argument sets --rules, so its environment variable, where the
// command has one, is overridden as by the flag). Giving both, differently,
// or more than one argument is a usage error.
func addRulesFlag(cmd *cobra.Command, file *string, usage string) {
	cmd.Flags().StringVar(file, "rules", "", usage)
	if !strings.Contains(cmd.Use, "[RULES]") {
		cmd.Use += " [RULES]"
	}
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			return nil
		case len(args) > 1:
			return usageErrorf("%s takes one rules file, as --rules FILE or as its argument, not %d arguments (%s)",
				cmd.CommandPath(), len(args), strings.Join(args, " "))
		case cmd.Flags().Changed("rules") && *file != args[0]:
			return usageErrorf("two rules files: --rules %s and the argument %s (give one)", *file, args[0])
		}
		return cmd.Flags().Set("rules", args[0])
	}
}

// addRulesFiles is addRulesFlag for a command that takes several rules
// files: --rules is repeatable, and the arguments are more files.
func addRulesFiles(cmd *cobra.Command, files *[]string, usage string) {
	cmd.Flags().StringArrayVar(files, "rules", nil, usage)
	cmd.Args = func(_ *cobra.Command, args []string) error {
		*files = append(*files, args...)
		return nil
	}
}

// applyConventions makes every command of the tree report usage errors
// alike: a bad flag and bad arguments exit with exitUsage, whatever cobra
// validator found them. The flag-error function is set on the root alone,
// since cobra's subcommands inherit it; a command that reports its errors
// in its own output format (rules diff -o json) keeps the one it set.
func applyConventions(root *cobra.Command) {
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return asUsageError(err) })
	wrapArgs(root)
}

// wrapArgs makes the argument validators of c and its subcommands return
// usage errors.
func wrapArgs(c *cobra.Command) {
	if args := c.Args; args != nil {
		c.Args = func(cmd *cobra.Command, a []string) error { return asUsageError(args(cmd, a)) }
	}
	for _, sub := range c.Commands() {
		wrapArgs(sub)
	}
}

// loadRules loads a rules file or builtin for a command: a file that does
// not exist is a usage error (exitUsage), one that does not load exitFailed.
func loadRules(name string) (*rules.RuleSet, error) {
	rs, err := rules.Load(name)
	switch {
	case err == nil:
		return rs, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, &exitError{code: exitUsage, err: err}
	}
	return nil, &exitError{code: exitFailed, err: err}
}

// checkRulesPath refuses, as a usage error, a rules name that is neither a
// builtin nor an existing path (with rules.Load's message, which suggests
// the builtin a misspelt name is near).
func checkRulesPath(flag, name string) error {
	if name == "" || slices.Contains(rules.BuiltinNames(), name) {
		return nil
	}
	_, err := os.Stat(name)
	if errors.Is(err, fs.ErrNotExist) {
		if _, lerr := rules.Load(name); lerr != nil {
			err = lerr
		}
	}
	if err != nil {
		return usageErrorf("%s: %w", flag, err)
	}
	return nil
}
