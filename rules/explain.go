package rules

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/featureplug/featureplug/rules/plan"
)

// DRAClass is what an explanation shows of the DRA DeviceClass of a
// resource: made by rules/draclass (which imports this package, so the
// caller passes it in).
type DRAClass struct {
	// Name is the DeviceClass name; empty when the resource has none.
	Name string `json:"name,omitempty"`
	// Selector is the class's CEL selector.
	Selector string `json:"selector,omitempty"`
	// Fallback says why the selector selects on the resource attribute
	// rather than the rules' expressions.
	Fallback string `json:"fallback,omitempty"`
	// NodeSelectors are the rules' node selectors, which a class cannot
	// express ("<rule>: <selector>").
	NodeSelectors []string `json:"nodeSelectors,omitempty"`
	// Missing says why the resource has no class.
	Missing string `json:"missing,omitempty"`
}

// ExplainOptions adds the DRA view to an explanation.
type ExplainOptions struct {
	// DRA holds the DeviceClass of each resource, by resource name. When
	// it is nil the explanation has no DRA view.
	DRA map[string]DRAClass
	// DefaultServe is the agent's --serve, the kubelet API of resources
	// whose rules do not say (default ServeDevicePlugin).
	DefaultServe plan.Serve
}

// serveText says which kubelet API serves a resource the rules gave, and
// whether the rule or the agent's --serve chose it.
func (o ExplainOptions) serveText(s plan.Serve) string {
	if s == "" {
		return string(o.defaultServe()) + " (the agent's --serve)"
	}
	return string(s) + " (the rule's serve)"
}

func (o ExplainOptions) defaultServe() plan.Serve {
	if o.DefaultServe == "" {
		return plan.ServeDevicePlugin
	}
	return o.DefaultServe
}

// WriteExplanation writes a plan for people: for every device, the resource
// it became, the rule that claimed it, its sharing and why each earlier rule
// did not claim it; then the devices left out because of their rule (see
// Plan.Problems), and the resources. Rules skipped only because they
// claim the other kind of device are counted rather than listed.
func WriteExplanation(w io.Writer, p *plan.Plan) error {
	return WriteExplanationWith(w, p, ExplainOptions{})
}

// WriteExplanationWith is WriteExplanation with the DRA view of opts: per
// claimed device the kubelet API that serves it (the rules' serve, or the
// agent's --serve) and its DeviceClass, a SERVE column in the resources,
// and per resource its DeviceClass and CEL selector.
func WriteExplanationWith(w io.Writer, p *plan.Plan, opts ExplainOptions) error {
	var b strings.Builder
	for _, d := range p.Decisions {
		writeDecision(&b, p, d, opts)
	}
	if n := len(p.Problems); n > 0 {
		noun := "devices"
		if n == 1 {
			noun = "device"
		}
		switch {
		case p.CheckTemplates() != nil:
			fmt.Fprintf(&b, "%d %s left out because of their rules (problem above): a resource template that fails on a device refuses the plan; run keeps its last good one\n\n", n, noun)
		case vfioProblems(p):
			fmt.Fprintf(&b, "%d %s left out (problem above); the rest is served\n\n", n, noun)
		default:
			fmt.Fprintf(&b, "%d %s left out because of their rules (problem above); the rest is served\n\n", n, noun)
		}
	}
	if len(p.Resources) == 0 && len(p.VFIO) == 0 {
		b.WriteString("no resources: no device is advertised\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	if len(p.Resources) == 0 {
		b.WriteString("no resources for containers\n")
		writeVFIOResources(&b, p) // vfio_explain.go
		_, err := io.WriteString(w, b.String())
		return err
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if opts.DRA == nil {
		fmt.Fprintln(tw, "RESOURCE\tDEVICES\tSHARING")
	} else {
		fmt.Fprintln(tw, "RESOURCE\tDEVICES\tSHARING\tSERVE")
	}
	for _, r := range p.Resources {
		idx := make([]string, len(r.Devices))
		for i, d := range r.Devices {
			idx[i] = d.Index
		}
		if r.Dynamic {
			idx = append(idx, dynamicDevices(p, r.Name)) // migdynamic_explain.go
		}
		if opts.DRA == nil {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, strings.Join(idx, ","), r.Sharing.String())
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, strings.Join(idx, ","), r.Sharing.String(), r.ServedBy(opts.defaultServe()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(p.VFIO) > 0 {
		var vb strings.Builder
		vb.WriteByte('\n')
		writeVFIOResources(&vb, p) // vfio_explain.go
		if _, err := io.WriteString(w, vb.String()); err != nil {
			return err
		}
	}
	if err := writeDynamicMIG(w, p); err != nil { // migdynamic_explain.go
		return err
	}
	if opts.DRA == nil {
		return nil
	}
	return writeDRAView(w, p, opts.DRA)
}

// writeDecision writes what the plan did with one device: its resource
// (or why none), the rules skipped and why.
func writeDecision(b *strings.Builder, p *plan.Plan, d plan.Decision, opts ExplainOptions) {
	fmt.Fprintf(b, "%s  %s\n", d.Description, d.Device)
	switch {
	case d.Problem != "" && d.Kind == plan.DeviceVFIO:
		fmt.Fprintf(b, "  resource  none: left out\n  rule      %s\n  problem   %s\n", d.Rule, d.Problem)
	case d.Dynamic:
		explainDynamicDecision(b, d) // migdynamic_explain.go
	case d.Problem != "":
		fmt.Fprintf(b, "  resource  none: left out because of its rule\n  rule      %s\n  problem   %s\n", d.Rule, d.Problem)
	case d.Resource != "":
		sharing := "none"
		if d.Sharing != nil {
			sharing = d.Sharing.String()
		}
		fmt.Fprintf(b, "  resource  %s\n  rule      %s\n  sharing   %s\n", d.Resource, d.Rule, sharing)
		writeVFIODecision(b, p, &d) // vfio_explain.go
		switch {
		case opts.DRA != nil && d.Kind == plan.DeviceVFIO && d.Serve != plan.ServeDRA:
			fmt.Fprintf(b, "  serve     %s, no DRA class (a VFIO device is served through DRA only when its rule says serve: dra)\n", plan.ServeDevicePlugin)
		case opts.DRA != nil:
			class := "none"
			if c := opts.DRA[d.Resource]; c.Name != "" {
				class = c.Name
			}
			fmt.Fprintf(b, "  serve     %s, DRA class %s\n", opts.serveText(d.Serve), class)
		}
	case d.Kind == plan.DeviceGPU && allMIGEnabled(d.Skipped):
		b.WriteString("  resource  none: MIG is enabled, so only its MIG devices can be claimed\n")
	default:
		b.WriteString("  resource  none: no rule matched\n")
	}
	otherKind := 0
	var kinds []plan.DeviceKind // of the rules skipped for their kind, in rule order
	first := true
	for _, m := range d.Skipped {
		if m.Reason == missMIGEnabled {
			otherKind++
			continue
		}
		if k, ok := missedKind(m.Reason); ok {
			otherKind++
			if !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
			continue
		}
		label := "            "
		if first {
			label = "  skipped   "
			first = false
		}
		fmt.Fprintf(b, "%s%s: %s\n", label, m.Rule, m.Reason)
	}
	migGPU := d.Resource == "" && d.Kind == plan.DeviceGPU && allMIGEnabled(d.Skipped)
	if otherKind > 0 && !migGPU {
		if len(kinds) == 0 {
			kinds = []plan.DeviceKind{plan.DeviceMIG}
		}
		names := make([]string, len(kinds))
		for i, k := range kinds {
			names[i] = string(k)
		}
		noun := "rules"
		if otherKind == 1 {
			noun = "rule"
		}
		fmt.Fprintf(b, "  (%d %s for devices: %s skipped)\n", otherKind, noun, strings.Join(names, ", "))
	}
	b.WriteByte('\n')
}

// writeDRAView writes, per resource of the plan, its DRA DeviceClass and
// selector, as `featureplug dra classes` prints them.
func writeDRAView(w io.Writer, p *plan.Plan, classes map[string]DRAClass) error {
	var b strings.Builder
	b.WriteString("\nDRA (featureplug dra classes): a pod asking for a resource through DRA gets a device its class selects\n")
	resources := slices.Clip(p.Resources)
	for _, r := range p.VFIO {
		if r.Serve == plan.ServeDRA { // a VFIO rule that says serve: dra
			resources = append(resources, r)
		}
	}
	for _, r := range resources {
		c := classes[r.Name]
		fmt.Fprintf(&b, "%s\n", r.Name)
		if c.Name == "" {
			missing := cmp.Or(c.Missing, "no DeviceClass")
			fmt.Fprintf(&b, "  class     none: %s\n", missing)
			continue
		}
		fmt.Fprintf(&b, "  class     %s\n  selector  %s\n", c.Name, c.Selector)
		if c.Fallback != "" {
			fmt.Fprintf(&b, "  fallback  %s\n", c.Fallback)
		}
		for _, ns := range c.NodeSelectors {
			fmt.Fprintf(&b, "  note      nodeSelector of %s: a DeviceClass cannot select nodes\n", ns)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// allMIGEnabled reports whether every miss of a GPU is because its MIG mode
// is enabled or because the rule claims MIG devices.
func allMIGEnabled(misses []plan.RuleMiss) bool {
	found := false
	for _, m := range misses {
		if m.Reason == missMIGEnabled {
			found = true
		} else if _, ok := missedKind(m.Reason); !ok {
			return false
		}
	}
	return found
}
