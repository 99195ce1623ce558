package rules

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// HealthView is a node's effective health policy as `rules explain` shows
// it: the rules file's entry for the node over the defaults (NVIDIA's XID
// catalog, DefaultQuietPeriod), effect by effect.
type HealthView struct {
	// Source names the health entry, or says that none selects the node.
	Source string `json:"source"`
	// QuietPeriod is the quiet period of until-quiet ("0s": no recovery).
	QuietPeriod string `json:"quietPeriod"`
	// FenceOnNVMLFailure says whether devices are unhealthy while NVML fails.
	FenceOnNVMLFailure bool `json:"fenceOnNVMLFailure"`
	// Resolutions are the effects of the catalog's resolutions.
	Resolutions []HealthViewResolution `json:"resolutions"`
	// UnknownXID is the effect of XIDs the catalog does not list.
	UnknownXID HealthViewEffect `json:"unknownXID"`
	// XIDs are the single XIDs the entry sets.
	XIDs []HealthViewXID `json:"xids,omitempty"`
	// Events are the effects of the other kinds of health event.
	Events []HealthViewEvent `json:"events"`
}

// HealthViewEffect is an effect and where it comes from: "catalog",
// "default", or the entry's field ("policy resolutions", ...).
type HealthViewEffect struct {
	Effect discovery.HealthEffect `json:"effect"`
	From   string                 `json:"from"`
}

// HealthViewResolution is the effect of one catalog resolution's XIDs.
type HealthViewResolution struct {
	Resolution discovery.XIDResolution `json:"resolution"`
	HealthViewEffect
	// XIDs are the catalog's XIDs with the resolution, as ranges: "8, 11, 25-32".
	XIDs string `json:"xids"`
}

// HealthViewXID is an XID the entry sets.
type HealthViewXID struct {
	XID      uint64                 `json:"xid"`
	Mnemonic string                 `json:"mnemonic,omitempty"`
	Effect   discovery.HealthEffect `json:"effect"`
	// Catalog is the effect the catalog alone gives it.
	Catalog discovery.HealthEffect `json:"catalog"`
}

// HealthViewEvent is the effect of one non-XID kind.
type HealthViewEvent struct {
	Kind discovery.HealthEventKind `json:"kind"`
	HealthViewEffect
	// QuietPeriod is its quiet period when its effect is until-quiet.
	QuietPeriod string `json:"quietPeriod,omitempty"`
}

// NewHealthView returns the effective health policy of a plan's node.
func NewHealthView(p *plan.Plan) HealthView {
	policy := discovery.HealthPolicy{}.With(p.Health)
	v := HealthView{
		Source:             p.HealthSource,
		QuietPeriod:        policy.QuietPeriodFor("").String(),
		FenceOnNVMLFailure: policy.Fences(),
	}
	if v.Source == "" {
		v.Source = "defaults: no health entry selects this node"
	}
	byResolution := map[discovery.XIDResolution][]uint64{}
	for _, e := range discovery.XIDCatalog() {
		byResolution[e.Resolution] = append(byResolution[e.Resolution], e.XID)
	}
	for _, r := range discovery.XIDResolutions() {
		effect, from := policy.ResolutionEffect(r)
		v.Resolutions = append(v.Resolutions, HealthViewResolution{Resolution: r, HealthViewEffect: HealthViewEffect{effect, from}, XIDs: discovery.FormatXIDs(byResolution[r])})
	}
	effect, from := policy.XIDEffect(0) // not in the catalog
	v.UnknownXID = HealthViewEffect{effect, from}
	if p.Health != nil {
		for _, xid := range slices.Sorted(maps.Keys(p.Health.XIDs)) {
			catalog, _ := discovery.HealthPolicy{}.XIDEffect(xid)
			x := HealthViewXID{XID: xid, Effect: p.Health.XIDs[xid], Catalog: catalog}
			if e, ok := discovery.LookupXID(xid); ok {
				x.Mnemonic = e.Mnemonic
			}
			v.XIDs = append(v.XIDs, x)
		}
	}
	for _, kind := range discovery.HealthEventKinds() {
		if kind == discovery.EventXID || kind == discovery.EventResetCleared {
			continue
		}
		effect, from := policy.EventEffect(kind)
		ev := HealthViewEvent{Kind: kind, HealthViewEffect: HealthViewEffect{effect, from}}
		if effect == "" {
			ev.From = "the action: a reboot until-reboot, any other until-reset"
		}
		if effect == discovery.EffectUntilQuiet {
			ev.QuietPeriod = policy.QuietPeriodFor(kind).String()
		}
		v.Events = append(v.Events, ev)
	}
	return v
}

// WriteHealthView writes a node's effective health policy for people, as
// `rules explain` prints it after the explanation.
func WriteHealthView(w io.Writer, p *plan.Plan) error {
	v := NewHealthView(p)
	var b strings.Builder
	fmt.Fprintf(&b, "\nHealth policy: %s\n", v.Source)
	b.WriteString("  (over NVIDIA's XID catalog; the agent's --health-recovery and --ignored-xids are defaults under the rules' settings)\n")
	quiet := v.QuietPeriod
	if quiet == "0s" {
		quiet += " (no recovery)"
	}
	fmt.Fprintf(&b, "  quiet period           %s\n  until-reset            until NVML shows the GPU was reset; the quiet period where NVML shows no reset pending\n"+
		"  fence on NVML failure  %v\n  unknown XIDs           %s (%s)\n\n", quiet, v.FenceOnNVMLFailure, v.UnknownXID.Effect, v.UnknownXID.From)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	table := func(header string, rows [][]string) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  "+header)
		for _, r := range rows {
			fmt.Fprintln(tw, "  "+strings.Join(r, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		_, err := io.WriteString(w, "\n")
		return err
	}
	var rows [][]string
	for _, r := range v.Resolutions {
		name := string(r.Resolution)
		if name == "" {
			name = "(none)"
		}
		rows = append(rows, []string{name, string(r.Effect), r.From, r.XIDs})
	}
	if err := table("RESOLUTION\tEFFECT\tFROM\tXIDS", rows); err != nil {
		return err
	}
	if len(v.XIDs) > 0 {
		rows = rows[:0]
		for _, x := range v.XIDs {
			rows = append(rows, []string{fmt.Sprint(x.XID), string(x.Effect), string(x.Catalog), x.Mnemonic})
		}
		if err := table("XID\tEFFECT\tCATALOG'S\tMNEMONIC", rows); err != nil {
			return err
		}
	}
	rows = rows[:0]
	for _, ev := range v.Events {
		effect, quiet := string(ev.Effect), ev.QuietPeriod
		if effect == "" {
			effect = "by action"
		}
		if quiet == "" {
			quiet = "-"
		}
		rows = append(rows, []string{string(ev.Kind), effect, quiet, ev.From})
	}
	return table("EVENT\tEFFECT\tQUIET PERIOD\tFROM", rows)
}
