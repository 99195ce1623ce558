// Command featureplug is the featureplug node agent and its tools: run the
// agent, discover GPUs, check and explain rules.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/featureplug/featureplug/discovery/fakenode/mpscontrol"
)

// exitError carries a process exit code through cobra to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "featureplug",
		Short: "GPU discovery, NFD features and rule-driven device plugins for Kubernetes nodes",
		Long: `featureplug discovers a node's NVIDIA GPUs, publishes them as Node Feature
Discovery features and labels, turns them into resource names with rules written
in NFD's match language, and serves one kubelet device plugin per resource name.

` + exitCodesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCommand())
	root.AddCommand(newDiscoverCommand())
	root.AddCommand(newRulesCommand())
	root.AddCommand(newDRACommand()) // dra.go
	root.AddCommand(newHealthCommand())
	run := newRunCommand()
	// One flag name for node labels across commands: --node-labels, as
	// rules explain takes it too; the singular stays as a deprecated alias.
	addDeprecatedAlias(run, "node-label", "node-labels")
	root.AddCommand(run)
	refuseUnknownCommands(root)
	applyConventions(root) // convention.go
	return root
}

// refuseUnknownCommands makes every command that has subcommands fail on
// an argument that names none of them ("unknown command"), with cobra's
// suggestions, instead of printing its help and exiting 0; without
// arguments it still prints its help.
func refuseUnknownCommands(c *cobra.Command) {
	if !c.HasSubCommands() {
		return
	}
	c.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if cmd.SuggestionsMinimumDistance <= 0 {
			cmd.SuggestionsMinimumDistance = 2 // cobra's default, set only on its own path
		}
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf("; did you mean %q?", s[0])
		}
		names := make([]string, 0, len(cmd.Commands()))
		for _, sub := range cmd.Commands() {
			if sub.IsAvailableCommand() {
				names = append(names, sub.Name())
			}
		}
		msg += fmt.Sprintf(" (commands: %s)", strings.Join(names, ", "))
		return &exitError{code: 2, err: errors.New(msg)}
	}
	if c.Run == nil && c.RunE == nil {
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
	for _, sub := range c.Commands() {
		refuseUnknownCommands(sub)
	}
}

// addDeprecatedAlias adds --alias to a command as a hidden, deprecated
// spelling of its flag --name: both set the same value (so they combine as
// the flag itself would), and using the alias prints a note on stderr.
func addDeprecatedAlias(cmd *cobra.Command, alias, name string) {
	fs := cmd.Flags()
	target := fs.Lookup(name)
	if target == nil {
		panic("addDeprecatedAlias: no flag --" + name)
	}
	fs.AddFlag(&pflag.Flag{
		Name:     alias,
		Usage:    "deprecated: use --" + name,
		Value:    &deprecatedValue{Value: target.Value, alias: alias, name: name, out: cmd.ErrOrStderr},
		DefValue: target.DefValue,
		Hidden:   true,
	})
}

// deprecatedValue is the value of a deprecated alias: it sets the flag it
// stands for and says so on stderr.
type deprecatedValue struct {
	pflag.Value
	alias, name string
	out         func() io.Writer
}

// Set notes the deprecation and sets the aliased flag.
func (v *deprecatedValue) Set(s string) error {
	fmt.Fprintf(v.out(), "featureplug: flag --%s is deprecated, use --%s\n", v.alias, v.name)
	return v.Value.Set(s)
}

func main() {
	// The fake node's driver root links nvidia-cuda-mps-control to this
	// binary (fakeroot.go): run as that, it is the fake MPS control daemon.
	if mpscontrol.Invoked(os.Args[0]) {
		os.Exit(mpscontrol.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "featureplug:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		os.Exit(ee.code)
	}
	os.Exit(1)
}
