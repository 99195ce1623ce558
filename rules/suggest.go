package rules

import "strings"

// suggestName returns the name among known that a mistyped name most
// likely meant, or "": one that differs only in case and punctuation
// ("computeMajor" for "compute.major"), that the name extends or is
// extended by ("productName" for "product"), or that is within two edits
// of it.
func suggestName(name string, known []string) string {
	norm := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '.' || r == '_' || r == '-' {
				return -1
			}
			return r
		}, strings.ToLower(s))
	}
	n := norm(name)
	if n == "" {
		return ""
	}
	for _, k := range known {
		if norm(k) == n {
			return k
		}
	}
	best := ""
	for _, k := range known {
		nk := norm(k)
		if len(nk) >= 4 && (strings.HasPrefix(n, nk) || strings.HasSuffix(n, nk) || strings.HasPrefix(nk, n) && len(n) >= 4) &&
			len(k) > len(best) {
			best = k
		}
	}
	if best != "" {
		return best
	}
	bestDist := 3
	for _, k := range known {
		if d := editDistance(n, norm(k)); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// didYouMean formats a suggestion for a message: `; did you mean "x"?`,
// or "" without one.
func didYouMean(name string, known []string) string {
	if s := suggestName(name, known); s != "" {
		return `; did you mean "` + s + `"?`
	}
	return ""
}
