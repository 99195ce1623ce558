package plan

import (
	"slices"
	"testing"
)

// TestServedThrough: each API's part of a plan holds exactly the resources
// served through it (the default deciding for those that do not say), and
// a plan wholly served through one API is that API's part unchanged.
func TestServedThrough(t *testing.T) {
	p := &Plan{Resources: []Resource{
		{Name: "example.com/a", Serve: ServeDRA},
		{Name: "example.com/b"},
		{Name: "example.com/c", Serve: ServeDevicePlugin},
	}}
	names := func(q *Plan) []string {
		var out []string
		for _, r := range q.Resources {
			out = append(out, r.Name)
		}
		return out
	}
	for _, tt := range []struct {
		api, def Serve
		want     []string
	}{
		{ServeDRA, ServeDevicePlugin, []string{"example.com/a"}},
		{ServeDevicePlugin, ServeDevicePlugin, []string{"example.com/b", "example.com/c"}},
		{ServeDRA, ServeDRA, []string{"example.com/a", "example.com/b"}},
		{ServeDevicePlugin, ServeDRA, []string{"example.com/c"}},
	} {
		if got := names(p.ServedThrough(tt.api, tt.def)); !slices.Equal(got, tt.want) {
			t.Errorf("ServedThrough(%s, default %s) = %v, want %v", tt.api, tt.def, got, tt.want)
		}
	}
	if len(p.Resources) != 3 {
		t.Fatalf("ServedThrough changed the plan: %d resources", len(p.Resources))
	}
	all := &Plan{Resources: []Resource{{Name: "example.com/a", Serve: ServeDRA}}}
	if all.ServedThrough(ServeDRA, ServeDevicePlugin) != all {
		t.Error("a plan wholly served through DRA is not its own DRA part")
	}
	if (*Plan)(nil).ServedThrough(ServeDRA, ServeDRA) != nil {
		t.Error("nil plan gave a part")
	}
}
