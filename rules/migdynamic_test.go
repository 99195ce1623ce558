package rules

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/discovery/migplace"
	"github.com/featureplug/featureplug/rules/plan"
)

// fakeInventory discovers a fake node (a bundled name, or YAML when it
// has a newline) with its MIG geometry, as the agent does for rules that
// partition GPUs.
func fakeInventory(t *testing.T, nameOrYAML string) *discovery.Inventory {
	t.Helper()
	var node *fakenode.Node
	var err error
	if strings.Contains(nameOrYAML, "\n") {
		node, err = fakenode.Parse("node.yaml", []byte(nameOrYAML))
	} else {
		node, err = fakenode.Named(nameOrYAML)
	}
	if err != nil {
		t.Fatal(err)
	}
	inv, err := discovery.Discover(node.NVML())
	if err != nil {
		t.Fatal(err)
	}
	if err := discovery.ReadMIGGeometry(node.NVML(), inv); err != nil {
		t.Fatal(err)
	}
	return inv
}

// dynamicRule is a dynamic rule for H100s with the given mig section
// lines (indented under mig:).
func dynamicH100(mig string) string {
	return `- name: h100
  devices: gpu
  matchFeatures:
    - feature: nvidia.gpu
      matchExpressions:
        product: {op: InRegexp, value: ["H100"]}
  resource: 'nvidia.com/mig-{{ .profile | replace "+" "-" }}'
  mig:
` + mig
}

// TestDynamicLoadErrors checks that a bad mig section is an error naming
// the file, line, rule, field and value.
func TestDynamicLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name, rules string
		want        []string // substrings of the error
	}{
		{"on a devices: mig rule", "- name: m\n  devices: mig\n  resource: example.com/m\n  mig: {partition: dynamic}\n",
			[]string{`r.yaml:7: rules[0] "m": mig: only a devices: gpu rule partitions GPUs`}},
		{"partition missing", "- name: m\n  devices: gpu\n  resource: example.com/m\n  mig: {profiles: [1g.10gb]}\n",
			[]string{`rules[0] "m": mig.partition: required: "dynamic"`}},
		{"partition wrong", "- name: m\n  devices: gpu\n  resource: example.com/m\n  mig: {partition: static}\n",
			[]string{`mig.partition: must be "dynamic"`, `(have "static")`}},
		{"device-plugin", dynamicH100("    partition: dynamic\n") + "  serve: device-plugin\n",
			[]string{`rules[0] "h100": serve: mig.partition: dynamic is served through DRA only`, `(have "device-plugin")`}},
		{"misspelt +me", dynamicH100("    partition: dynamic\n    profiles: [1g.10gb, 1g.10gb.me]\n"),
			[]string{`mig.profiles[1]: is not a MIG profile name; did you mean "1g.10gb+me"?`, `(have "1g.10gb.me")`}},
		{"compute instance profile", dynamicH100("    partition: dynamic\n    profiles: [1c.3g.40gb]\n"),
			[]string{`mig.profiles[0]: is not a MIG profile name (featureplug creates compute instances that fill their GPU instance`}},
		{"twice", dynamicH100("    partition: dynamic\n    profiles: [3g.40gb, 3g.40gb]\n"),
			[]string{`mig.profiles[1]: given twice (first as mig.profiles[0])`}},
		{"empty list", dynamicH100("    partition: dynamic\n    profiles: []\n"),
			[]string{`mig.profiles: lists no profile`}},
		{"shared", dynamicH100("    partition: dynamic\n") + "  sharing: {strategy: time-slicing, replicas: 2}\n",
			[]string{`sharing: a GPU partitioned on demand does not share its MIG devices`}},
		{"bad whole-GPU name", dynamicH100("    partition: dynamic\n    wholeGPU: not a name\n"),
			[]string{`mig.wholeGPU:`, `(have "not a name")`}},
		{"whole GPU as the profiles' resource", "- name: m\n  devices: gpu\n  resource: example.com/m\n  mig: {partition: dynamic, wholeGPU: example.com/m}\n",
			[]string{`mig.wholeGPU: is also the resource of the rule's MIG profiles`}},
		{"whole-GPU template", dynamicH100("    partition: dynamic\n    wholeGPU: 'example.com/{{ .nope }}'\n"),
			[]string{`mig.wholeGPU: template fails on a sample gpu device`}},
		{"unknown field", dynamicH100("    partition: dynamic\n    profile: [1g.10gb]\n"),
			[]string{`rules[0] "h100": mig: unknown field "profile"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("r.yaml", []byte(header+tc.rules))
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

// TestDynamicServeAndWarnings checks that a dynamic rule without serve is
// served through DRA, also when the agent's --serve says device-plugin.
func TestDynamicServeAndWarnings(t *testing.T) {
	rs := mustParse(t, dynamicH100("    partition: dynamic\n"))
	if !rs.NeedsMIGGeometry() {
		t.Error("NeedsMIGGeometry is false for a dynamic rule")
	}
	if mustParse(t, "- name: a\n  devices: gpu\n  resource: example.com/a\n").NeedsMIGGeometry() {
		t.Error("NeedsMIGGeometry is true without a dynamic rule")
	}
	p := mustPlan(t, rs, fakeInventory(t, "dgx-h100"), nil)
	for _, r := range p.Resources {
		if !r.Dynamic || r.ServedBy(plan.ServeDevicePlugin) != plan.ServeDRA || len(r.Devices) != 0 {
			t.Errorf("resource %s: dynamic %v, served by %s, %d devices", r.Name, r.Dynamic, r.ServedBy(plan.ServeDevicePlugin), len(r.Devices))
		}
	}
	if got := p.ServedThrough(plan.ServeDevicePlugin, plan.ServeDevicePlugin); len(got.Resources) != 0 {
		t.Errorf("the device-plugin sink would serve %v", got.Resources)
	}
	if err := p.CheckServes(); err != nil {
		t.Errorf("a plan of dynamic GPUs serves nothing: %v", err)
	}
}

// TestDynamicPlan plans a dynamic rule on an 8x H100 node and checks the
// plan's contract: per GPU the offered profiles with their placements,
// resources and compute instance profile, the counters the GPU holds, the
// whole GPU's resource, and decisions that name the rule.
func TestDynamicPlan(t *testing.T) {
	rs := mustParse(t, dynamicH100("    partition: dynamic\n    profiles: [3g.40gb, 1g.10gb+me, 1g.10gb, 2g.20gb]\n    wholeGPU: nvidia.com/gpu\n"))
	inv := fakeInventory(t, "dgx-h100")
	p := mustPlan(t, rs, inv, nil)
	if len(p.DynamicMIG) != 8 {
		t.Fatalf("%d dynamic GPUs, want 8", len(p.DynamicMIG))
	}
	g := p.DynamicMIG[3]
	if g.Index != 3 || g.UUID != inv.GPUs[3].UUID || g.Rule != "h100" || g.MIGEnabled || g.ModeChangeNeedsReset || g.WholeGPU != "nvidia.com/gpu" {
		t.Errorf("GPU 3: %+v", g)
	}
	var names []string
	for _, prof := range g.Profiles {
		names = append(names, prof.Name+"="+prof.Resource)
	}
	// Geometry order, whatever order the rule lists them in.
	want := []string{"1g.10gb=nvidia.com/mig-1g.10gb", "1g.10gb+me=nvidia.com/mig-1g.10gb-me", "2g.20gb=nvidia.com/mig-2g.20gb", "3g.40gb=nvidia.com/mig-3g.40gb"}
	if !slices.Equal(names, want) {
		t.Errorf("profiles %v, want %v", names, want)
	}
	p3g, _ := g.Profile("3g.40gb")
	if p3g.StartsString() != "{0,4}:4" || p3g.ComputeInstanceProfile != 2 || p3g.ID != 9 {
		t.Errorf("3g.40gb: %+v", p3g)
	}
	if g.Capacity != (migplace.Counters{MemorySlices: 0xFF, ComputeSlices: 7, Engines: migplace.Engines{Copy: 8, Decoder: 7, JPEG: 7, OFA: 1}}) {
		t.Errorf("capacity %+v", g.Capacity)
	}
	target, err := g.Target(9, 4)
	if err != nil || target != (migplace.Target{GPUUUID: g.UUID, Profile: "3g.40gb", ProfileEnum: 2, ProfileID: 9, Placement: migplace.Placement{Start: 4, Size: 4}, ComputeInstanceProfile: 2}) {
		t.Errorf("Target(9, 4) = %+v, %v", target, err)
	}
	if _, err := g.Target(9, 2); err == nil || !strings.Contains(err.Error(), "no placement at memory slice 2 (it has {0,4}:4)") {
		t.Errorf("Target(9, 2): %v", err)
	}
	if _, err := g.Target(5, 0); err == nil || !strings.Contains(err.Error(), "offers no MIG profile with ID 5") {
		t.Errorf("Target of a profile not offered: %v", err)
	}
	for _, d := range p.Decisions {
		if !d.Dynamic || d.Rule != "h100" || d.Resource != "" {
			t.Errorf("decision %+v", d)
		}
	}
	var res []string
	for _, r := range p.Resources {
		res = append(res, r.Name)
	}
	if !slices.Equal(res, []string{"nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.10gb-me", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"}) {
		t.Errorf("resources %v", res)
	}
}

// TestDynamicGPUStates checks the GPUs a dynamic rule claims in states
// other than idle Hopper: MIG devices that exist, Ampere with MIG disabled
// or enabled, a GPU without MIG, profiles the GPU lacks, and an inventory
// read without geometry.
func TestDynamicGPUStates(t *testing.T) {
	all := `- name: dyn
  devices: gpu
  resource: 'nvidia.com/mig-{{ .profile | replace "+" "-" }}'
  mig: {partition: dynamic, wholeGPU: nvidia.com/gpu}
- name: static-mig
  devices: mig
  resource: 'example.com/static-{{ .profile | replace "+" "-" }}'
- name: rest
  devices: gpu
  resource: example.com/rest
`
	rs := mustParse(t, all)

	t.Run("existing MIG devices", func(t *testing.T) {
		inv := fakeInventory(t, "h200-mig")
		p := mustPlan(t, rs, inv, nil)
		g := p.DynamicMIG[0]
		if len(g.Existing) != len(inv.GPUs[0].MIGDevices) || g.Existing[0].Placement.Start != 0 {
			t.Fatalf("existing %+v", g.Existing)
		}
		for _, e := range g.Existing {
			if !e.Whole || e.UUID == "" {
				t.Errorf("existing %+v", e)
			}
		}
		for _, d := range p.Decisions {
			if d.Kind == plan.DeviceMIG && (!d.Dynamic || d.Rule != "dyn" || !strings.HasPrefix(d.Resource, "nvidia.com/mig-")) {
				t.Errorf("MIG device decision %+v: the static rule must not claim a dynamic GPU's MIG devices", d)
			}
		}
		for _, r := range p.Resources {
			if strings.HasPrefix(r.Name, "example.com/static") {
				t.Errorf("static resource %s on a dynamic GPU", r.Name)
			}
		}
	})

	t.Run("Ampere", func(t *testing.T) {
		inv := fakeInventory(t, "a100-80gb-mixed")
		p, err := rs.CheckOn("fake node a100-80gb-mixed", inv, nil)
		if p == nil {
			t.Fatal(err)
		}
		// GPU 0 has MIG enabled: dynamic, but not as a whole GPU.
		g, ok := p.Dynamic(inv.GPUs[0].UUID)
		if !ok || g.WholeGPU != "" || !strings.Contains(g.WholeGPUWithheld, "needs a GPU reset; offer the whole-GPU profile 7g.80gb instead") || !g.ModeChangeNeedsReset {
			t.Errorf("A100 with MIG enabled: %+v", g)
		}
		// GPU 1 has MIG disabled: left out, saying how to enable MIG.
		if err == nil || !strings.Contains(err.Error(), `rules[0] "dyn": mig: GPU 1 NVIDIA A100-SXM4-80GB: MIG mode is disabled, and changing it on NVIDIA A100-SXM4-80GB needs a GPU reset`) ||
			!strings.Contains(err.Error(), "nvidia-smi -i 1 -mig 1") {
			t.Errorf("A100 with MIG disabled: %v", err)
		}
		if _, ok := p.Dynamic(inv.GPUs[1].UUID); ok {
			t.Error("A100 with MIG disabled is dynamic")
		}
	})

	t.Run("not MIG capable", func(t *testing.T) {
		p := mustPlan(t, rs, fakeInventory(t, "workstation"), nil)
		d := p.Decisions[0]
		if d.Resource != "example.com/rest" || d.Skipped[0].Reason != missNotMIGCapable {
			t.Errorf("L4: %+v", d)
		}
	})

	t.Run("no offered profile", func(t *testing.T) {
		rs := mustParse(t, dynamicH100("    partition: dynamic\n    profiles: [3g.71gb]\n"))
		_, err := rs.CheckOn("n", fakeInventory(t, "dgx-h100"), nil)
		if err == nil || !strings.Contains(err.Error(), "mig.profiles: GPU 0 NVIDIA H100 80GB HBM3 has none of the profiles 3g.71gb (it has 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)") {
			t.Errorf("%v", err)
		}
	})

	t.Run("no geometry", func(t *testing.T) {
		node, _ := fakenode.Named("dgx-h100")
		inv, err := discovery.Discover(node.NVML())
		if err != nil {
			t.Fatal(err)
		}
		_, err = rs.CheckOn("n", inv, nil)
		if err == nil || !strings.Contains(err.Error(), "its MIG geometry is not known (the devices were read without discovery.ReadMIGGeometry") {
			t.Errorf("%v", err)
		}
	})

	t.Run("serve conflict", func(t *testing.T) {
		rs := mustParse(t, dynamicH100("    partition: dynamic\n    wholeGPU: nvidia.com/gpu\n")+
			"- name: whole\n  devices: gpu\n  resource: nvidia.com/gpu\n  serve: device-plugin\n")
		inv := fakeInventory(t, "name: mixed\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n  - product: H100-80GB-HBM3\n  - product: L4\n")
		_, err := rs.Plan(inv, nil)
		if err == nil || !strings.Contains(err.Error(), `rules[1] "whole": serve: resource "nvidia.com/gpu" of GPU 1 NVIDIA L4 is also given by rules[0] "h100" with serve: dra`) {
			t.Errorf("%v", err)
		}
	})
}

// TestDynamicCheckOnCatalog checks `rules check` on the catalog: a profile
// no matched product has, and a template that gives an invalid name for
// the +me profile, are errors naming the rule, field and value; a valid
// file passes.
func TestDynamicCheckOnCatalog(t *testing.T) {
	for _, tc := range []struct {
		name, rules string
		want        []string
	}{
		{"profile of another product", `- name: h200
  devices: gpu
  matchFeatures:
    - feature: nvidia.gpu
      matchExpressions:
        product: {op: In, value: ["NVIDIA H200"]}
  resource: 'nvidia.com/mig-{{ .profile | replace "+" "-" }}'
  mig:
    partition: dynamic
    profiles: [1g.18gb, 3g.40gb]
`, []string{`rules[0] "h200": mig.profiles[1]: is a MIG profile of none of the catalog GPUs the rule matches (NVIDIA H200: 1g.18gb, 1g.18gb+me, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb); the same slice count there: NVIDIA H200 3g.71gb (have "3g.40gb")`}},
		{"+me in a resource name", `- name: all
  devices: gpu
  resource: 'nvidia.com/mig-{{ .profile }}'
  mig: {partition: dynamic}
`, []string{`rules[0] "all": resource: template gives "nvidia.com/mig-1g.10gb+me"`, `MIG profile 1g.10gb+me`}},
		{"valid", `- name: all
  devices: gpu
  resource: 'nvidia.com/mig-{{ .profile | replace "+" "-" }}'
  mig: {partition: dynamic, profiles: [1g.10gb, 3g.40gb, 1g.18gb+me], wholeGPU: nvidia.com/gpu}
`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := mustParse(t, tc.rules)
			err := rs.CheckNodes(catalogNodes(t))
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("valid file: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

// catalogNodes is one GPU of every MIG-capable catalog product, each with
// MIG enabled (so that Ampere lists its profiles), with geometry: the part
// of rules/catalog's nodes the dynamic checks read (rules/catalog imports
// this package, so its tests cover the whole set).
func catalogNodes(t *testing.T) []CheckNode {
	t.Helper()
	var b strings.Builder
	b.WriteString("name: catalog\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n")
	for _, p := range fakenode.Products() {
		if len(p.MIGProfiles) > 0 {
			fmt.Fprintf(&b, "  - product: %s\n    mig: []\n", p.Key)
		}
	}
	return []CheckNode{{Name: "catalog", Inventory: fakeInventory(t, b.String()), Synthetic: true}}
}

// TestDynamicExplain checks that explain lists, per dynamic GPU, its MIG
// mode, counters, whole GPU and every offered profile with its placements.
func TestDynamicExplain(t *testing.T) {
	rs := mustParse(t, dynamicH100("    partition: dynamic\n    profiles: [1g.10gb+me, 3g.40gb]\n    wholeGPU: nvidia.com/gpu\n"))
	p := mustPlan(t, rs, fakeInventory(t, "dgx-h100"), nil)
	var b strings.Builder
	if err := WriteExplanation(&b, p); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, w := range []string{
		"GPU 0 NVIDIA H100 80GB HBM3  GPU-",
		"  resource  partitioned on demand (dynamic MIG, below)\n  rule      h100\n",
		"nvidia.com/mig-3g.40gb     dynamic: GPU 0,1,2,3,4,5,6,7",
		"  MIG mode   disabled; Prepare enables it for the first MIG device (no reset needed on this GPU)\n",
		"  counters   8 memory slices, 7 compute slices, 1 OFA\n",
		"  whole GPU  nvidia.com/gpu (takes every counter: excludes every MIG claim on the GPU)\n",
		"  existing   no MIG devices\n",
		"  1g.10gb+me  nvidia.com/mig-1g.10gb-me  {0,1,2,3,4,5,6}:1  1 memory slice, 1 compute slice, 1 OFA\n",
		"  3g.40gb     nvidia.com/mig-3g.40gb     {0,4}:4            4 memory slices, 3 compute slices\n",
		"  profiles   as GPU 0\n",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("explanation lacks %q:\n%s", w, out)
		}
	}
}
