package labeler

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/featureplug/featureplug/rules/plan"
)

// Annotations of the agent's NodeFeature, so that `featureplug rules diff`
// (and an admin with kubectl) can tell which rules a node runs and what it
// serves.
const (
	// AnnotationRulesDigest is the digest of the rules the served plan
	// came from (plan.Plan.RulesDigest).
	AnnotationRulesDigest = "featureplug.io/rules-digest"
	// AnnotationResources lists the resources the plan serves with their
	// device counts, sorted by name: "example.com/a100=4,nvidia.com/gpu=2"
	// ("" when it serves none).
	AnnotationResources = "featureplug.io/resources"
)

// Annotations returns the NodeFeature annotations of a plan (none before
// any plan): the digest of the rules it came from and its resources.
func Annotations(p *plan.Plan) map[string]string {
	if p == nil {
		return nil
	}
	return map[string]string{AnnotationRulesDigest: p.RulesDigest, AnnotationResources: FormatResources(p)}
}

// FormatResources writes the resources of a plan with their device counts
// as AnnotationResources holds them.
func FormatResources(p *plan.Plan) string {
	if p == nil {
		return ""
	}
	parts := make([]string, 0, len(p.Resources))
	for _, r := range p.Resources {
		parts = append(parts, r.Name+"="+strconv.Itoa(len(r.Devices)))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// ParseResources reads an AnnotationResources value back: device counts by
// resource name.
func ParseResources(s string) (map[string]int, error) {
	out := map[string]int{}
	if s == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		name, count, ok := strings.Cut(part, "=")
		n, err := strconv.Atoi(count)
		if !ok || name == "" || err != nil || n < 0 {
			return nil, fmt.Errorf("annotation %s: %q is not resource=count", AnnotationResources, part)
		}
		out[name] = n
	}
	return out, nil
}
