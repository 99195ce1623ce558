package rules

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/featureplug/featureplug/discovery"
)

// A rules file's health section says what health events do to the devices
// of the nodes it selects: a list of entries, each with a name, an optional
// nodeSelector, and overrides of the default policy (NVIDIA's XID catalog;
// see discovery.Decide). The first entry whose nodeSelector selects a node
// is that node's policy, carried on its plan (plan.Plan.Health); a node no
// entry selects keeps the defaults. The agent's flags (--health-recovery,
// --ignored-xids) are defaults under the entry's settings.
//
//	health:
//	- name: inference
//	  nodeSelector: {matchLabels: {pool: inference}}
//	  xids: {94: count, 109: until-reboot}     # per XID
//	  resolutions: {RESTART_APP: until-quiet}  # per catalog resolution
//	  unknownXID: until-quiet                  # XIDs the catalog does not list
//	  events: {ecc-volatile-double-bit: none}  # per non-XID kind; none: this evidence does not count
//	  quietPeriod: 10m                         # of until-quiet; 0s: no recovery
//	  quietPeriods: {nvlink-errors: 1h}        # per kind
//	  fenceOnNVMLFailure: true                 # devices unhealthy while NVML fails

// healthSpec is one entry of the health section as written.
type healthSpec struct {
	// Name identifies the entry in plans, explanations and errors.
	Name string `json:"name"`
	// NodeSelector selects the nodes the entry is the policy of; absent:
	// every node.
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// XIDs sets the effect of single XIDs (keys are XID numbers).
	XIDs map[string]string `json:"xids,omitempty"`
	// Resolutions sets the effect of the XIDs of a catalog resolution.
	Resolutions map[string]string `json:"resolutions,omitempty"`
	// UnknownXID is the effect of XIDs the catalog does not list.
	UnknownXID string `json:"unknownXID,omitempty"`
	// Events sets the effect of the non-XID kinds of health event.
	Events map[string]string `json:"events,omitempty"`
	// QuietPeriod is the quiet period of until-quiet, a duration ("10m").
	QuietPeriod string `json:"quietPeriod,omitempty"`
	// QuietPeriods sets the quiet period per event kind.
	QuietPeriods map[string]string `json:"quietPeriods,omitempty"`
	// FenceOnNVMLFailure says whether the devices of GPUs NVML cannot
	// reach are unhealthy while it fails.
	FenceOnNVMLFailure *bool `json:"fenceOnNVMLFailure,omitempty"`
}

// healthEntry is one compiled entry of the health section.
type healthEntry struct {
	index    int
	name     string
	selector labels.Selector // nil: every node
	policy   discovery.HealthPolicy
}

// noResetEvidence are the kinds whose events never carry NVML's evidence of
// a pending reset: until-reset holds them for the quiet period instead.
var noResetEvidence = []discovery.HealthEventKind{discovery.EventGPULost, discovery.EventNVLinkDown}

// compileHealth validates the health section and turns it into entries.
func (c *checker) compileHealth(specs []healthSpec) []*healthEntry {
	var out []*healthEntry
	names := map[string]int{}
	everyNode := -1
	for i := range specs {
		s := &specs[i]
		e := &healthEntry{index: i, name: s.Name}
		fail := func(field path, value, msg string) { c.healthError(false, i, s.Name, field, value, msg) }
		warn := func(field path, value, msg string) { c.healthError(true, i, s.Name, field, value, msg) }
		switch first, dup := names[s.Name]; {
		case s.Name == "":
			fail(path{"name"}, "", "required: health entries are named in plans and explanations")
		case dup:
			fail(path{"name"}, strconv.Quote(s.Name), fmt.Sprintf("name already used by health[%d]", first))
		default:
			names[s.Name] = i
		}
		if everyNode >= 0 {
			warn(nil, "", fmt.Sprintf("health[%d] %q before it selects every node, so this entry never applies (the first entry that selects a node is its policy)",
				everyNode, specs[everyNode].Name))
		}
		selectsAll := s.NodeSelector == nil
		if s.NodeSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(s.NodeSelector)
			if err != nil {
				fail(path{"nodeSelector"}, "", err.Error())
			} else {
				e.selector, selectsAll = sel, sel.Empty()
			}
		}
		if selectsAll && everyNode < 0 {
			everyNode = i
		}

		e.policy = c.compileHealthPolicy(i, s)
		out = append(out, e)
	}
	return out
}

// compileHealthPolicy validates the policy fields of health entry i, s,
// and returns the policy they give.
func (c *checker) compileHealthPolicy(i int, s *healthSpec) discovery.HealthPolicy {
	fail := func(field path, value, msg string) { c.healthError(false, i, s.Name, field, value, msg) }
	warn := func(field path, value, msg string) { c.healthError(true, i, s.Name, field, value, msg) }
	var policy discovery.HealthPolicy
	p := &policy
	for _, key := range sortedKeys(s.XIDs) {
		field := path{"xids", key}
		xid, err := strconv.ParseUint(key, 10, 64)
		if err != nil || xid == 0 {
			fail(field, strconv.Quote(key), "an XID is a number from 1")
			continue
		}
		effect, ok := c.healthEffect(i, s.Name, field, s.XIDs[key])
		if !ok {
			continue
		}
		if _, known := discovery.LookupXID(xid); !known {
			warn(field, "", fmt.Sprintf("XID %d is not in NVIDIA's XID catalog (XIDs 1-%d); the override applies if a driver reports it", xid, len(discovery.XIDCatalog())))
		}
		p.XIDs = setKey(p.XIDs, xid, effect)
	}
	for _, key := range sortedKeys(s.Resolutions) {
		field := path{"resolutions", key}
		r := discovery.XIDResolution(key)
		if r == discovery.ResolutionNone || !discovery.KnownResolution(r) {
			fail(field, strconv.Quote(key), "not a resolution of NVIDIA's XID catalog (have "+resolutionList()+"); XIDs without one follow unknownXID")
			continue
		}
		if effect, ok := c.healthEffect(i, s.Name, field, s.Resolutions[key]); ok {
			p.Resolutions = setKey(p.Resolutions, r, effect)
		}
	}
	if s.UnknownXID != "" {
		if effect, ok := c.healthEffect(i, s.Name, path{"unknownXID"}, s.UnknownXID); ok {
			p.UnknownXID = effect
		}
	}
	for _, key := range sortedKeys(s.Events) {
		field := path{"events", key}
		kind, ok := c.healthKind(i, s.Name, field, key, false)
		if !ok {
			continue
		}
		effect, ok := c.healthEffect(i, s.Name, field, s.Events[key])
		if !ok {
			continue
		}
		if effect == discovery.EffectUntilReset && slices.Contains(noResetEvidence, kind) {
			warn(field, strconv.Quote(string(effect)), fmt.Sprintf("%s events carry no NVML evidence of a pending reset, so until-reset holds them for the quiet period", kind))
		}
		p.Events = setKey(p.Events, kind, effect)
	}
	if s.QuietPeriod != "" {
		if d, ok := c.healthDuration(i, s.Name, path{"quietPeriod"}, s.QuietPeriod); ok {
			p.QuietPeriod = &d
		}
	}
	for _, key := range sortedKeys(s.QuietPeriods) {
		field := path{"quietPeriods", key}
		kind, ok := c.healthKind(i, s.Name, field, key, true)
		if !ok {
			continue
		}
		if d, ok := c.healthDuration(i, s.Name, field, s.QuietPeriods[key]); ok {
			p.QuietPeriods = setKey(p.QuietPeriods, kind, d)
		}
	}
	if s.FenceOnNVMLFailure != nil {
		fence := *s.FenceOnNVMLFailure
		p.FenceOnNVMLFailure = &fence
	}
	return policy
}

// healthError records a problem (or, with warning, a warning) on a field
// of health entry i.
func (c *checker) healthError(warning bool, i int, name string, field path, value, msg string) {
	c.add(warning, &Error{Line: c.doc.line(path{"health", i}.with(field...)), Section: "health", Rule: i, RuleName: name,
		Field: field.String(), Value: value, Msg: msg})
}

// healthEffect parses an effect.
func (c *checker) healthEffect(i int, name string, field path, s string) (discovery.HealthEffect, bool) {
	e := discovery.HealthEffect(s)
	if !e.Valid() {
		c.healthError(false, i, name, field, strconv.Quote(s), "not an effect (have "+effectList()+")")
		return "", false
	}
	return e, true
}

// healthKind parses a kind of health event: a non-XID kind for events, any
// kind for quiet periods; never reset-cleared, which is recovery evidence.
func (c *checker) healthKind(i int, name string, field path, s string, xidToo bool) (discovery.HealthEventKind, bool) {
	k := discovery.HealthEventKind(s)
	var allowed []string
	for _, kind := range discovery.HealthEventKinds() {
		if kind == discovery.EventResetCleared || (kind == discovery.EventXID && !xidToo) {
			continue
		}
		allowed = append(allowed, string(kind))
	}
	if !slices.Contains(allowed, s) {
		msg := "not a kind of health event (have " + strings.Join(allowed, ", ") + ")"
		switch k {
		case discovery.EventXID:
			msg = "XIDs are set in xids, resolutions and unknownXID"
		case discovery.EventResetCleared:
			msg = "reset-cleared is the evidence that ends until-reset holds; it has no effect of its own"
		}
		c.healthError(false, i, name, field, strconv.Quote(s), msg)
		return "", false
	}
	return k, true
}

// healthDuration parses a quiet period: a duration of 0 or more.
func (c *checker) healthDuration(i int, name string, field path, s string) (discovery.Period, bool) {
	d, err := time.ParseDuration(s)
	switch {
	case err != nil && strings.Trim(s, "0123456789") == "":
		c.healthError(false, i, name, field, strconv.Quote(s), fmt.Sprintf("a duration needs a unit, e.g. \"%ss\" or \"%sm\"", s, s))
		return 0, false
	case err != nil:
		c.healthError(false, i, name, field, strconv.Quote(s), `not a duration (e.g. "90s", "10m", "1h30m"; "0s": no recovery)`)
		return 0, false
	case d < 0:
		c.healthError(false, i, name, field, strconv.Quote(s), "must be 0 or more (0s: no recovery)")
		return 0, false
	}
	return discovery.Period(d), true
}

func effectList() string {
	effects := discovery.HealthEffects()
	out := make([]string, len(effects))
	for i, e := range effects {
		out[i] = string(e)
	}
	return strings.Join(out, ", ")
}

func resolutionList() string {
	var out []string
	for _, r := range discovery.XIDResolutions() {
		if r != discovery.ResolutionNone {
			out = append(out, string(r))
		}
	}
	return strings.Join(out, ", ")
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

func setKey[K comparable, V any](m map[K]V, k K, v V) map[K]V {
	if m == nil {
		m = map[K]V{}
	}
	m[k] = v
	return m
}

// healthFor returns the policy of the first health entry that selects the
// node, and names it; nil and "" when none does.
func (rs *RuleSet) healthFor(node labels.Set) (*discovery.HealthPolicy, string) {
	for _, e := range rs.health {
		if e.selector != nil && !e.selector.Matches(node) {
			continue
		}
		p := discovery.HealthPolicy{}.With(&e.policy)
		return &p, fmt.Sprintf("health[%d] %q", e.index, e.name)
	}
	return nil, ""
}

// HealthSummary says which health entries the file has, for `rules check`:
// "health: inference (nodeSelector pool=inference), default (every node)";
// "" when it has none.
func (rs *RuleSet) HealthSummary() string {
	if len(rs.health) == 0 {
		return ""
	}
	parts := make([]string, len(rs.health))
	for i, e := range rs.health {
		on := "every node"
		if e.selector != nil && !e.selector.Empty() {
			on = "nodeSelector " + e.selector.String()
		}
		parts[i] = fmt.Sprintf("%s (%s)", e.name, on)
	}
	return "health: " + strings.Join(parts, ", ")
}
