package plan

import (
	"strings"
	"testing"
)

func TestWithoutReserved(t *testing.T) {
	p := &Plan{Resources: []Resource{
		{Name: "example.com/mig", Devices: []Device{{ID: "MIG-a", Rule: "mig"}, {ID: "MIG-b", Rule: "mig"}}},
		{Name: "nvidia.com/gpu", Devices: []Device{{ID: "GPU-0", Rule: "gpu"}}},
	}}
	if got := p.WithoutReserved(map[string]string{"MIG-z": "held"}); got != p {
		t.Error("a reservation of no device of the plan made a new plan")
	}
	got := p.WithoutReserved(map[string]string{"MIG-a": "created for DRA claim ns/c (uid u) until it ends"})
	if len(got.Resources[0].Devices) != 1 || got.Resources[0].Devices[0].ID != "MIG-b" || len(got.Resources[1].Devices) != 1 {
		t.Errorf("resources %+v, want MIG-a left out and the rest kept", got.Resources)
	}
	if len(got.Problems) != 1 || got.Problems[0].Device != "MIG-a" || !strings.Contains(got.Problems[0].Message, "DRA claim ns/c") {
		t.Errorf("problems %+v, want one naming MIG-a and its claim", got.Problems)
	}
	if len(p.Resources[0].Devices) != 2 || len(p.Problems) != 0 {
		t.Error("WithoutReserved changed the plan it was given")
	}
}
