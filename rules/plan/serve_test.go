package plan

import (
	"slices"
	"testing"
)

// names lists the resource names of p.
func names(p *Plan) []string {
	var out []string
	for _, r := range p.Resources {
		out = append(out, r.Name)
	}
	return out
}

// TestServedThrough: each API's part of a plan holds exactly the resources
// served through it once the default is filled in, and a plan wholly
// served through one API is that API's part unchanged.
func TestServedThrough(t *testing.T) {
	p := &Plan{Resources: []Resource{
		{Name: "example.com/a", Serve: ServeDRA},
		{Name: "example.com/b"},
		{Name: "example.com/c", Serve: ServeDevicePlugin},
	}}
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
			t.Errorf("ServedThrough(%s), default %s = %v, want %v", tt.api, tt.def, got, tt.want)
		}
	}
	if len(p.Resources) != 3 || p.Resources[1].Serve != "" {
		t.Fatalf("WithServeDefault or ServedThrough changed the plan: %+v", p.Resources)
	}
	all := &Plan{Resources: []Resource{{Name: "example.com/a", Serve: ServeDRA}}}
	if all.ServedThrough(ServeDRA, "") != all || all.WithServeDefault(ServeDevicePlugin) != all {
		t.Error("a plan wholly served through DRA is not its own DRA part")
	}
	if (*Plan)(nil).ServedThrough(ServeDRA, "") != nil || (*Plan)(nil).WithServeDefault(ServeDRA) != nil {
		t.Error("nil plan gave a part")
	}
}

// TestWithHeld: held resources are marked with why, left out of what an
// API serves now, and released again; a plan whose marks do not change is
// returned as it is.
func TestWithHeld(t *testing.T) {
	p := &Plan{Resources: []Resource{
		{Name: "example.com/mps", Serve: ServeDevicePlugin},
		{Name: "example.com/gpu", Serve: ServeDevicePlugin},
	}}
	if p.WithHeld(nil) != p {
		t.Error("holding nothing made a new plan")
	}
	held := p.WithHeld(map[string]string{"example.com/mps": "daemon starting"})
	if held.Resources[0].Held != "daemon starting" || p.Resources[0].Held != "" {
		t.Fatalf("WithHeld: %+v (original %+v)", held.Resources, p.Resources)
	}
	if got := names(held.Serving(ServeDevicePlugin)); !slices.Equal(got, []string{"example.com/gpu"}) {
		t.Errorf("Serving = %v, want the resource not held", got)
	}
	if got := names(held.ServedThrough(ServeDevicePlugin, "")); len(got) != 2 {
		t.Errorf("ServedThrough = %v, want both (held or not)", got)
	}
	if held.WithHeld(map[string]string{"example.com/mps": "daemon starting"}) != held {
		t.Error("the same marks made a new plan")
	}
	if back := held.WithHeld(nil); back.Resources[0].Held != "" {
		t.Errorf("released: %+v", back.Resources)
	}
}

// TestDrainsNode: a plan that advertises no device of a node with devices,
// replacing one that advertises some, drains the node unless it says it
// should serve nothing; anything else does not.
func TestDrainsNode(t *testing.T) {
	decisions := []Decision{{Device: "GPU-0"}}
	some := &Plan{Decisions: decisions, Resources: []Resource{{Name: "nvidia.com/gpu", Devices: []Device{{ID: "GPU-0"}}}}}
	none := &Plan{Decisions: decisions}
	for _, tt := range []struct {
		name       string
		last, next *Plan
		want       bool
	}{
		{"every resource withdrawn", some, none, true},
		{"every resource withdrawn on purpose", some, &Plan{Decisions: decisions, ServeNothing: true}, false},
		{"resources left without devices", some, &Plan{Decisions: decisions, Resources: []Resource{{Name: "nvidia.com/gpu"}}}, true},
		{"a node without devices", some, &Plan{}, false},
		{"nothing served before", none, none, false},
		{"no plan before", nil, none, false},
		{"resources left", some, some, false},
	} {
		if got := DrainsNode(tt.last, tt.next); got != tt.want {
			t.Errorf("%s: DrainsNode = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestServedThroughVFIO: the VFIO resources are served through device
// plugins whatever the agent's default, still apart in Plan.VFIO, and a
// plan that serves one through DRA is refused.
func TestServedThroughVFIO(t *testing.T) {
	p := &Plan{
		Resources: []Resource{{Name: "nvidia.com/gpu"}},
		VFIO:      []Resource{{Name: "nvidia.com/AD102GL_L40S"}},
	}
	vfioNames := func(p *Plan) []string {
		var out []string
		for _, r := range p.VFIO {
			out = append(out, r.Name)
		}
		return out
	}
	full := p.WithServeDefault(ServeDRA)
	if full.Resources[0].Serve != ServeDRA || full.VFIO[0].Serve != ServeDevicePlugin || p.VFIO[0].Serve != "" {
		t.Fatalf("WithServeDefault(dra): resources %+v, VFIO %+v (was %+v)", full.Resources, full.VFIO, p.VFIO)
	}
	for _, part := range []*Plan{full.Serving(ServeDevicePlugin), p.ServedThrough(ServeDevicePlugin, ServeDRA)} {
		if got := vfioNames(part); !slices.Equal(got, []string{"nvidia.com/AD102GL_L40S"}) || len(part.Resources) != 0 {
			t.Errorf("device-plugin part under --serve dra: resources %v, VFIO %v", names(part), got)
		}
	}
	for _, part := range []*Plan{full.Serving(ServeDRA), p.ServedThrough(ServeDRA, ServeDRA)} {
		if got := vfioNames(part); len(got) != 0 || !slices.Equal(names(part), []string{"nvidia.com/gpu"}) {
			t.Errorf("DRA part: resources %v, VFIO %v", names(part), got)
		}
	}
	dra := &Plan{VFIO: []Resource{{Name: "nvidia.com/AD102GL_L40S", Serve: ServeDRA}}}
	if err := ValidatePlan(dra); err != nil {
		t.Errorf("ValidatePlan of a VFIO resource served through DRA: %v", err)
	}
	if got := vfioNames(dra.Serving(ServeDRA)); !slices.Equal(got, []string{"nvidia.com/AD102GL_L40S"}) {
		t.Errorf("DRA part of a VFIO resource whose rule says serve: dra: VFIO %v", got)
	}
}
