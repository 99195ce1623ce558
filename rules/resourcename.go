package rules

import "strings"

// sanitizeName turns any string into something usable as (part of) the name
// after the '/' of a resource name: lowercase, with every run of characters
// other than [a-z0-9.] replaced by a single '-', and without leading or
// trailing '-' or '.'. "NVIDIA A100-SXM4-40GB" becomes "nvidia-a100-sxm4-40gb".
func sanitizeName(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	dash := false
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.':
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
		default:
			dash = true
		}
	}
	return strings.Trim(b.String(), "-.")
}
