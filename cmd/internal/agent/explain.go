package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/featureplug/featureplug/labeler"
	"github.com/featureplug/featureplug/plugin/mps"
	"github.com/featureplug/featureplug/rules/plan"
)

// Annotations the agent puts on its NodeFeature (labeler/served.go says
// what they hold).
const (
	AnnotationRulesDigest = labeler.AnnotationRulesDigest
	AnnotationResources   = labeler.AnnotationResources
	// AnnotationMPSControl says whether the agent can start MPS control
	// daemons: MPSControlFound, or why not ("nvidia-cuda-mps-control not
	// found in PATH"), whatever the rules share, so that rules check and
	// rules explain --node tell before MPS rules reach the node.
	AnnotationMPSControl = "featureplug.io/mps-control"
	// MPSControlFound is AnnotationMPSControl's value when the control
	// program is there.
	MPSControlFound = "found"
)

// ReasonResourcesChanged is the reason of the Normal Event the agent
// records on its Node when the set of resources it serves, their device
// counts or their sharing change.
const ReasonResourcesChanged = "ResourcesChanged"

// RulesDigest is the digest of a rules file's content as the agent records
// it: "sha256:" and the first 16 hex digits of the content's SHA-256.
func RulesDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// digestedRuleSet is a rule set read from a file, with its content's digest.
type digestedRuleSet struct {
	RuleSet
	digest string
}

// withDigest attaches the digest of data to rs (nil stays nil).
func withDigest(rs RuleSet, data []byte) RuleSet {
	if rs == nil {
		return nil
	}
	return digestedRuleSet{RuleSet: rs, digest: RulesDigest(data)}
}

// rulesDigestOf returns the digest of a rule set: its content's digest
// when it came from a file, its source ("builtin:mixed") otherwise.
func rulesDigestOf(rs RuleSet) string {
	switch r := rs.(type) {
	case nil:
		return ""
	case digestedRuleSet:
		return r.digest
	default:
		return rs.Source()
	}
}

// explainState is what the agent remembers of the plan it serves for the
// NodeFeature's annotations and the ResourcesChanged Events (loop
// goroutine only).
type explainState struct {
	// servedDigest is the digest of the rules that made a.plan.
	servedDigest string
	// reported is the plan the last ResourcesChanged Event described.
	reported *plan.Plan
}

// planAnnotations returns the NodeFeature annotations for a plan the sinks
// are given: the last good plan carries the digest of its rules, a new
// plan the digest of the current rules. It is called from applySinks, on
// the loop goroutine.
func (a *Agent) planAnnotations(p *plan.Plan) map[string]string {
	if p == nil {
		return nil
	}
	digest := a.explain.servedDigest
	if p != a.plan {
		digest = rulesDigestOf(a.ruleSet)
	}
	mpsControl := MPSControlFound
	if _, err := mps.ResolveControlBinary(a.cfg.MPS.ControlBinary); err != nil {
		mpsControl = err.Error()
	}
	return map[string]string{AnnotationRulesDigest: digest, AnnotationResources: labeler.NewServed(p, a.cfg.DefaultServe).String(),
		AnnotationMPSControl: mpsControl}
}

// planServed records that p (made by a.ruleSet) now serves, and records a
// Normal Event on the Node when its resources differ from the plan served
// before (the first plan counts as a change from nothing).
func (a *Agent) planServed(ctx context.Context, p *plan.Plan) {
	a.explain.servedDigest = rulesDigestOf(a.ruleSet)
	changes := ResourceChanges(a.explain.reported, p)
	a.explain.reported = p
	if len(changes) == 0 {
		return
	}
	msg := strings.Join(changes, "; ")
	a.log.Info("served resources changed", "changes", msg, "rulesDigest", a.explain.servedDigest)
	if a.events != nil {
		a.events.normal(ctx, ReasonResourcesChanged, msg)
	}
}

// ResourceChanges describes, one line per resource, how the resources of
// after differ from those of before (nil: none): "example.com/a100-80gb:
// 0 -> 4 devices, rule a100-by-model", with ", sharing A -> B" when the
// sharing changed. Resources are in name order.
func ResourceChanges(before, after *plan.Plan) []string {
	type state struct {
		devices int
		sharing string
		rules   []string
	}
	read := func(p *plan.Plan) map[string]state {
		out := map[string]state{}
		if p == nil {
			return out
		}
		for _, r := range p.Resources {
			var rules []string
			for _, d := range r.Devices {
				if !slices.Contains(rules, d.Rule) {
					rules = append(rules, d.Rule)
				}
			}
			out[r.Name] = state{devices: len(r.Devices), sharing: r.Sharing.String(), rules: rules}
		}
		return out
	}
	b, af := read(before), read(after)
	names := make([]string, 0, len(b)+len(af))
	for n := range b {
		names = append(names, n)
	}
	for n := range af {
		if _, ok := b[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var out []string
	for _, n := range names {
		o, had := b[n]
		w, has := af[n]
		if had && has && o.devices == w.devices && o.sharing == w.sharing {
			continue
		}
		line := fmt.Sprintf("%s: %d -> %d devices", n, o.devices, w.devices)
		if had && has && o.sharing != w.sharing {
			line += ", sharing " + o.sharing + " -> " + w.sharing
		}
		rules := w.rules
		if !has {
			rules = o.rules
		}
		if len(rules) == 1 {
			line += ", rule " + rules[0]
		} else if len(rules) > 1 {
			line += ", rules " + strings.Join(rules, ", ")
		}
		out = append(out, line)
	}
	return out
}
