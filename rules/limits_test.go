package rules

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

// TestReplicasCapAtLoad checks that replicas over MaxReplicas are an error
// naming the file, line, rule, field, value and cap.
func TestReplicasCapAtLoad(t *testing.T) {
	for _, tc := range []struct {
		replicas string
		want     string // "" for valid
	}{
		{"1000000000", `r.yaml:9: rules[0] "shared": sharing.replicas: must be at most 1024 (plan.MaxReplicas) (have 1000000000)`},
		{"1025", `sharing.replicas: must be at most 1024 (plan.MaxReplicas) (have 1025)`},
		{"-3", `sharing.replicas: must be at least 1 (have -3)`},
		{"1024", ""},
	} {
		_, err := Parse("r.yaml", []byte(header+"- name: shared\n  devices: gpu\n  resource: example.com/shared\n  sharing:\n    strategy: time-slicing\n    replicas: "+tc.replicas+"\n"))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("replicas %s: %v", tc.replicas, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("replicas %s: error %v, want %q", tc.replicas, err, tc.want)
		}
	}
}

// TestPlanProblems checks that a device whose template gives an invalid
// name is left out and reported while the rest of the plan serves.
func TestPlanProblems(t *testing.T) {
	t.Run("mig profile with +me", func(t *testing.T) {
		rs := mustParse(t, "- name: mig\n  devices: mig\n  resource: 'nvidia.com/mig-{{ .profile }}'\n- name: gpu\n  devices: gpu\n  resource: nvidia.com/gpu\n")
		inv := testInventory(testGPU(0, "NVIDIA A100-SXM4-80GB"), withMIG(testGPU(1, "NVIDIA A100-SXM4-80GB"), "1g.10gb+me", "2g.20gb"))
		p := mustPlan(t, rs, inv, nil)
		got := claims(p)
		want := map[string]string{"0": "nvidia.com/gpu", "1:1": "nvidia.com/mig-2g.20gb"}
		if len(got) != len(want) || got["0"] != want["0"] || got["1:1"] != want["1:1"] {
			t.Errorf("claims = %v, want %v", got, want)
		}
		if len(p.Problems) != 1 {
			t.Fatalf("problems = %+v, want one", p.Problems)
		}
		pr := p.Problems[0]
		if pr.Device != inv.GPUs[1].MIGDevices[0].UUID || pr.Rule != "mig" || pr.Resource != "nvidia.com/mig-1g.10gb+me" ||
			!strings.Contains(pr.Message, `r.yaml:6: rules[0] "mig": resource: template gives "nvidia.com/mig-1g.10gb+me" for GPU 1 MIG 0 (1g.10gb+me)`) {
			t.Errorf("problem = %+v", pr)
		}
		var d *plan.Decision
		for i := range p.Decisions {
			if p.Decisions[i].Device == pr.Device {
				d = &p.Decisions[i]
			}
		}
		if d == nil || d.Resource != "" || d.Rule != "mig" || d.Problem != pr.Message {
			t.Errorf("decision = %+v", d)
		}
		var out bytes.Buffer
		if err := WriteExplanation(&out, p); err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{"GPU 1 MIG 0 (1g.10gb+me)", "resource  none: left out because of its rule", "problem   " + pr.Message, "1 device left out"} {
			if !strings.Contains(out.String(), w) {
				t.Errorf("explanation lacks %q:\n%s", w, out.String())
			}
		}
	})
	for _, tc := range []struct {
		name, rules string
		want        string
	}{
		{"template gives an invalid name", "- name: raw\n  devices: gpu\n  resource: 'example.com/{{ .product }}'\n",
			`r.yaml:6: rules[0] "raw": resource: template gives "example.com/NVIDIA H100 80GB HBM3" for GPU 0 NVIDIA H100 80GB HBM3 (GPU-00000000-0000-0000-0000-000000000000)`},
		{"template gives a reserved name", "- name: raw\n  devices: gpu\n  resource: '{{ .family }}.kubernetes.io/gpu'\n",
			`rules[0] "raw": resource: template gives "hopper.kubernetes.io/gpu" for GPU 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPlan(t, mustParse(t, tc.rules), modelNode(), nil)
			if len(p.Resources) != 0 || len(p.Problems) != 4 {
				t.Fatalf("resources %+v, problems %+v: want none and 4", p.Resources, p.Problems)
			}
			if !strings.Contains(p.Problems[0].Message, tc.want) {
				t.Errorf("problem %q does not contain %q", p.Problems[0].Message, tc.want)
			}
		})
	}
}

// TestPlanCaps checks that plans over MaxDevicesPerResource or
// MaxDevicesPerNode fail, naming the rule and the cap.
func TestPlanCaps(t *testing.T) {
	gpus := func(n int, profiles ...string) *discovery.Inventory {
		inv := testInventory()
		for i := range n {
			g := testGPU(i, "NVIDIA A100-SXM4-40GB")
			if len(profiles) > 0 {
				g = withMIG(g, profiles...)
			}
			inv.GPUs = append(inv.GPUs, g)
		}
		return inv
	}
	t.Run("per resource", func(t *testing.T) {
		rs := mustParse(t, "- name: shared\n  devices: gpu\n  resource: example.com/shared\n  sharing: {strategy: time-slicing, replicas: 1024}\n")
		if _, err := rs.Plan(gpus(8), nil); err != nil {
			t.Fatalf("8 x 1024 (at the cap): %v", err)
		}
		_, err := rs.Plan(gpus(9), nil)
		if err == nil || !strings.Contains(err.Error(), `rules[0] "shared": resource example.com/shared: 9 devices x 1024 replicas = 9216 device IDs, over the cap of 8192 per resource (plan.MaxDevicesPerResource)`) {
			t.Errorf("9 x 1024: %v", err)
		}
	})
	t.Run("per node", func(t *testing.T) {
		rs := mustParse(t, "- name: shared\n  devices: mig\n  resource: 'example.com/mig-{{ .profile | resourceName }}'\n  sharing: {strategy: time-slicing, replicas: 1024}\n")
		_, err := rs.Plan(gpus(8, "1g.5gb", "2g.10gb", "3g.20gb"), nil)
		if err == nil || !strings.Contains(err.Error(), "the plan advertises 24576 device IDs in 3 resources, over the cap of 16384 per node (plan.MaxDevicesPerNode)") {
			t.Errorf("3 x 8 x 1024: %v", err)
		}
	})
}

// TestValidatePlan checks the caps on plans made without the planner.
func TestValidatePlan(t *testing.T) {
	dev := func(i int) plan.Device {
		return plan.Device{ID: testGPU(i, "Tesla T4").UUID, Kind: plan.DeviceGPU, GPUUUID: testGPU(i, "Tesla T4").UUID}
	}
	for _, tc := range []struct {
		name string
		plan *plan.Plan
		want string
	}{
		{"nil", nil, "nil plan"},
		{"ok", &plan.Plan{Resources: []plan.Resource{{Name: "example.com/a", Sharing: plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 1024}, Devices: []plan.Device{dev(0)}}}}, ""},
		{"huge replicas", &plan.Plan{Resources: []plan.Resource{{Name: "example.com/a", Sharing: plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: 1000000000}, Devices: []plan.Device{dev(0)}}}},
			"resource example.com/a: sharing.replicas: must be at most 1024 (plan.MaxReplicas) (have 1000000000)"},
		{"max int replicas", &plan.Plan{Resources: []plan.Resource{{Name: "example.com/a", Sharing: plan.Sharing{Strategy: plan.SharingMPS, Replicas: math.MaxInt}, Devices: []plan.Device{dev(0), dev(1)}}}},
			"plan.MaxReplicas"},
		{"negative replicas", &plan.Plan{Resources: []plan.Resource{{Name: "example.com/a", Sharing: plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: -1}}}},
			"must not be negative"},
		{"invalid name", &plan.Plan{Resources: []plan.Resource{{Name: "example.com/a b"}}}, "is not an extended resource name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := plan.ValidatePlan(tc.plan)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("ValidatePlan: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("ValidatePlan: %v, want %q", err, tc.want)
			}
		})
	}
	r := plan.Resource{Sharing: plan.Sharing{Strategy: plan.SharingTimeSlicing, Replicas: math.MaxInt}, Devices: make([]plan.Device, 3)}
	if n := r.AdvertisedDevices(); n <= plan.MaxDevicesPerNode {
		t.Errorf("AdvertisedDevices with MaxInt replicas = %d, want over every cap", n)
	}
}

// TestLoadSuggestsBuiltin checks that a misspelt builtin name is named as
// neither a file nor a builtin, with the closest builtin suggested.
func TestLoadSuggestsBuiltin(t *testing.T) {
	t.Chdir(t.TempDir())
	for name, want := range map[string]string{"mixd": "mixed", "Single": "single", "per-modle": "per-model", "frobnicate": ""} {
		_, err := Load(name)
		if err == nil || !strings.Contains(err.Error(), `rules "`+name+`" is neither a file nor a builtin (builtins: mixed, none, per-model, single)`) {
			t.Errorf("Load(%q) = %v", name, err)
			continue
		}
		if got := strings.Contains(err.Error(), "did you mean"); got != (want != "") ||
			want != "" && !strings.Contains(err.Error(), `did you mean "`+want+`"?`) {
			t.Errorf("Load(%q) = %v, want suggestion %q", name, err, want)
		}
	}
}

// TestMisspeltBuiltin checks which missing rules names run refuses at once.
func TestMisspeltBuiltin(t *testing.T) {
	t.Chdir(t.TempDir())
	for name, refused := range map[string]bool{"mixd": true, "mixed": false, "": false, "/etc/featureplug/rules.yaml": false, "nonee": true} {
		if err := MisspeltBuiltin(name); (err != nil) != refused {
			t.Errorf("MisspeltBuiltin(%q) = %v, want refused %v", name, err, refused)
		}
	}
}
