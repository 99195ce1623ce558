package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

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
	)
	cmd := &cobra.Command{
		Use:   "classes",
		Short: "Print one DRA DeviceClass per resource name of a rules file",
		Long: `Classes prints one DeviceClass (resource.k8s.io/v1) per resource name the rules
give, named after it (example.com/a100-80gb -> a100-80gb.example.com), with
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

A rules file is a path, a builtin name (` + strings.Join(rules.BuiltinNames(), ", ") + `) or an
NVIDIA device-plugin config, as for rules check.`,
		Example: `  featureplug dra classes --rules mixed | kubectl apply -f -
  featureplug dra classes --rules /etc/featureplug/rules.yaml -o json`,
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
			return writeClasses(cmd.OutOrStdout(), output, res)
		},
	}
	addRulesFlag(cmd, &rulesFile, rulesFlagUsage(""))
	cmd.Flags().StringVarP(&output, "output", "o", "yaml", "output format: yaml or json")
	cmd.Flags().StringVar(&fakeNode, "fake-node", "",
		"also give classes to the names templates give on this fake node: a bundled name ("+bundledNodeList()+") or a YAML file")
	cmd.Flags().BoolVar(&nvml, "nvml", false, "also give classes to the names templates give on this machine's GPUs (NVML under /)")
	return cmd
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
