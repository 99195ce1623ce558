package rules

import (
	"fmt"
	"io"
	"math/bits"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/featureplug/featureplug/discovery/migplace"
	"github.com/featureplug/featureplug/rules/plan"
)

// explainDynamicDecision writes the decision of a device of a GPU
// partitioned on demand.
func explainDynamicDecision(b *strings.Builder, d plan.Decision) {
	if d.Kind == plan.DeviceGPU {
		fmt.Fprintf(b, "  resource  partitioned on demand (dynamic MIG, below)\n  rule      %s\n", d.Rule)
		return
	}
	res := d.Resource
	if res == "" {
		res = "none: its profile is not offered"
	}
	fmt.Fprintf(b, "  resource  %s (a MIG device of a GPU partitioned on demand)\n  rule      %s\n", res, d.Rule)
}

// dynamicDevices says, for the resources table, which GPUs offer a
// dynamic resource: "dynamic: GPU 0,1".
func dynamicDevices(p *plan.Plan, resource string) string {
	var gpus []string
	for _, g := range p.DynamicMIG {
		offers := g.WholeGPU == resource
		for _, prof := range g.Profiles {
			offers = offers || prof.Resource == resource
		}
		if offers {
			gpus = append(gpus, strconv.Itoa(g.Index))
		}
	}
	return "dynamic: GPU " + strings.Join(gpus, ",")
}

// writeDynamicMIG writes, per GPU partitioned on demand, its MIG mode, the
// counters it is published with, the whole GPU's resource, every offered
// profile with its resource and placements, and the MIG devices it holds.
func writeDynamicMIG(w io.Writer, p *plan.Plan) error {
	if len(p.DynamicMIG) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("\nDynamic MIG: the scheduler picks a profile's placement per claim, Prepare creates that MIG device (served through DRA only)\n")
	shown := map[string]int{} // the offer's text -> the first GPU showing it
	for i := range p.DynamicMIG {
		g := &p.DynamicMIG[i]
		fmt.Fprintf(&b, "\nGPU %d %s  %s  (rule %s)\n", g.Index, g.Product, g.UUID, g.Rule)
		profiles := make([]migplace.Profile, len(g.Profiles))
		for k := range g.Profiles {
			profiles[k] = g.Profiles[k].Profile
		}
		scarce := migplace.ScarceEngines(profiles, g.Capacity)
		fmt.Fprintf(&b, "  MIG mode   %s\n", migModeText(g))
		fmt.Fprintf(&b, "  counters   %s\n", countersText(g.Capacity, scarce))
		switch {
		case g.WholeGPU != "":
			fmt.Fprintf(&b, "  whole GPU  %s (takes every counter: excludes every MIG claim on the GPU)\n", g.WholeGPU)
		case g.WholeGPUWithheld != "":
			fmt.Fprintf(&b, "  whole GPU  not offered: %s\n", g.WholeGPUWithheld)
		default:
			b.WriteString("  whole GPU  not offered (mig.wholeGPU)\n")
		}
		if len(g.Existing) == 0 {
			b.WriteString("  existing   no MIG devices\n")
		} else {
			parts := make([]string, len(g.Existing))
			for k, m := range g.Existing {
				parts[k] = m.Profile + " " + m.Placement.String() + " " + m.UUID
			}
			fmt.Fprintf(&b, "  existing   %s\n", strings.Join(parts, "; "))
			b.WriteString("             (offered only if featureplug created them all, for claims; a MIG device it did not create keeps the GPU unoffered)\n")
		}
		var offer strings.Builder
		tw := tabwriter.NewWriter(&offer, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  PROFILE\tRESOURCE\tPLACEMENTS\tTAKES")
		for _, prof := range g.Profiles {
			takes := plural(prof.MemorySliceCount(), "memory slice") + ", " + plural(prof.ComputeSlices, "compute slice")
			for _, k := range scarce {
				if n := prof.Engines.Count(k); n > 0 {
					takes += fmt.Sprintf(", %d %s", n, engineName(k))
				}
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", prof.Name, prof.Resource, prof.StartsString(), takes)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		key := g.Product + "\x00" + offer.String()
		if first, ok := shown[key]; ok {
			fmt.Fprintf(&b, "  profiles   as GPU %d\n", first)
			continue
		}
		shown[key] = g.Index
		b.WriteString(offer.String())
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// migModeText says what Prepare does about the GPU's MIG mode.
func migModeText(g *plan.DynamicGPU) string {
	switch {
	case g.MIGEnabled && g.ModeChangeNeedsReset:
		return "enabled (a mode change on this GPU needs a reset; featureplug leaves it enabled)"
	case g.MIGEnabled:
		return "enabled"
	default:
		return "disabled; Prepare enables it for the first MIG device (no reset needed on this GPU)"
	}
}

// countersText lists the counters a GPU is published with: its memory
// and compute slices and the engines that limit its layouts ("8 memory
// slices, 7 compute slices, 1 OFA").
func countersText(c migplace.Counters, scarce []migplace.EngineKind) string {
	parts := []string{
		plural(bits.OnesCount32(c.MemorySlices), "memory slice"),
		plural(c.ComputeSlices, "compute slice"),
	}
	for _, k := range scarce {
		if n := c.Engines.Count(k); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, engineName(k)))
		}
	}
	return strings.Join(parts, ", ")
}

// engineName names an engine kind for people.
func engineName(k migplace.EngineKind) string {
	switch k {
	case migplace.EngineCopy:
		return "copy engines"
	case migplace.EngineDecoder:
		return "decoders"
	case migplace.EngineEncoder:
		return "encoders"
	case migplace.EngineJPEG:
		return "JPEG"
	}
	return "OFA"
}

// plural formats a count with its noun: "1 memory slice", "4 memory slices".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
