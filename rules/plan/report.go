package plan

import (
	"fmt"
	"strings"
)

// Held returns the resources p holds back (Resource.Held), with why.
func (p *Plan) Held() map[string]string {
	out := map[string]string{}
	if p == nil {
		return out
	}
	for _, r := range p.Resources {
		if r.Held != "" {
			out[r.Name] = r.Held
		}
	}
	return out
}

// Capacity returns the device IDs each resource of p advertises: its
// devices times its sharing replicas.
func (p *Plan) Capacity() map[string]int {
	out := make(map[string]int, len(p.Resources))
	for _, r := range p.Resources {
		out[r.Name] = len(r.Devices) * max(r.Sharing.Replicas, 1)
	}
	return out
}

// ProblemsKey identifies a set of problems, so that a reporter says each
// set once.
func ProblemsKey(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.Device + "\x00" + p.Message + "\x00")
	}
	return b.String()
}

// ProblemsSummary lists the first n problems, one per device, and how many
// more there are.
func ProblemsSummary(ps []Problem, n int) string {
	parts := make([]string, 0, min(len(ps), n)+1)
	for i, p := range ps {
		if i == n {
			parts = append(parts, fmt.Sprintf("and %d more", len(ps)-i))
			break
		}
		parts = append(parts, p.String())
	}
	return strings.Join(parts, "; ")
}
