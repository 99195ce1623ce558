package labeler

import (
	"reflect"
	"testing"

	"github.com/featureplug/featureplug/rules/plan"
)

func TestFormatResources(t *testing.T) {
	after := &plan.Plan{Resources: []plan.Resource{
		{Name: "example.com/a100-40gb", Devices: make([]plan.Device, 3)},
		{Name: "nvidia.com/gpu", Devices: make([]plan.Device, 2)},
		{Name: "nvidia.com/mig-3g.20gb", Devices: make([]plan.Device, 1)},
	}}
	s := FormatResources(after)
	if s != "example.com/a100-40gb=3,nvidia.com/gpu=2,nvidia.com/mig-3g.20gb=1" {
		t.Errorf("FormatResources = %q", s)
	}
	counts, err := ParseResources(s)
	if err != nil || !reflect.DeepEqual(counts, map[string]int{"example.com/a100-40gb": 3, "nvidia.com/gpu": 2, "nvidia.com/mig-3g.20gb": 1}) {
		t.Errorf("ParseResources(%q) = %v, %v", s, counts, err)
	}
	if _, err := ParseResources("a=1,b"); err == nil {
		t.Error("ParseResources accepts a part without a count")
	}
}
