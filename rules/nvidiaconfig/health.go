package nvidiaconfig

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/featureplug/featureplug/discovery"
)

// The environment variables of NVIDIA's device plugin that say which XIDs
// mark a GPU unhealthy (its internal/rm/health.go). Convert maps them to a
// health section (Options.Env).
const (
	// EnvDisableHealthChecks lists XIDs to ignore, or "all" / "xids" for
	// every one: then NVIDIA's plugin runs no health check at all,
	// whatever EnvEnableHealthChecks says.
	EnvDisableHealthChecks = "DP_DISABLE_HEALTHCHECKS"
	// EnvEnableHealthChecks lists XIDs that mark the GPU unhealthy even if
	// ignored otherwise (its own list or EnvDisableHealthChecks'), or
	// "all" / "xids" for every XID.
	EnvEnableHealthChecks = "DP_ENABLE_HEALTHCHECKS"
)

// nvidiaIgnoredXIDs are the XIDs NVIDIA's device plugin always ignores,
// unless EnvEnableHealthChecks names them.
var nvidiaIgnoredXIDs = []uint64{13, 31, 43, 45, 68, 109}

// healthEntryName names the health entry Convert writes.
const healthEntryName = "nvidia-healthchecks"

// xidList is one of the variables as NVIDIA's plugin reads it: lowercased,
// split at commas, trimmed; "all" or "xids" anywhere means every XID
// (NVIDIA then drops the numbers), other values that are not numbers are
// ignored.
type xidList struct {
	raw  string
	all  bool
	xids []uint64
	bad  []string
}

func parseXIDList(raw string) xidList {
	l := xidList{raw: raw}
	for _, part := range strings.Split(strings.ToLower(raw), ",") {
		part = strings.TrimSpace(part)
		switch part {
		case "":
		case "all", "xids":
			return xidList{raw: raw, all: true}
		default:
			xid, err := strconv.ParseUint(part, 10, 64)
			if err != nil {
				l.bad = append(l.bad, strconv.Quote(part))
				continue
			}
			if !slices.Contains(l.xids, xid) {
				l.xids = append(l.xids, xid)
			}
		}
	}
	slices.Sort(l.xids)
	return l
}

func (l xidList) empty() bool { return !l.all && len(l.xids) == 0 }

// healthChecks converts the two variables into a health entry, with the
// warnings that say what differs from NVIDIA's plugin. It writes nothing
// when neither says anything.
func (w *writer) healthChecks(env map[string]string) (warnings []string, err error) {
	for _, name := range slices.Sorted(maps.Keys(env)) {
		if name != EnvDisableHealthChecks && name != EnvEnableHealthChecks {
			return nil, &Error{File: "--env", Field: name, Msg: fmt.Sprintf("not a variable rules import maps (it maps %s and %s)", EnvDisableHealthChecks, EnvEnableHealthChecks)}
		}
	}
	disable, enable := parseXIDList(env[EnvDisableHealthChecks]), parseXIDList(env[EnvEnableHealthChecks])
	for _, l := range []struct {
		name string
		xidList
	}{{EnvDisableHealthChecks, disable}, {EnvEnableHealthChecks, enable}} {
		for _, b := range l.bad {
			warnings = append(warnings, fmt.Sprintf("%s=%s: %s is not an XID; NVIDIA's plugin ignores it, and so does the import", l.name, l.raw, b))
		}
	}
	if len(env) == 0 {
		return warnings, nil
	}

	xids := map[uint64]discovery.HealthEffect{}
	var resolutions map[discovery.XIDResolution]discovery.HealthEffect
	var unknown discovery.HealthEffect
	var why []string
	set := func(name string, l xidList) string { return name + "=" + strconv.Quote(l.raw) }
	switch {
	case enable.all:
		// Every XID marks the GPU unhealthy, NVIDIA's ignored ones and
		// DP_DISABLE_HEALTHCHECKS' too: at least until the quiet period.
		resolutions = map[discovery.XIDResolution]discovery.HealthEffect{}
		for _, r := range discovery.XIDResolutions() {
			if e, _ := (discovery.HealthPolicy{}).ResolutionEffect(r); r != discovery.ResolutionNone && !e.Unhealthy() {
				resolutions[r] = discovery.EffectUntilQuiet
			}
		}
		unknown = discovery.EffectUntilQuiet
		why = append(why, set(EnvEnableHealthChecks, enable)+": every XID marks the GPU unhealthy: those the catalog resolves with no action or an application restart for the quiet period, the others as the catalog says")
		if !disable.empty() {
			warnings = append(warnings, fmt.Sprintf("%s: NVIDIA's plugin checks every XID with %s=%s, so %s is not imported", set(EnvDisableHealthChecks, disable), EnvEnableHealthChecks, enable.raw, EnvDisableHealthChecks))
		}
	case disable.all:
		// NVIDIA's plugin runs no health check at all, whatever
		// DP_ENABLE_HEALTHCHECKS lists (its code returns before reading
		// it, though its documentation says enabled XIDs still count).
		resolutions = map[discovery.XIDResolution]discovery.HealthEffect{}
		for _, r := range discovery.XIDResolutions() {
			if r != discovery.ResolutionNone {
				resolutions[r] = discovery.EffectNone
			}
		}
		unknown = discovery.EffectNone
		why = append(why, set(EnvDisableHealthChecks, disable)+": NVIDIA's plugin checks no XID, so no XID changes a device's health")
		if len(enable.xids) > 0 {
			warnings = append(warnings, fmt.Sprintf("%s: NVIDIA's plugin runs no health check at all with %s=%s, so these XIDs are not checked there and not imported; "+
				"to check them, add them to the xids of health entry %q", set(EnvEnableHealthChecks, enable), EnvDisableHealthChecks, disable.raw, healthEntryName))
		}
		warnings = append(warnings, fmt.Sprintf("%s: featureplug still acts on what is not an XID (ECC errors, NVML's evidence of retired pages, remapped rows, recovery actions, NVLinks); "+
			"give those kinds effect none in the events of health entry %q to ignore them too", set(EnvDisableHealthChecks, disable), healthEntryName))
	default:
		for _, x := range disable.xids {
			xids[x] = discovery.EffectNone
		}
		if len(disable.xids) > 0 {
			why = append(why, set(EnvDisableHealthChecks, disable)+": those XIDs change no device's health")
		}
		for _, x := range enable.xids {
			e, _ := (discovery.HealthPolicy{}).XIDEffect(x)
			if !e.Unhealthy() {
				e = discovery.EffectUntilQuiet
			}
			xids[x] = e
		}
		if len(enable.xids) > 0 {
			why = append(why, set(EnvEnableHealthChecks, enable)+": those XIDs mark the GPU unhealthy, at least for the quiet period (over "+EnvDisableHealthChecks+", as in NVIDIA's plugin)")
		}
	}
	if !enable.all && !disable.all {
		var differ []string
		for _, x := range nvidiaIgnoredXIDs {
			if _, set := xids[x]; set {
				continue
			}
			e, _ := (discovery.HealthPolicy{}).XIDEffect(x)
			differ = append(differ, fmt.Sprintf("%d: %s", x, e))
		}
		if len(differ) > 0 {
			warnings = append(warnings, fmt.Sprintf("NVIDIA's plugin always ignores XIDs %s; featureplug follows NVIDIA's XID catalog instead (%s); "+
				"to keep NVIDIA's behaviour, set them to none in the xids of health entry %q", joinXIDs(nvidiaIgnoredXIDs), strings.Join(differ, ", "), healthEntryName))
		}
	}

	if len(xids) == 0 && len(resolutions) == 0 && unknown == "" {
		return warnings, nil
	}
	w.healthEntry(why, xids, resolutions, unknown)
	return warnings, nil
}

// healthEntry writes the health entry of the import: the reasons as
// comments, then the XIDs, resolutions and unknownXID it sets.
func (w *writer) healthEntry(why []string, xids map[uint64]discovery.HealthEffect, resolutions map[discovery.XIDResolution]discovery.HealthEffect, unknown discovery.HealthEffect) {
	w.blank()
	w.comment("NVIDIA's device plugin's environment, as its internal/rm/health.go reads it:")
	for _, s := range why {
		w.comment("  " + s)
	}
	w.line(0, "health:")
	w.line(0, "- name: "+healthEntryName)
	if len(xids) > 0 {
		keys := slices.Sorted(maps.Keys(xids))
		parts := make([]string, len(keys))
		for i, x := range keys {
			parts[i] = fmt.Sprintf("%d: %s", x, xids[x])
		}
		w.line(1, "xids: {"+strings.Join(parts, ", ")+"}")
	}
	if len(resolutions) > 0 {
		w.line(1, "resolutions:")
		for _, r := range discovery.XIDResolutions() {
			if e, ok := resolutions[r]; ok {
				w.line(2, string(r)+": "+string(e))
			}
		}
	}
	if unknown != "" {
		w.line(1, "unknownXID: "+string(unknown))
	}
}

func joinXIDs(xids []uint64) string {
	parts := make([]string, len(xids))
	for i, x := range xids {
		parts[i] = strconv.FormatUint(x, 10)
	}
	return strings.Join(parts, ", ")
}
