package labeler

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/validate/content"
)

// MaxLabelValueLength is the longest valid label value.
const MaxLabelValueLength = 63

// SanitizeValue turns s into a valid label value the way
// gpu-feature-discovery sanitizes product names: characters other than
// letters, digits, '-', '_', '.' and spaces are dropped, runs of spaces
// become one '-'. The result is then cut to MaxLabelValueLength and trimmed
// so that it starts and ends with a letter or digit. "NVIDIA A100-SXM4-40GB"
// gives "NVIDIA-A100-SXM4-40GB"; "" stays "".
func SanitizeValue(s string) string {
	v := sanitizeWords(s)
	if len(v) > MaxLabelValueLength {
		v = v[:MaxLabelValueLength]
	}
	return strings.TrimFunc(v, func(r rune) bool { return !isAlnum(r) })
}

// sanitizeWords keeps [A-Za-z0-9-_.] and joins the space-separated words
// with '-'.
func sanitizeWords(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		switch {
		case isAlnum(r) || r == '-' || r == '_' || r == '.':
			if space && b.Len() > 0 {
				b.WriteByte('-')
			}
			space = false
			b.WriteRune(r)
		case r == ' ' || r == '\t':
			space = true
		}
	}
	return b.String()
}

func isAlnum(r rune) bool {
	return (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
}

// validLabelKey returns why key is not a valid label key, or "".
func validLabelKey(key string) string {
	return strings.Join(content.IsLabelKey(key), "; ")
}
