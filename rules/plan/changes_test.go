package plan

import (
	"reflect"
	"testing"
)

func TestResourceChanges(t *testing.T) {
	dev := func(rule string) Device { return Device{Rule: rule} }
	ts := Sharing{Strategy: SharingTimeSlicing, Replicas: 2}
	before := &Plan{Resources: []Resource{
		{Name: "nvidia.com/gpu", Devices: []Device{dev("gpu"), dev("gpu")}},
		{Name: "nvidia.com/mig-1g.5gb", Devices: []Device{dev("mig")}},
		{Name: "nvidia.com/mig-3g.20gb", Devices: []Device{dev("mig")}},
	}}
	after := &Plan{Resources: []Resource{
		{Name: "example.com/a100-40gb", Devices: []Device{dev("a100-by-model"), dev("a100-big"), dev("a100-by-model")}},
		{Name: "nvidia.com/gpu", Sharing: ts, Devices: []Device{dev("gpu"), dev("gpu")}},
		{Name: "nvidia.com/mig-3g.20gb", Devices: []Device{dev("mig")}},
	}}
	want := []string{
		"example.com/a100-40gb: 0 -> 3 devices, rules a100-by-model, a100-big",
		"nvidia.com/gpu: 2 -> 2 devices, sharing none -> time-slicing x2, rule gpu",
		"nvidia.com/mig-1g.5gb: 1 -> 0 devices, rule mig",
	}
	if got := ResourceChanges(before, after); !reflect.DeepEqual(got, want) {
		t.Errorf("ResourceChanges = %q, want %q", got, want)
	}
	if got := ResourceChanges(after, after); len(got) != 0 {
		t.Errorf("no change gives %q", got)
	}
	if got := ResourceChanges(nil, before)[0]; got != "nvidia.com/gpu: 0 -> 2 devices, rule gpu" {
		t.Errorf("first plan: %q", got)
	}
}
