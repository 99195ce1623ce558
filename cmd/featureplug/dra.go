package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/catalog"
	"github.com/featureplug/featureplug/rules/draclass"
)

func newDRACommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dra",
		Short: "Dynamic Resource Allocation tools: the DeviceClasses of a rules file",
		Long: `featureplug serves the resources of rules with "serve: dra" (or all, with
run --serve dra) through Dynamic Resource Allocation as driver gpu.featureplug.io.
"dra classes" prints the DeviceClasses that let pods ask for those resources by
their extended resource names.`,
	}
	cmd.AddCommand(newDRAClassesCommand())
	return cmd
}

func newDRAClassesCommand() *cobra.Command {
	var (
		rulesFile string
		output    string
		fakeNode  string
		nvml      bool
		cluster   clusterFlags
	)
	cmd := &cobra.Command{
		Use:   "classes",
		Short: "Print one DRA DeviceClass per resource name of a rules file",
		Long: `Classes prints one DeviceClass (resource.k8s.io/v1) per resource name the rules
give, named after it in featureplug's domain (example.com/a100-80gb ->
a100-80gb.example.com.featureplug.io, nvidia.com/gpu ->
gpu.nvidia.com.featureplug.io: never the name of another driver's class), with
spec.extendedResourceName set to that name, so that a pod asking for the
extended resource is served from featureplug's ResourceSlices. Its CEL selector
is compiled from the rules' NFD match expressions over the device attributes
featureplug publishes; the first rule that matches a device claims it, so a
class excludes what earlier rules claim. A templated resource gives one class
per name it gives on featureplug's fake-node catalog (and on the node of
--fake-node and on --nvml's: a GPU the catalog does not know gets its class that way).

What CEL cannot express (a nodeSelector, matchName, some ops) is named on
stderr with the rule, field and value, and the classes it affects select on the
resource attribute the agent publishes instead, which is always right.
Resources whose rules all say serve: device-plugin get no class.

With the rules file's dra.compatibility: nvidia, NVIDIA's DRA driver's classes
gpu.nvidia.com (serving nvidia.com/gpu) and mig.nvidia.com come too, selecting
the GPUs and MIG devices of both drivers, so claims written for NVIDIA's driver
work on featureplug's nodes and NVIDIA's alike (docs/migration.md).

A class must not take the name or extended resource of another driver's class:
applying it would overwrite that class, or (the newest class with an extended
resource wins) take the pods asking for it. Offline, the classes are checked
against those NVIDIA's DRA driver installs and each clash is a warning. With
--kubeconfig or --context they are checked against the cluster's classes: a
clash is an error and nothing is printed, except that with compatibility on
featureplug's gpu.nvidia.com and mig.nvidia.com replace NVIDIA's (a warning),
selecting what those select and featureplug's devices too.

A rules file is a path, a builtin name (` + strings.Join(rules.BuiltinNames(), ", ") + `) or an
NVIDIA device-plugin config, as for rules check.`,
		Example: `  featureplug dra classes --rules mixed | kubectl apply -f -
  featureplug dra classes --rules /etc/featureplug/rules.yaml -o json
  featureplug dra classes --rules rules.yaml --kubeconfig ~/.kube/config`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "yaml", "json"); err != nil {
				return err
			}
			if rulesFile == "" {
				return usageErrorf("dra classes: no rules file (give --rules FILE or FILE)")
			}
			rs, err := loadRules(rulesFile)
			if err != nil {
				return err
			}
			nodes, err := catalog.Nodes()
			if err != nil {
				return fmt.Errorf("building the fake-node catalog: %w", err)
			}
			more, err := draClassNodes(cmd.Context(), fakeNode, nvml)
			if err != nil {
				return err
			}
			res, err := draclass.Compile(rs, append(nodes, more...))
			if err != nil {
				return err
			}
			printWarnings(cmd.ErrOrStderr(), rs)
			printClassWarnings(cmd.ErrOrStderr(), res)
			if err := checkClassClashes(cmd, &cluster, res); err != nil {
				return err
			}
			return writeClasses(cmd.OutOrStdout(), output, res)
		},
	}
	addRulesFlag(cmd, &rulesFile, rulesFlagUsage(""))
	cmd.Flags().StringVarP(&output, "output", "o", "yaml", "output format: yaml or json")
	cmd.Flags().StringVar(&fakeNode, "fake-node", "",
		"also give classes to the names templates give on this fake node: a bundled name ("+bundledNodeList()+") or a YAML file")
	cmd.Flags().BoolVar(&nvml, "nvml", false, "also give classes to the names templates give on this machine's GPUs (NVML under /)")
	cmd.Flags().StringVar(&cluster.kubeconfig, "kubeconfig", "", "check the classes against the DeviceClasses of the cluster of this kubeconfig file: refuse a class another driver's class has the name or extended resource of")
	cmd.Flags().StringVar(&cluster.context, "context", "", "check the classes against the cluster of this kubeconfig context (default: the current context)")
	cmd.Flags().DurationVar(&cluster.timeout, "request-timeout", 30*time.Second, "how long to wait for the API server when checking the cluster's classes")
	return cmd
}

// checkClassClashes checks the classes against other drivers' classes:
// the cluster's when --kubeconfig or --context is given (a clash is an
// error, but for NVIDIA's classes that NVIDIA compatibility replaces),
// else those NVIDIA's DRA driver installs (each clash a warning).
func checkClassClashes(cmd *cobra.Command, cluster *clusterFlags, res *draclass.Result) error {
	errOut := cmd.ErrOrStderr()
	if !cmd.Flags().Changed("kubeconfig") && !cmd.Flags().Changed("context") {
		for _, c := range res.Clashes(draclass.NVIDIAClasses()) {
			where := "where NVIDIA's DRA driver is installed"
			fmt.Fprintf(errOut, "warning: %s: %s (check a cluster with --kubeconfig)\n", where, c)
		}
		return nil
	}
	r, err := cluster.reader()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), cluster.timeout)
	defer cancel()
	installed, err := r.DeviceClasses(ctx)
	if err != nil {
		return err
	}
	var refused []string
	for _, c := range res.Clashes(installed) {
		if c.Replaces {
			fmt.Fprintf(errOut, "warning: %s\n", c)
			continue
		}
		refused = append(refused, c.String())
	}
	if len(refused) > 0 {
		return &exitError{code: exitFailed, err: fmt.Errorf("refusing to print classes that would shadow the cluster's:\n  %s", strings.Join(refused, "\n  "))}
	}
	return nil
}

// draClassNodes discovers the nodes, besides the catalog's, whose devices
// the names of templates are taken from.
func draClassNodes(ctx context.Context, fakeNode string, nvml bool) ([]rules.CheckNode, error) {
	var out []rules.CheckNode
	if fakeNode != "" {
		inv, err := discoverInventory(ctx, sourceFlags{fakeNode: fakeNode})
		if err != nil {
			return nil, fmt.Errorf("--fake-node %s: %w", fakeNode, err)
		}
		out = append(out, rules.CheckNode{Name: "fake node " + fakeNode, Inventory: inv})
	}
	if nvml {
		inv, err := discoverInventory(ctx, sourceFlags{driverRoot: "/", sysfsRoot: "/"})
		if err != nil {
			return nil, fmt.Errorf("--nvml: %w", err)
		}
		out = append(out, rules.CheckNode{Name: "this machine", Inventory: inv})
	}
	return out, nil
}

// printClassWarnings writes what the class compiler could not express,
// and the resources that get no class, one a line.
func printClassWarnings(w io.Writer, res *draclass.Result) {
	for _, e := range res.Warnings {
		fmt.Fprintf(w, "warning: %s\n", e)
	}
	for _, name := range res.DevicePlugin {
		fmt.Fprintf(w, "note: %s: every rule giving it says serve: device-plugin, so it gets no DeviceClass\n", name)
	}
}

// writeClasses writes the classes as YAML documents or as a JSON List,
// as kubectl apply -f takes them.
func writeClasses(w io.Writer, format string, res *draclass.Result) error {
	items := make([]map[string]any, 0, len(res.Classes))
	for _, c := range res.Classes {
		m, err := plainObject(c.Object)
		if err != nil {
			return fmt.Errorf("encoding DeviceClass %s: %w", c.Name, err)
		}
		items = append(items, m)
	}
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	}
	var b bytes.Buffer
	for i, m := range items {
		if i > 0 {
			b.WriteString("---\n")
		}
		data, err := yaml.Marshal(m)
		if err != nil {
			return fmt.Errorf("encoding DeviceClass %s: %w", res.Classes[i].Name, err)
		}
		b.Write(data)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// plainObject turns an API object into a map without the fields an
// object made here leaves empty (metadata.creationTimestamp: null).
func plainObject(obj any) (map[string]any, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	return m, nil
}
