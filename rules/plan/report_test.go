package plan

import (
	"maps"
	"testing"
)

// TestReportHelpers: what the agent logs of a plan: the resources held
// back, the device IDs per resource, and a bounded list of problems.
func TestReportHelpers(t *testing.T) {
	p := &Plan{Resources: []Resource{
		{Name: "a", Devices: make([]Device, 2)},
		{Name: "b", Devices: make([]Device, 2), Sharing: Sharing{Strategy: SharingTimeSlicing, Replicas: 4}, Held: "daemon down"},
	}}
	if got := p.Held(); !maps.Equal(got, map[string]string{"b": "daemon down"}) {
		t.Errorf("Held = %v", got)
	}
	if got := p.Capacity(); !maps.Equal(got, map[string]int{"a": 2, "b": 8}) {
		t.Errorf("Capacity = %v", got)
	}
	if len((*Plan)(nil).Held()) != 0 {
		t.Error("a nil plan holds something back")
	}
	ps := []Problem{{Device: "GPU-0", Description: "GPU 0", Message: "bad"}, {Device: "GPU-1", Description: "GPU 1", Message: "bad"}}
	if got := ProblemsSummary(ps, 1); got != "GPU 0 (GPU-0): bad; and 1 more" {
		t.Errorf("ProblemsSummary = %q", got)
	}
	if ProblemsKey(ps) == ProblemsKey(ps[:1]) || ProblemsKey(ps) != ProblemsKey(append([]Problem(nil), ps...)) {
		t.Error("ProblemsKey does not tell problem sets apart")
	}
}
