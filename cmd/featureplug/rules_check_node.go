package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// checkNodeFlags are the flags `rules check` takes to try files on one
// node, as run would, rather than on the whole catalog.
type checkNodeFlags struct {
	fakeNode   string
	nodeLabels map[string]string
	node       explainNodeFlags // --node and the cluster flags
}

func (f *checkNodeFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.fakeNode, "fake-node", "",
		"try the files on this fake node, as run would: a bundled name ("+bundledNodeList()+") or a YAML file")
	fs.StringToStringVar(&f.nodeLabels, "node-labels", nil, "labels of the --fake-node, for rules with a nodeSelector (k=v,..., repeatable)")
	fs.StringVar(&f.node.node, "node", "", "try the files on this Node of the cluster, from its published NodeFeature and labels, as its agent would")
	f.node.clusterFlags.addFlags(fs)
}

// checkTarget is the node `rules check` tries files on.
type checkTarget struct {
	name   string
	inv    *discovery.Inventory
	labels map[string]string
	// cluster is the cluster node (--node), for what its agent publishes
	// about itself; nil for a fake node.
	cluster *clusterNode
}

// target reads the node the flags name; nil when they name none.
func (f *checkNodeFlags) target(cmd *cobra.Command) (*checkTarget, error) {
	switch {
	case f.fakeNode != "" && f.node.node != "":
		return nil, usageErrorf("--fake-node and --node name two nodes: give one")
	case f.nodeLabels != nil && f.fakeNode == "":
		return nil, usageErrorf("--node-labels are the labels of a --fake-node (a --node has its own)")
	case f.fakeNode != "":
		inv, err := discoverInventory(cmd.Context(), sourceFlags{fakeNode: f.fakeNode})
		if err != nil {
			return nil, asUsageError(err)
		}
		return &checkTarget{name: "fake node " + f.fakeNode, inv: inv, labels: f.nodeLabels}, nil
	case f.node.node != "":
		r, err := f.node.reader()
		if err != nil {
			return nil, asClusterError(err)
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), f.node.timeout)
		defer cancel()
		target, err := readCheckTarget(ctx, r, &f.node.clusterFlags, f.node.node)
		return target, asClusterError(err)
	}
	return nil, nil
}

// readCheckTarget reads a cluster Node's devices back from its published
// NodeFeature, with the Node's labels.
func readCheckTarget(ctx context.Context, r clusterReader, f *clusterFlags, node string) (*checkTarget, error) {
	n, err := r.Node(ctx, node)
	if err != nil {
		return nil, err
	}
	nfs, err := r.NodeFeatures(ctx, node)
	if err != nil {
		return nil, err
	}
	cn := &clusterNode{name: node, labels: n.Labels, feature: pickNodeFeature(node, f.namespace, nfs)}
	if cn.feature == nil {
		return nil, fmt.Errorf("node %s: no featureplug NodeFeature: the agent has not published its features", node)
	}
	rebuilt, err := cn.rebuild()
	if err != nil {
		return nil, fmt.Errorf("node %s: NodeFeature %s/%s: %w", node, cn.feature.Namespace, cn.feature.Name, err)
	}
	return &checkTarget{name: "node " + node, inv: rebuilt.Inventory, labels: n.Labels, cluster: cn}, nil
}

// servedSummary says what a plan serves: "serves nvidia.com/gpu (8),
// example.com/shared (4 x 2 replicas)", or "serves nothing (serveNothing)".
func servedSummary(p *plan.Plan) string {
	if len(p.Resources) == 0 {
		if p.ServeNothing {
			return "serves nothing (serveNothing: true)"
		}
		return "serves nothing (the node has no device)"
	}
	parts := make([]string, len(p.Resources))
	for i, r := range p.Resources {
		parts[i] = fmt.Sprintf("%s (%d)", r.Name, len(r.Devices))
		if reps := r.Sharing.DeviceReplicas(); reps > 1 {
			parts[i] = fmt.Sprintf("%s (%d x %d replicas)", r.Name, len(r.Devices), reps)
		}
	}
	return "serves " + strings.Join(parts, ", ")
}
