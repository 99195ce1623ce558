package plan

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
// name for a device plugin, by the rules the kubelet applies when a plugin
// registers (v1helper.IsExtendedResourceName): "domain/name" with a
// DNS-subdomain domain that is not kubernetes.io or k8s.io (or a subdomain
// of either), not starting with "requests.", and valid as a qualified name
// with that prefix (validation.IsQualifiedName): a name part of at most 63
// characters that starts and ends with an alphanumeric character and
// otherwise holds only '-', '_', '.' and alphanumerics. It is the one
// resource-name check of featureplug: the rules, the plugin manager and the
// MPS supervisor all call it. Errors quote the name.
func ValidateResourceName(name string) error {
	if name == "" {
		return fmt.Errorf("%q is not an extended resource name: it is empty", name)
	}
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
