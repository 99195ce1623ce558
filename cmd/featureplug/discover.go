package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/rules"
)

// discoverOutput is what `featureplug discover -o yaml|json` prints.
type discoverOutput struct {
	Inventory *discovery.Inventory  `json:"inventory"`
	Features  *nfdv1alpha1.Features `json:"features"`
}

func newDiscoverCommand() *cobra.Command {
	var src sourceFlags
	var output, rulesName string
	var nodeLabels map[string]string
	cmd := &cobra.Command{
		Use:   "discover",
		Short: "Discover the node's GPUs and print them with their NFD features",
		Long: `Discover reads the node's GPUs through NVML (or a fake node) and prints the
Inventory (GPUs, MIG devices, links; GPUs bound to vfio-pci for virtual
machines, read from sysfs) and the NFD features derived from it, exactly as
the agent publishes them. A node whose GPUs are all bound to vfio-pci needs
no NVIDIA driver.`,
		Example: `  featureplug discover --fake-node dgx-a100
  featureplug discover -o yaml
  featureplug discover --fake-node dgx-h100 -o labels --rules per-model
  featureplug discover -o labels --rules nvidia-config.yaml --node-labels nvidia.com/device-plugin.config=sliced
  featureplug discover --driver-root /run/nvidia/driver -o json
  featureplug discover --fake-node l40s-vfio
  featureplug discover --sysfs-root /host`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "yaml", "json", "labels"); err != nil {
				return err
			}
			if output != "labels" && (rulesName != "" || nodeLabels != nil) {
				return usageErrorf("--rules and --node-labels choose the per-resource labels of -o labels; they do not change -o %s", output)
			}
			rs := rules.Default()
			if rulesName != "" {
				var err error
				if rs, err = loadRules(rulesName); err != nil {
					return err
				}
			}
			inv, err := discoverInventory(cmd.Context(), src)
			if err != nil {
				return err
			}
			if output == "labels" {
				return printLabels(cmd.OutOrStdout(), inv, rs, nodeLabels)
			}
			return printDiscovery(cmd.OutOrStdout(), output, inv)
		},
	}
	src.addFlags(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, yaml, json or labels (the node labels the agent publishes)")
	addRulesFlag(cmd, &rulesName, "rules whose plan the per-resource labels of -o labels follow: "+rulesFlagUsage("none"))
	cmd.Flags().StringToStringVar(&nodeLabels, "node-labels", nil, "labels of the node, for rules with a nodeSelector, as run --node-labels and the Node's labels give them (k=v,..., repeatable)")
	return cmd
}

// checkOutput validates an --output value.
func checkOutput(value string, allowed ...string) error {
	if slices.Contains(allowed, value) {
		return nil
	}
	return usageErrorf("--output: %q is not a known format (use %s)", value, strings.Join(allowed, ", "))
}

// printLabels prints the labels the agent would publish for inv with the
// given rules and node labels, as sorted key=value lines.
func printLabels(w io.Writer, inv *discovery.Inventory, rs *rules.RuleSet, nodeLabels map[string]string) error {
	plan, err := rs.Plan(inv, nodeLabels)
	if err != nil {
		return &exitError{code: exitFailed, err: fmt.Errorf("the rules do not apply to this node:\n%w", err)}
	}
	return labeler.WriteLabels(w, labeler.Labels(inv, plan, labeler.LabelOptions{}))
}

func printDiscovery(w io.Writer, format string, inv *discovery.Inventory) error {
	out := discoverOutput{Inventory: inv, Features: discovery.Features(inv)}
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	case "yaml":
		data, err := yaml.Marshal(out)
		if err != nil {
			return fmt.Errorf("encoding YAML: %w", err)
		}
		_, err = w.Write(data)
		return err
	default:
		return printInventoryTable(w, inv, out.Features)
	}
}

func printInventoryTable(w io.Writer, inv *discovery.Inventory, f *nfdv1alpha1.Features) error {
	var b bytes.Buffer
	if inv.DriverVersion == "" {
		// A node whose GPUs are all bound to vfio-pci: NVML was not read.
		fmt.Fprintf(&b, "No NVIDIA driver (NVML not read): %d GPUs%s\n", len(inv.GPUs), vfioSummary(inv))
	} else {
		fmt.Fprintf(&b, "Driver %s, CUDA %s, NVML %s: %d GPUs, %d MIG devices%s\n\n",
			inv.DriverVersion, inv.CUDADriverVersion, inv.NVMLVersion, len(inv.GPUs), inv.MIGDeviceCount(), vfioSummary(inv))
	}
	var rows bytes.Buffer
	rows.WriteString("GPU\tPRODUCT\tMEMORY\tARCH\tCC\tNUMA\tPCI\tMIG\tUUID\n")
	for _, g := range inv.GPUs {
		mig := "not capable"
		switch {
		case g.MIGEnabled:
			mig = fmt.Sprintf("enabled, %d devices", len(g.MIGDevices))
		case g.MIGCapable:
			mig = "disabled"
		}
		fmt.Fprintf(&rows, "%d\t%s\t%d MiB\t%s\t%d.%d\t%s\t%s\t%s\t%s\n", g.Index, g.Product, g.MemoryMiB,
			g.Architecture, g.ComputeMajor, g.ComputeMinor, numaString(g.NUMANode), g.PCIBusID, mig, g.UUID)
		for _, m := range g.MIGDevices {
			fmt.Fprintf(&rows, "  %d:%d\t%s (GI %d, CI %d)\t%d MiB\t%d SMs\t\t\t\t\t%s\n", g.Index, m.Index,
				m.Profile, m.GPUInstanceID, m.ComputeInstanceID, m.MemoryMiB, m.Multiprocessors, m.UUID)
		}
	}
	if len(inv.GPUs) > 0 {
		b.WriteString(aligned(rows.String()))
	}
	if len(inv.Links) > 1 {
		b.WriteString("\nLinks:\n")
		rows.Reset()
		for i := range inv.Links {
			fmt.Fprintf(&rows, "\tGPU%d", i)
		}
		rows.WriteByte('\n')
		for i, row := range inv.Links {
			fmt.Fprintf(&rows, "GPU%d", i)
			for j, l := range row {
				cell := l.String()
				if i == j {
					cell = "X"
				}
				rows.WriteString("\t" + cell)
			}
			rows.WriteByte('\n')
		}
		b.WriteString(aligned(rows.String()))
	}
	writeVFIOTable(&b, inv) // discover_vfio.go
	b.WriteString("\nFeatures:\n")
	writeFeatures(&b, f)
	_, err := w.Write(b.Bytes())
	return err
}

// aligned returns tab-separated rows as aligned columns.
func aligned(rows string) string {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	// Writing to a bytes.Buffer cannot fail.
	_, _ = tw.Write([]byte(rows))
	_ = tw.Flush()
	return b.String()
}

func writeFeatures(b *bytes.Buffer, f *nfdv1alpha1.Features) {
	for _, name := range slices.Sorted(maps.Keys(f.Flags)) {
		fmt.Fprintf(b, "  %s: %s\n", name, strings.Join(slices.Sorted(maps.Keys(f.Flags[name].Elements)), ", "))
	}
	for _, name := range slices.Sorted(maps.Keys(f.Attributes)) {
		attrs := f.Attributes[name].Elements
		parts := make([]string, 0, len(attrs))
		for _, k := range slices.Sorted(maps.Keys(attrs)) {
			parts = append(parts, k+"="+attrs[k])
		}
		fmt.Fprintf(b, "  %s: %s\n", name, strings.Join(parts, " "))
	}
	for _, name := range slices.Sorted(maps.Keys(f.Instances)) {
		fmt.Fprintf(b, "  %s: %d instances\n", name, len(f.Instances[name].Elements))
	}
}

func numaString(n int) string {
	if n == discovery.NoNUMANode {
		return "-"
	}
	return fmt.Sprint(n)
}
