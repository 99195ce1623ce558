package labeler

import (
	"reflect"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/rules/plan"
)

func TestServedRoundTrip(t *testing.T) {
	ts := plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 4}
	p := &plan.Plan{Resources: []plan.Resource{
		{Name: "example.com/a100", Serve: plan.ServeDRA, Devices: []plan.Device{{Index: "0"}, {Index: "1"}}},
		{Name: "nvidia.com/gpu", Sharing: ts, Devices: []plan.Device{{Index: "2"}}},
		{Name: "nvidia.com/mig-1g.5gb", Sharing: plan.Sharing{Strategy: plan.SharingNone, Replicas: 1},
			Devices: []plan.Device{{Index: "3:0"}, {Index: "3:1"}}},
	}}
	s := NewServed(p, plan.ServeDevicePlugin)
	want := Served{DefaultServe: plan.ServeDevicePlugin, Resources: []ServedResource{
		{Name: "example.com/a100", Count: 2, Serve: plan.ServeDRA, Devices: []string{"0", "1"}},
		{Name: "nvidia.com/gpu", Count: 1, Serve: plan.ServeDevicePlugin, Sharing: ts, Devices: []string{"2"}},
		{Name: "nvidia.com/mig-1g.5gb", Count: 2, Serve: plan.ServeDevicePlugin, Devices: []string{"3:0", "3:1"}},
	}}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("NewServed = %+v\nwant %+v", s, want)
	}
	value := s.String()
	if want := `{"defaultServe":"device-plugin","resources":[{"name":"example.com/a100","count":2,"serve":"dra","devices":["0","1"]},` +
		`{"name":"nvidia.com/gpu","count":1,"serve":"device-plugin","sharing":{"strategy":"time-slicing","replicas":4},"devices":["2"]},` +
		`{"name":"nvidia.com/mig-1g.5gb","count":2,"serve":"device-plugin","devices":["3:0","3:1"]}]}`; value != want {
		t.Errorf("annotation:\n%s\nwant\n%s", value, want)
	}
	back, err := ParseServed(value)
	if err != nil || !reflect.DeepEqual(back, s) {
		t.Errorf("ParseServed(String()) = %+v, %v", back, err)
	}
	if got := back.Resources[1].Capacity(); got != 4 {
		t.Errorf("capacity of one device shared 4 ways: %d", got)
	}
	empty := NewServed(&plan.Plan{}, plan.ServeDRA).String()
	if empty != `{"defaultServe":"dra","resources":[]}` {
		t.Errorf("a plan serving nothing: %s", empty)
	}
}

// TestParseServedCounts reads the annotation agents of earlier releases
// wrote: counts only.
func TestParseServedCounts(t *testing.T) {
	s, err := ParseServed("example.com/a100-40gb=3,nvidia.com/gpu=2")
	want := Served{CountsOnly: true, Resources: []ServedResource{{Name: "example.com/a100-40gb", Count: 3}, {Name: "nvidia.com/gpu", Count: 2}}}
	if err != nil || !reflect.DeepEqual(s, want) {
		t.Errorf("ParseServed = %+v, %v", s, err)
	}
	if s, err := ParseServed(""); err != nil || !s.CountsOnly || len(s.Resources) != 0 {
		t.Errorf("empty annotation: %+v, %v", s, err)
	}
}

func TestParseServedErrors(t *testing.T) {
	for value, want := range map[string]string{
		"a=1,b":                       `"b" is not resource=count`,
		"a=-1":                        `"a=-1" is not resource=count`,
		`{"resources":[{"count":1}]}`: "resource 0 has no name",
		`{"resources":[{"name":"a","count":2,"devices":["0"]}]}`:   "resource a: count 2 for 1 devices",
		`{"resources":[{"name":"a","count":1,"serve":"kubelet"}]}`: `resource a: serve "kubelet" is not a kubelet API`,
		`{"defaultServe":"grpc","resources":[]}`:                   `defaultServe "grpc" is not a kubelet API`,
		`{"resources":[{"name":"a","count":"1"}]}`:                 "cannot unmarshal",
		`{"resources":[`: "unexpected EOF",
	} {
		_, err := ParseServed(value)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), AnnotationResources) {
			t.Errorf("ParseServed(%q) = %v, want an error naming %s with %q", value, err, AnnotationResources, want)
		}
	}
}
