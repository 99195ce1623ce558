package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// RulesDigest is the digest of a rules file's content as the agent records
// it (Plan.RulesDigest): "sha256:" and the first 16 hex digits of the
// content's SHA-256.
func RulesDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// ResourceChanges describes, one line per resource, how the resources of
// after differ from those of before (nil: none): "example.com/a100-80gb:
// 0 -> 4 devices, rule a100-by-model", with ", sharing A -> B" when the
// sharing changed. Resources are in name order.
func ResourceChanges(before, after *Plan) []string {
	type state struct {
		devices int
		sharing string
		rules   []string
	}
	read := func(p *Plan) map[string]state {
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
