package rules

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// requestsPrefix is the prefix the API server puts before an extended
// resource name in quotas; names must stay valid with it (as the kubelet
// checks when a device plugin registers).
const requestsPrefix = "requests."

// ValidateResourceName reports whether name is a valid extended resource
// name for a device plugin: "domain/name" with a DNS-subdomain domain that
// is not kubernetes.io or k8s.io (or a subdomain of either), and a name part
// of at most 63 characters that starts and ends with an alphanumeric
// character and otherwise holds only '-', '_', '.' and alphanumerics.
func ValidateResourceName(name string) error {
	domain, part, ok := strings.Cut(name, "/")
	if !ok {
		return fmt.Errorf("%q is not an extended resource name: it needs a domain, as in example.com/%s", name, name)
	}
	if domain == "" || part == "" {
		return fmt.Errorf("%q is not an extended resource name: both the domain and the name after '/' must be non-empty", name)
	}
	// The domains of Kubernetes' own resources, and their subdomains.
	for _, d := range []string{"kubernetes.io", "k8s.io"} {
		if domain == d || strings.HasSuffix(domain, "."+d) {
			return fmt.Errorf("%q is not an extended resource name: domain %q is reserved for Kubernetes", name, domain)
		}
	}
	if strings.HasPrefix(name, requestsPrefix) {
		return fmt.Errorf("%q is not an extended resource name: it must not start with %q", name, requestsPrefix)
	}
	if errs := validation.IsQualifiedName(requestsPrefix + name); len(errs) > 0 {
		return fmt.Errorf("%q is not an extended resource name: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

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
