package rules

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/featureplug/featureplug/rules/plan"
)

// WriteExplanation writes a plan for people: for every device, the resource
// it became, the rule that claimed it, its sharing and why each earlier rule
// did not claim it; then the devices left out because of their rule (see
// Plan.Problems), and the resources. Rules skipped only because they
// claim the other kind of device are counted rather than listed.
func WriteExplanation(w io.Writer, p *plan.Plan) error {
	var b strings.Builder
	for _, d := range p.Decisions {
		fmt.Fprintf(&b, "%s  %s\n", d.Description, d.Device)
		switch {
		case d.Problem != "":
			fmt.Fprintf(&b, "  resource  none: left out because of its rule\n  rule      %s\n  problem   %s\n", d.Rule, d.Problem)
		case d.Resource != "":
			sharing := "none"
			if d.Sharing != nil {
				sharing = d.Sharing.String()
			}
			fmt.Fprintf(&b, "  resource  %s\n  rule      %s\n  sharing   %s\n", d.Resource, d.Rule, sharing)
		case d.Kind == plan.DeviceGPU && allMIGEnabled(d.Skipped):
			b.WriteString("  resource  none: MIG is enabled, so only its MIG devices can be claimed\n")
		default:
			b.WriteString("  resource  none: no rule matched\n")
		}
		otherKind := 0
		first := true
		for _, m := range d.Skipped {
			switch m.Reason {
			case missWantsGPU, missWantsMIG, missMIGEnabled:
				otherKind++
				continue
			}
			label := "            "
			if first {
				label = "  skipped   "
				first = false
			}
			fmt.Fprintf(&b, "%s%s: %s\n", label, m.Rule, m.Reason)
		}
		migGPU := d.Resource == "" && d.Kind == plan.DeviceGPU && allMIGEnabled(d.Skipped)
		if otherKind > 0 && !migGPU {
			kind := plan.DeviceMIG
			if d.Kind == plan.DeviceMIG {
				kind = plan.DeviceGPU
			}
			noun := "rules"
			if otherKind == 1 {
				noun = "rule"
			}
			fmt.Fprintf(&b, "  (%d %s for devices: %s skipped)\n", otherKind, noun, kind)
		}
		b.WriteByte('\n')
	}
	if n := len(p.Problems); n > 0 {
		noun := "devices"
		if n == 1 {
			noun = "device"
		}
		fmt.Fprintf(&b, "%d %s left out because of their rules (problem above); the rest is served\n\n", n, noun)
	}
	if len(p.Resources) == 0 {
		b.WriteString("no resources: no device is advertised\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tDEVICES\tSHARING")
	for _, r := range p.Resources {
		idx := make([]string, len(r.Devices))
		for i, d := range r.Devices {
			idx[i] = d.Index
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, strings.Join(idx, ","), r.Sharing.String())
	}
	return tw.Flush()
}

// allMIGEnabled reports whether every miss of a GPU is because its MIG mode
// is enabled or because the rule claims MIG devices.
func allMIGEnabled(misses []plan.RuleMiss) bool {
	found := false
	for _, m := range misses {
		switch m.Reason {
		case missMIGEnabled:
			found = true
		case missWantsMIG:
		default:
			return false
		}
	}
	return found
}
