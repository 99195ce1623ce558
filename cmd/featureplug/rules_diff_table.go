package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/rules/plan"
)

// Limits that keep the table to a screen on large clusters; -o json lists
// everything.
const (
	diffTableNodes   = 4 // node names per list
	diffTableDevices = 4 // devices per group
)

// writeDiff prints a diff report for people.
func writeDiff(w io.Writer, rep *diffReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Proposed:  %s (%s)\n", rep.Rules, rep.RulesDigest)
	if rep.Baseline == "rules" {
		fmt.Fprintf(&b, "Baseline:  %s (%s)\n", rep.Current, rep.CurrentDigest)
	} else {
		fmt.Fprintf(&b, "Baseline:  what each node serves (its NodeFeature's %s)\n", labeler.AnnotationResources)
	}
	if cm := rep.ConfigMap; cm != nil && rep.Baseline != "rules" {
		if cm.Error != "" {
			fmt.Fprintf(&b, "ConfigMap: %s: %s\n", cm.Name, cm.Error)
		} else {
			fmt.Fprintf(&b, "ConfigMap: %s %s (%s)\n", cm.Name, cm.Key, cm.Digest)
		}
	}
	fmt.Fprintf(&b, "Policy:    %s\n", rep.Policy.String())
	for _, warning := range rep.Warnings {
		fmt.Fprintf(&b, "warning:   %s\n", warning)
	}

	compared := rep.Nodes - len(rep.WithoutAgent) - rep.incompleteNodes()
	fmt.Fprintf(&b, "\n%s: %d compared in %s", plural(rep.Nodes, "node"), compared, plural(len(rep.Groups), "outcome"))
	if n := len(rep.WithoutAgent); n > 0 {
		fmt.Fprintf(&b, ", %d without an agent", n)
	}
	if n := rep.incompleteNodes(); n > 0 {
		fmt.Fprintf(&b, ", %d incomplete", n)
	}
	fmt.Fprintf(&b, "; %d blocked\n", rep.BlockedNodes)

	for i := range rep.Groups {
		writeDiffGroup(&b, rep, &rep.Groups[i])
	}
	if len(rep.DeviceClasses) > 0 {
		b.WriteString("\nDeviceClasses of the resources served through DRA:\n")
		for _, c := range rep.DeviceClasses {
			switch c.Op {
			case opClassAdded:
				fmt.Fprintf(&b, "  + %s (%s): new with the proposed rules\n", c.Class, c.Resource)
			case opClassRemoved:
				fmt.Fprintf(&b, "  - %s (%s): the proposed rules make none\n", c.Class, c.Resource)
			default:
				fmt.Fprintf(&b, "  ~ %s (%s): selects other devices (-o json has both selectors)\n", c.Class, c.Resource)
			}
		}
		b.WriteString("  apply the proposed ones with: featureplug dra classes --rules " + rep.Rules + " | kubectl apply -f -\n")
	}
	if n := len(rep.WithoutAgent); n > 0 {
		fmt.Fprintf(&b, "\nWithout an agent (%s): %s\n", plural(n, "node"), nodeList(rep.WithoutAgent))
	}
	for _, in := range rep.Incomplete {
		fmt.Fprintf(&b, "\nIncomplete (%s): %s\n  %s\n", plural(len(in.Nodes), "node"), nodeList(in.Nodes), in.Reason)
	}
	fmt.Fprintf(&b, "\nResult: %s (exit %d)\n", rep.Status, rep.ExitCode)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeDiffGroup prints one group of nodes.
func writeDiffGroup(b *strings.Builder, rep *diffReport, g *diffGroup) {
	fmt.Fprintf(b, "\n%s (%s)\n", nodeList(g.Nodes), plural(len(g.Nodes), "node"))
	fmt.Fprintf(b, "  runs      %s\n", runsText(rep, g))
	if g.Error != "" {
		fmt.Fprintf(b, "  error     %s\n", strings.ReplaceAll(g.Error, "\n", "\n            "))
	}
	for _, c := range g.Changes {
		fmt.Fprintf(b, "  %s\n", c.String())
	}
	devices := 0
	for _, d := range g.Unclaimed {
		if devices++; devices > diffTableDevices {
			continue
		}
		fmt.Fprintf(b, "  no resource  %s%s: was %s\n", d.Description, deviceUUID(g, &d), d.Was)
	}
	if devices > diffTableDevices {
		fmt.Fprintf(b, "  no resource  and %d more (-o json lists every device)\n", devices-diffTableDevices)
	}
	for _, d := range g.Problems {
		fmt.Fprintf(b, "  problem   %s%s: %s\n", d.Description, deviceUUID(g, &d), d.Message)
	}
	for _, warning := range g.Warnings {
		fmt.Fprintf(b, "  warning   %s\n", warning)
	}
	switch {
	case g.Blocked:
		b.WriteString("  BLOCKED\n")
	case len(g.Changes) == 0 && len(g.Unclaimed) == 0:
		b.WriteString("  no change\n")
	}
}

// runsText says which rules a group's nodes run.
func runsText(rep *diffReport, g *diffGroup) string {
	switch g.Runs {
	case runsProposed:
		return "the proposed rules already"
	case runsCurrent:
		return "the rules of --current"
	case runsConfigMap:
		return "the ConfigMap's rules"
	case runsUnknown:
		return "unknown rules (the agent records no digest)"
	}
	switch {
	case rep.Baseline == "rules":
		return fmt.Sprintf("other rules (%s) than --current", g.Digest)
	case rep.ConfigMap != nil && rep.ConfigMap.Digest != "":
		return fmt.Sprintf("other rules (%s) than the ConfigMap (%s)", g.Digest, rep.ConfigMap.Digest)
	}
	return fmt.Sprintf("other rules (%s)", g.Digest)
}

// deviceUUID is " (UUID)" for a group of one node, where it is the one.
func deviceUUID(g *diffGroup, d *diffDevice) string {
	if len(g.Nodes) != 1 {
		return ""
	}
	return " (" + d.UUIDs[g.Nodes[0]] + ")"
}

// nodeList names nodes, the first few only: "a, b, c, d and 96 more".
func nodeList(nodes []string) string {
	if len(nodes) <= diffTableNodes+1 {
		return strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(nodes[:diffTableNodes], ", "), len(nodes)-diffTableNodes)
}

// String formats a change for the table: "+ name: 4 devices",
// "- name: 4 devices", "~ name: 4 -> 2 devices",
// "~ name: sharing none -> time-slicing x4 (8 devices)", "~ name: served
// through device-plugin -> dra (8 devices)", then whether it is a loss.
func (c diffChange) String() string {
	var s string
	switch c.Op {
	case opAdded:
		s = "+ " + c.Resource + ": " + c.To.describe()
	case opRemoved:
		s = "- " + c.Resource + ": " + c.From.describe()
	case opCountUp, opCountDown:
		s = fmt.Sprintf("~ %s: %d -> %s", c.Resource, c.From.Devices, plural(c.To.Devices, "device"))
	case opSharingChanged:
		s = fmt.Sprintf("~ %s: sharing %s -> %s (%s)", c.Resource, c.From.Sharing, c.To.Sharing, plural(c.To.Devices, "device"))
	case opServeChanged:
		s = fmt.Sprintf("~ %s: served through %s -> %s (%s)", c.Resource, c.From.Serve, c.To.Serve, plural(c.To.Devices, "device"))
	}
	switch {
	case c.Blocking:
		s += "  [loss: blocks]"
	case c.Allowed:
		s += "  [loss: allowed]"
	}
	if c.Reason != "" {
		s += " (" + c.Reason + ")"
	}
	return s
}

// describe says what a resource is: "4 devices, time-slicing x2, through
// dra" (device plugins, the usual API, go unsaid).
func (r *diffResource) describe() string {
	s := plural(r.Devices, "device")
	if r.Sharing != "" && r.Sharing != string(plan.SharingNone) {
		s += ", " + r.Sharing
	}
	if r.Serve == plan.ServeDRA {
		s += ", through " + string(r.Serve)
	}
	return s
}
