package main

import (
	"context"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// explainNodeFlags are the flags `rules explain` takes to explain a node of
// the cluster rather than this machine.
type explainNodeFlags struct {
	clusterFlags
	node string
}

func (f *explainNodeFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.node, "node", "", "explain this Node of the cluster from its published NodeFeature and labels, instead of this machine")
	f.clusterFlags.addFlags(fs)
}

// explain runs `rules explain --node`: without --rules it explains the
// rules of the agents' ConfigMap.
func (f *explainNodeFlags) explain(cmd *cobra.Command, rulesFile, output string) error {
	for _, local := range []string{"fake-node", "node-labels", "node-label", "mps-control", "driver-root", "nvml-library", "sysfs-root"} {
		if fl := cmd.Flags().Lookup(local); fl != nil && fl.Changed {
			return usageErrorf("--%s describes this machine: it cannot be used with --node", local)
		}
	}
	r, err := f.reader()
	if err != nil {
		return asClusterError(err)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	return asClusterError(explainNode(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), r, &f.clusterFlags, f.node, rulesFile, output))
}
