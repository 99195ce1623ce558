package discovery

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
)

// HealthEffect is what a health event does to the device it names.
type HealthEffect string

// The effects, from the mildest. Only the until-* effects make a device
// unhealthy; each says what ends it.
const (
	// EffectNone: nothing; the device's health does not change.
	EffectNone HealthEffect = "none"
	// EffectCount: the device stays healthy; the event is counted (metric,
	// log line), so that a rising rate is visible.
	EffectCount HealthEffect = "count"
	// EffectUntilQuiet: unhealthy until a quiet period passes without a new
	// event of the device (HealthDecision.QuietPeriod; 0: no recovery).
	EffectUntilQuiet HealthEffect = "until-quiet"
	// EffectUntilReset: unhealthy until NVML shows that the GPU no longer
	// needs a reset: an EventResetCleared for the GPU, sent when its
	// recovery action is back to none and no retired page or row
	// remapping is pending. Time does not end it.
	EffectUntilReset HealthEffect = "until-reset"
	// EffectUntilReboot: unhealthy until the node booted again (a new
	// /proc/sys/kernel/random/boot_id, see ReadBootID).
	EffectUntilReboot HealthEffect = "until-reboot"
)

// healthEffects are the effects, mildest first: StrongerEffect ranks by it.
var healthEffects = [...]HealthEffect{EffectNone, EffectCount, EffectUntilQuiet, EffectUntilReset, EffectUntilReboot}

// HealthEffects returns every effect, mildest first.
func HealthEffects() []HealthEffect { return slices.Clone(healthEffects[:]) }

// Valid reports whether e is one of the effects.
func (e HealthEffect) Valid() bool { return slices.Contains(healthEffects[:], e) }

// Unhealthy reports whether e makes the device unhealthy.
func (e HealthEffect) Unhealthy() bool { return e.rank() >= 2 }

func (e HealthEffect) rank() int { return slices.Index(healthEffects[:], e) }

// StrongerEffect returns the stronger of two effects: the one that holds a
// device longer (until-reboot > until-reset > until-quiet > count > none).
func StrongerEffect(a, b HealthEffect) HealthEffect {
	if b.rank() > a.rank() {
		return b
	}
	return a
}

// DefaultQuietPeriod is the quiet period of until-quiet when neither the
// rules nor the agent's --health-recovery say otherwise.
const DefaultQuietPeriod = 5 * time.Minute

// resolutionEffect is what featureplug does, by default, with the XIDs of
// one catalog resolution, and why.
type resolutionEffect struct {
	resolution XIDResolution
	// effect is the default; "" for ResolutionNone, which takes the
	// policy's unknown-XID effect.
	effect HealthEffect
	why    string
}

// xidResolutionEffects maps every catalog resolution to its default effect,
// mildest first. This table, with the catalog, is the default XID policy.
var xidResolutionEffects = [...]resolutionEffect{
	{ResolutionIgnore, EffectNone, "the catalog asks for no action"},
	{ResolutionRestartApp, EffectCount, "the application that hit it must restart; the GPU serves on"},
	{ResolutionWorkflowXID45, EffectCount, "the clean-up after another error, which has its own effect"},
	{ResolutionXID154, EffectCount, "the recovery action it announces comes as its own event (recovery-action)"},
	{ResolutionWorkflowNVLink5, EffectCount, "the driver sets the GPU's recovery action when one is needed (recovery-action)"},
	{ResolutionContactSupport, EffectUntilQuiet, "no remedy featureplug can see: held for the quiet period"},
	{ResolutionCheckMechanicals, EffectUntilQuiet, "no remedy featureplug can see: held for the quiet period"},
	{ResolutionUpdateSWFW, EffectUntilQuiet, "no remedy featureplug can see: held for the quiet period"},
	{ResolutionCheckUVM, EffectUntilQuiet, "no remedy featureplug can see: held for the quiet period"},
	{ResolutionResetGPU, EffectUntilReset, "the catalog asks for a GPU reset"},
	{ResolutionWorkflowXID48, EffectUntilReset, "the catalog: a GPU reset or node reboot clears it"},
	{ResolutionWorkflowNVLink, EffectUntilReset, "the catalog: a GPU reset or node reboot clears it"},
	{ResolutionRestartBM, EffectUntilReboot, "the catalog asks for a node restart"},
	{ResolutionRestartVM, EffectUntilReboot, "the catalog asks for a restart of the VM (a new boot)"},
	{ResolutionNone, "", "the catalog gives no resolution: as an unknown XID"},
}

// DefaultUnknownXIDEffect is what an XID does that the catalog does not
// list (or gives no resolution), unless the policy says otherwise: held for
// the quiet period, as every XID was before the catalog.
const DefaultUnknownXIDEffect = EffectUntilQuiet

// kindEffect is the default effect of one kind of health event, and why.
type kindEffect struct {
	kind HealthEventKind
	// effect is the default; "" where the event decides (an XID by the
	// catalog, a recovery action by its action).
	effect HealthEffect
	why    string
}

// eventKindEffects are the default effects of the health event kinds; its
// rows are HealthEventKinds, in order, so that a new kind is a constant in
// health.go and a row here.
var eventKindEffects = [...]kindEffect{
	{EventXID, "", "by the XID catalog"},
	{EventECCDoubleBit, EffectUntilReset, "an uncorrectable ECC error (XID 48's resolution): a GPU reset clears it"},
	{EventGPULost, EffectUntilQuiet, "reported again while NVML answers ERROR_GPU_IS_LOST: healthy a quiet period after it answers"},
	{EventRetiredPagesPending, EffectUntilReset, "retired pages wait for a GPU reset"},
	{EventRowRemapPending, EffectUntilReset, "a row remapping waits for a GPU reset"},
	{EventRowRemapFailure, EffectUntilQuiet, "reported again while NVML reports it: the GPU needs service"},
	{EventECCVolatileDoubleBit, EffectUntilQuiet, "reported again while the count since the driver loaded lasts"},
	{EventRecoveryAction, "", "by the action: a reboot until-reboot, any other until-reset"},
	{EventNVLinkDown, EffectUntilQuiet, "reported again while the link is down"},
	{EventNVLinkErrors, EffectUntilQuiet, "after each new link recovery failure"},
	{EventPageRetirementFailure, EffectUntilReset, "a page could not be retired (XID 64's resolution)"},
	{EventResetCleared, EffectNone, "ends the GPU's until-reset holds"},
}

// Period is a duration written and printed as Go writes durations ("5m0s"),
// for quiet periods in policies.
type Period time.Duration

// MarshalText formats the period as time.Duration.String does.
func (p Period) MarshalText() ([]byte, error) { return []byte(time.Duration(p).String()), nil }

// UnmarshalText parses a duration such as "90s" or "1h30m".
func (p *Period) UnmarshalText(b []byte) error {
	d, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*p = Period(d)
	return nil
}

// String formats the period as time.Duration.String does.
func (p Period) String() string { return time.Duration(p).String() }

// HealthPolicy says what health events do to devices: the catalog's
// defaults and the overrides of a rules file's health section or of the
// agent's flags. The zero value is the default policy. A policy is a plain
// value; With combines two.
type HealthPolicy struct {
	// XIDs sets the effect of single XIDs; it wins over Resolutions.
	XIDs map[uint64]HealthEffect `json:"xids,omitempty"`
	// Resolutions sets the effect of every XID of a catalog resolution.
	Resolutions map[XIDResolution]HealthEffect `json:"resolutions,omitempty"`
	// UnknownXID is the effect of XIDs the catalog does not list or gives
	// no resolution; empty: DefaultUnknownXIDEffect.
	UnknownXID HealthEffect `json:"unknownXID,omitempty"`
	// Events sets the effect of the non-XID kinds. Which NVML evidence
	// counts is said here: evidence given EffectNone does not.
	Events map[HealthEventKind]HealthEffect `json:"events,omitempty"`
	// QuietPeriod is the quiet period of until-quiet; nil: DefaultQuietPeriod.
	// 0 means no recovery.
	QuietPeriod *Period `json:"quietPeriod,omitempty"`
	// QuietPeriods sets the quiet period per event kind.
	QuietPeriods map[HealthEventKind]Period `json:"quietPeriods,omitempty"`
	// FenceOnNVMLFailure says whether every device of a GPU NVML cannot
	// reach is unhealthy while NVML fails (not advertising a node whose
	// GPUs nobody can check); nil: true.
	FenceOnNVMLFailure *bool `json:"fenceOnNVMLFailure,omitempty"`
}

// With returns p overridden by what over sets: its map entries replace
// p's, its set fields replace p's. A nil over returns p.
func (p HealthPolicy) With(over *HealthPolicy) HealthPolicy {
	out := p
	out.XIDs = maps.Clone(p.XIDs)
	out.Resolutions = maps.Clone(p.Resolutions)
	out.Events = maps.Clone(p.Events)
	out.QuietPeriods = maps.Clone(p.QuietPeriods)
	if over == nil {
		return out
	}
	out.XIDs = merge(out.XIDs, over.XIDs)
	out.Resolutions = merge(out.Resolutions, over.Resolutions)
	out.Events = merge(out.Events, over.Events)
	out.QuietPeriods = merge(out.QuietPeriods, over.QuietPeriods)
	if over.UnknownXID != "" {
		out.UnknownXID = over.UnknownXID
	}
	if over.QuietPeriod != nil {
		q := *over.QuietPeriod
		out.QuietPeriod = &q
	}
	if over.FenceOnNVMLFailure != nil {
		f := *over.FenceOnNVMLFailure
		out.FenceOnNVMLFailure = &f
	}
	return out
}

func merge[K comparable, V any](into, from map[K]V) map[K]V {
	if len(from) == 0 {
		return into
	}
	if into == nil {
		into = make(map[K]V, len(from))
	}
	maps.Copy(into, from)
	return into
}

// IsZero reports whether p overrides nothing.
func (p HealthPolicy) IsZero() bool {
	return len(p.XIDs) == 0 && len(p.Resolutions) == 0 && p.UnknownXID == "" && len(p.Events) == 0 &&
		p.QuietPeriod == nil && len(p.QuietPeriods) == 0 && p.FenceOnNVMLFailure == nil
}

// Fences reports whether the devices of GPUs NVML cannot reach are
// unhealthy while it fails (FenceOnNVMLFailure, default true).
func (p HealthPolicy) Fences() bool { return p.FenceOnNVMLFailure == nil || *p.FenceOnNVMLFailure }

// QuietPeriodFor returns the quiet period of until-quiet for events of a
// kind: QuietPeriods[kind], else QuietPeriod, else DefaultQuietPeriod.
func (p HealthPolicy) QuietPeriodFor(kind HealthEventKind) time.Duration {
	if q, ok := p.QuietPeriods[kind]; ok {
		return time.Duration(q)
	}
	if p.QuietPeriod != nil {
		return time.Duration(*p.QuietPeriod)
	}
	return DefaultQuietPeriod
}

// XIDEffect returns the effect of an XID under p, and where it comes from
// ("policy xids", "policy resolutions", "policy unknownXID", "catalog",
// "unknown XID").
func (p HealthPolicy) XIDEffect(xid uint64) (HealthEffect, string) {
	if e, ok := p.XIDs[xid]; ok {
		return e, "policy xids"
	}
	entry, known := LookupXID(xid)
	if known && entry.Resolution != ResolutionNone {
		return p.ResolutionEffect(entry.Resolution)
	}
	if p.UnknownXID != "" {
		return p.UnknownXID, "policy unknownXID"
	}
	if known {
		return DefaultUnknownXIDEffect, "catalog gives no resolution"
	}
	return DefaultUnknownXIDEffect, "not in the catalog"
}

// ResolutionEffect returns the effect of a catalog resolution's XIDs under
// p, and where it comes from ("policy resolutions" or "catalog").
func (p HealthPolicy) ResolutionEffect(r XIDResolution) (HealthEffect, string) {
	if e, ok := p.Resolutions[r]; ok {
		return e, "policy resolutions"
	}
	for _, re := range xidResolutionEffects {
		if re.resolution != r {
			continue
		}
		if re.effect == "" {
			break
		}
		return re.effect, "catalog"
	}
	if p.UnknownXID != "" {
		return p.UnknownXID, "policy unknownXID"
	}
	return DefaultUnknownXIDEffect, "catalog gives no resolution"
}

// EventEffect returns the default effect of a non-XID kind under p, and
// where it comes from ("policy events" or "default"); "" for the kinds
// whose events decide (EventXID, EventRecoveryAction) unless p sets one.
func (p HealthPolicy) EventEffect(kind HealthEventKind) (HealthEffect, string) {
	if e, ok := p.Events[kind]; ok {
		return e, "policy events"
	}
	for _, ke := range eventKindEffects {
		if ke.kind == kind {
			return ke.effect, "default"
		}
	}
	return DefaultUnknownXIDEffect, "unknown kind"
}

// HealthDecision is what one event does to the device it names.
type HealthDecision struct {
	// Effect is what happens to the device.
	Effect HealthEffect `json:"effect"`
	// QuietPeriod is, for EffectUntilQuiet, how long the device stays
	// unhealthy after this event without a newer one; 0: no recovery.
	QuietPeriod time.Duration `json:"quietPeriod,omitempty"`
	// EndsReset is set for an event that ends the until-reset holds of its
	// GPU and of the GPU's MIG devices (EventResetCleared).
	EndsReset bool `json:"endsReset,omitempty"`
	// Because says in one line why: the event and where its effect comes
	// from, e.g. "XID 109 ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR: catalog RESET_GPU".
	Because string `json:"because"`
}

// Decide says what an event does to the device it names under a policy. It
// is a pure function of its arguments: the tracker of device health calls
// it for every event and keeps the holds it returns.
//
// An until-reset effect needs NVML's evidence of the pending reset
// (ev.ResetPending): where NVML shows none (a driver without GPU recovery
// actions, or a GPU whose driver asks for none), featureplug could not see
// the reset, so the event holds the device for the quiet period instead.
func Decide(ev HealthEvent, p HealthPolicy) HealthDecision {
	var d HealthDecision
	var source string
	what := describeEvent(ev)
	switch ev.Kind {
	case EventXID:
		d.Effect, source = p.XIDEffect(ev.XID)
		if entry, ok := LookupXID(ev.XID); ok && source != "policy xids" && entry.Resolution != ResolutionNone {
			source += " " + string(entry.Resolution)
		}
	case EventRecoveryAction:
		if e, ok := p.Events[ev.Kind]; ok {
			d.Effect, source = e, "policy events"
		} else {
			d.Effect, source = ev.RecoveryAction.Effect(), "recovery action"
		}
	default:
		d.Effect, source = p.EventEffect(ev.Kind)
	}
	d.Because = what + ": " + source
	if !d.Effect.Valid() {
		// A policy that was not validated: the safe side.
		d.Because += fmt.Sprintf(" (unknown effect %q: %s)", d.Effect, DefaultUnknownXIDEffect)
		d.Effect = DefaultUnknownXIDEffect
	}
	if d.Effect == EffectUntilReset && !ev.ResetPending {
		d.Effect = EffectUntilQuiet
		d.Because += "; NVML shows no reset pending on the GPU, so its reset could not be seen: held for the quiet period"
	}
	if d.Effect == EffectUntilQuiet {
		d.QuietPeriod = p.QuietPeriodFor(ev.Kind)
	}
	d.EndsReset = ev.Kind == EventResetCleared
	return d
}

// describeEvent names an event in a decision's Because.
func describeEvent(ev HealthEvent) string {
	switch ev.Kind {
	case EventXID:
		s := "XID " + strconv.FormatUint(ev.XID, 10)
		if e, ok := LookupXID(ev.XID); ok {
			s += " " + e.Mnemonic
		}
		return s
	case EventRecoveryAction:
		return string(ev.Kind) + " " + string(ev.RecoveryAction)
	}
	return string(ev.Kind)
}

// HealthHold is what keeps a device unhealthy after one decision: the
// effect and what ends it. Trackers keep (and persist) holds, and drop a
// hold when Ended says so or, for until-reset, at an event whose decision
// EndsReset.
type HealthHold struct {
	// Effect is EffectUntilQuiet, EffectUntilReset or EffectUntilReboot.
	Effect HealthEffect `json:"effect"`
	// Until is when an until-quiet hold ends; zero: never (no recovery).
	Until time.Time `json:"until,omitempty"`
	// BootID is the boot an until-reboot hold was taken in.
	BootID string `json:"bootID,omitempty"`
}

// Hold returns the hold a decision taken at a time, in the boot bootID
// (ReadBootID), puts on its device; ok is false for effects that do not
// make the device unhealthy.
func (d HealthDecision) Hold(at time.Time, bootID string) (h HealthHold, ok bool) {
	switch d.Effect {
	case EffectUntilQuiet:
		h = HealthHold{Effect: d.Effect}
		if d.QuietPeriod > 0 {
			h.Until = at.Add(d.QuietPeriod)
		}
		return h, true
	case EffectUntilReset:
		return HealthHold{Effect: d.Effect}, true
	case EffectUntilReboot:
		return HealthHold{Effect: d.Effect, BootID: bootID}, true
	}
	return HealthHold{}, false
}

// Ended reports whether the hold no longer keeps its device unhealthy at
// now, in the boot bootID: an until-quiet hold past Until, an until-reboot
// hold taken in another boot (an unknown boot, "", never ends it). An
// until-reset hold does not end with time or boots alone: an EndsReset
// decision ends it (a reboot resets the GPU, and NVML then shows no
// pending reset, which the watcher reports at its start).
func (h HealthHold) Ended(now time.Time, bootID string) bool {
	switch h.Effect {
	case EffectUntilQuiet:
		return !h.Until.IsZero() && !now.Before(h.Until)
	case EffectUntilReboot:
		return bootID != "" && h.BootID != "" && bootID != h.BootID
	case EffectUntilReset:
		return false
	}
	return true
}

// ResolutionDefault returns the default effect of a catalog resolution's
// XIDs and why ("" for ResolutionNone: the unknown-XID effect applies).
func ResolutionDefault(r XIDResolution) (HealthEffect, string) {
	for _, re := range xidResolutionEffects {
		if re.resolution == r {
			return re.effect, re.why
		}
	}
	return DefaultUnknownXIDEffect, "not a resolution of the catalog"
}

// EventDefault returns the default effect of a kind of health event and
// why ("" for the kinds whose events decide: XIDs, recovery actions).
func EventDefault(kind HealthEventKind) (HealthEffect, string) {
	for _, ke := range eventKindEffects {
		if ke.kind == kind {
			return ke.effect, ke.why
		}
	}
	return DefaultUnknownXIDEffect, "not a kind of health event"
}
