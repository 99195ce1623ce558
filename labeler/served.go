package labeler

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/featureplug/featureplug/rules/plan"
)

// Annotations the agent puts on its NodeFeature, so that `featureplug rules
// diff` (and an admin with kubectl) can tell which rules a node runs and
// what it serves.
const (
	// AnnotationRulesDigest is the digest of the rules the served plan
	// came from: "sha256:" and 16 hex digits of the file's content, or the
	// builtin's source, "builtin:<name>".
	AnnotationRulesDigest = "featureplug.io/rules-digest"
	// AnnotationResources is what the served plan serves, as Served
	// writes it ("" when the agent has no plan yet: the key is absent).
	AnnotationResources = "featureplug.io/resources"
	// AnnotationMPSControl says whether the agent can start MPS control
	// daemons: MPSControlFound, or why not ("nvidia-cuda-mps-control not
	// found in PATH"), whatever the rules share, so that rules check and
	// rules explain --node tell before MPS rules reach the node.
	AnnotationMPSControl = "featureplug.io/mps-control"
	// MPSControlFound is AnnotationMPSControl's value when the control
	// program is there.
	MPSControlFound = "found"
)

// Annotations returns the NodeFeature annotations of a plan (none before
// any plan): the digest of the rules it came from (plan.Plan.RulesDigest)
// and what it serves, given the agent's default API def.
func Annotations(p *plan.Plan, def plan.Serve) map[string]string {
	if p == nil {
		return nil
	}
	return map[string]string{AnnotationRulesDigest: p.RulesDigest, AnnotationResources: NewServed(p, def).String()}
}

// Served is what a node's agent serves: per resource, its devices, their
// sharing and the kubelet API that serves them. It is the value of
// AnnotationResources, written as JSON by String and read back by
// ParseServed.
type Served struct {
	// DefaultServe is the API of the resources whose rules do not choose
	// one (the agent's --serve); "" when the annotation does not say.
	DefaultServe plan.Serve `json:"defaultServe,omitempty"`
	// Resources are ordered by name.
	Resources []ServedResource `json:"resources"`
	// CountsOnly is set when the annotation is the older form
	// "name=count,...": the resources' Serve, Sharing and Devices are then
	// unknown, not none.
	CountsOnly bool `json:"-"`
}

// ServedResource is one resource a node serves.
type ServedResource struct {
	// Name is the extended resource name.
	Name string `json:"name"`
	// Count is the number of devices (before sharing replicas).
	Count int `json:"count"`
	// Serve is the API that serves the resource (plan.Resource.ServedBy
	// the agent's default).
	Serve plan.Serve `json:"serve,omitempty"`
	// Sharing is how its devices are shared; the zero value is none.
	Sharing plan.Sharing `json:"sharing,omitzero"`
	// Devices are the devices' indices (plan.Device.Index: "3", "3:1"),
	// in plan order.
	Devices []string `json:"devices,omitempty"`
}

// Capacity is what the resource advertises: devices times replicas.
func (r *ServedResource) Capacity() int {
	return r.Count * max(r.Sharing.Replicas, 1)
}

// NewServed describes what p serves, given the agent's default API def
// for the resources whose rules do not choose.
func NewServed(p *plan.Plan, def plan.Serve) Served {
	s := Served{DefaultServe: def, Resources: make([]ServedResource, 0, len(p.Resources))}
	for i := range p.Resources {
		r := &p.Resources[i]
		sr := ServedResource{Name: r.Name, Count: len(r.Devices), Serve: r.ServedBy(def), Devices: make([]string, len(r.Devices))}
		if !r.Sharing.Same(plan.Sharing{}) {
			sr.Sharing = r.Sharing
		}
		for j, d := range r.Devices {
			sr.Devices[j] = d.Index
		}
		s.Resources = append(s.Resources, sr)
	}
	return s
}

// String returns the annotation value: compact JSON.
func (s Served) String() string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("labeler: encoding served resources: %v", err)) // plain values: cannot fail
	}
	return string(b)
}

// Resource returns the resource with the given name.
func (s *Served) Resource(name string) (*ServedResource, bool) {
	for i := range s.Resources {
		if s.Resources[i].Name == name {
			return &s.Resources[i], true
		}
	}
	return nil, false
}

// ParseServed reads an AnnotationResources value: the JSON String writes,
// or the older "name=count,..." form (CountsOnly), which an agent of an
// earlier release may still have published.
func ParseServed(value string) (Served, error) {
	v := strings.TrimSpace(value)
	if !strings.HasPrefix(v, "{") {
		return parseCounts(v)
	}
	var s Served
	dec := json.NewDecoder(strings.NewReader(v))
	if err := dec.Decode(&s); err != nil {
		return Served{}, fmt.Errorf("annotation %s: %w", AnnotationResources, err)
	}
	switch s.DefaultServe {
	case "", plan.ServeDevicePlugin, plan.ServeDRA:
	default:
		return Served{}, fmt.Errorf("annotation %s: defaultServe %q is not a kubelet API", AnnotationResources, s.DefaultServe)
	}
	for i := range s.Resources {
		r := &s.Resources[i]
		switch {
		case r.Name == "":
			return Served{}, fmt.Errorf("annotation %s: resource %d has no name", AnnotationResources, i)
		case r.Count < 0 || r.Devices != nil && len(r.Devices) != r.Count:
			return Served{}, fmt.Errorf("annotation %s: resource %s: count %d for %d devices", AnnotationResources, r.Name, r.Count, len(r.Devices))
		}
		switch r.Serve {
		case "", plan.ServeDevicePlugin, plan.ServeDRA:
		default:
			return Served{}, fmt.Errorf("annotation %s: resource %s: serve %q is not a kubelet API", AnnotationResources, r.Name, r.Serve)
		}
	}
	return s, nil
}

// parseCounts reads the older annotation form, "name=count" pairs joined
// by commas.
func parseCounts(v string) (Served, error) {
	s := Served{CountsOnly: true, Resources: []ServedResource{}}
	if v == "" {
		return s, nil
	}
	for _, part := range strings.Split(v, ",") {
		name, count, ok := strings.Cut(part, "=")
		n, err := strconv.Atoi(count)
		if !ok || name == "" || err != nil || n < 0 {
			return Served{}, fmt.Errorf("annotation %s: %q is not resource=count", AnnotationResources, part)
		}
		s.Resources = append(s.Resources, ServedResource{Name: name, Count: n})
	}
	return s, nil
}
