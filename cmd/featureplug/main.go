// Command featureplug is the featureplug node agent and its tools: run the
// agent, discover GPUs, check and explain rules.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
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
in NFD's match language, and serves one kubelet device plugin per resource name.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCommand())
	root.AddCommand(newDiscoverCommand())
	root.AddCommand(newRulesCommand())
	root.AddCommand(newRunCommand())
	return root
}

func main() {
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
