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

// validLabelKey returns why key is not a valid label key, or "". It
// accepts exactly what content.IsLabelKey accepts (a fuzz test checks this)
// without regular expressions, which made up most of the cost of Labels.
func validLabelKey(key string) string {
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		prefix, name = "", key
	}
	if hasPrefix && !isDNSSubdomain(prefix) {
		return strings.Join(content.IsLabelKey(key), "; ")
	}
	if len(name) == 0 || len(name) > 63 || !isQualifiedNamePart(name) {
		return strings.Join(content.IsLabelKey(key), "; ")
	}
	return ""
}

// isQualifiedNamePart matches [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?.
func isQualifiedNamePart(s string) bool {
	if !isAlnum(rune(s[0])) || !isAlnum(rune(s[len(s)-1])) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := rune(s[i]); !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// isDNSSubdomain matches RFC 1123 subdomains as Kubernetes validates them:
// at most 253 characters, dot-separated parts of [a-z0-9] and inner '-'.
func isDNSSubdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for part := range strings.SplitSeq(s, ".") {
		if part == "" || part[0] == '-' || part[len(part)-1] == '-' {
			return false
		}
		for i := 0; i < len(part); i++ {
			if c := part[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
				return false
			}
		}
	}
	return true
}
