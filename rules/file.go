package rules

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/rules/plan"
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
	// ServeNothing says the file means to serve no device: it then has no
	// rules. Without it, a file with no rules is an error, since an
	// emptied or truncated file looks the same.
	ServeNothing bool `json:"serveNothing,omitempty"`
	// Health is the health policy per node pool (health.go).
	Health []healthSpec `json:"health,omitempty"`
	// DRA says how DRA devices are published (dra.go).
	DRA *draSpec `json:"dra,omitempty"`
}

// ruleSpec is one rule as written.
type ruleSpec struct {
	// Name identifies the rule in plans, explanations and errors.
	Name string `json:"name"`
	// Devices is "gpu", "mig" or "vfio" (GPUs bound to vfio-pci): what the
	// rule can claim.
	Devices plan.DeviceKind `json:"devices"`
	// MatchFeatures and MatchAny are NFD's rule matchers, unchanged.
	MatchFeatures nfdv1alpha1.FeatureMatcher `json:"matchFeatures,omitempty"`
	MatchAny      []nfdv1alpha1.MatchAnyElem `json:"matchAny,omitempty"`
	// NodeSelector restricts the rule to nodes whose labels it selects.
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Resource is the extended resource name, or a template producing it.
	Resource string `json:"resource"`
	// Sharing is how the claimed devices are shared; none when absent.
	Sharing *plan.SharingSpec `json:"sharing,omitempty"`
	// Serve is the kubelet API the resource is served through:
	// device-plugin or dra; absent leaves it to the agent's --serve
	// (serve.go).
	Serve plan.Serve `json:"serve,omitempty"`
	// MIG, on a devices: gpu rule, partitions the GPUs it claims on
	// demand (migdynamic.go).
	MIG *migSpec `json:"mig,omitempty"`
}
