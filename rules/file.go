package rules

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
)

// APIVersion and Kind identify a rules file, so that the format can become a
// custom resource later without changing.
const (
	APIVersion = "featureplug.io/v1alpha1"
	Kind       = "ResourceRules"
)

// fileSpec is a rules file as written. Field names follow Kubernetes
// conventions; unknown fields are errors.
type fileSpec struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Rules      []ruleSpec `json:"rules"`
}

// ruleSpec is one rule as written.
type ruleSpec struct {
	// Name identifies the rule in plans, explanations and errors.
	Name string `json:"name"`
	// Devices is "gpu" or "mig": what the rule can claim.
	Devices DeviceKind `json:"devices"`
	// MatchFeatures and MatchAny are NFD's rule matchers, unchanged.
	MatchFeatures nfdv1alpha1.FeatureMatcher `json:"matchFeatures,omitempty"`
	MatchAny      []nfdv1alpha1.MatchAnyElem `json:"matchAny,omitempty"`
	// NodeSelector restricts the rule to nodes whose labels it selects.
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Resource is the extended resource name, or a template producing it.
	Resource string `json:"resource"`
	// Sharing is how the claimed devices are shared; none when absent.
	Sharing *sharingSpec `json:"sharing,omitempty"`
}

// sharingSpec is a rule's sharing as written. Pointers tell "absent" from
// zero so that "replicas: 0" can be reported.
type sharingSpec struct {
	Strategy                   SharingStrategy `json:"strategy,omitempty"`
	Replicas                   *int            `json:"replicas,omitempty"`
	FailRequestsGreaterThanOne bool            `json:"failRequestsGreaterThanOne,omitempty"`
	MPS                        *mpsSpec        `json:"mps,omitempty"`
}

// mpsSpec holds the MPS limits as written; absent values get defaults per
// plan (they depend on the devices).
type mpsSpec struct {
	PinnedMemoryLimitMiB   *uint64 `json:"pinnedMemoryLimitMiB,omitempty"`
	ActiveThreadPercentage *int    `json:"activeThreadPercentage,omitempty"`
}
