package rules

import (
	"os"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/rules/plan"
)

// docRule returns the rules file of the package documentation (doc.go),
// with its sharing strategy set to strategy.
func docRule(t *testing.T, strategy string) string {
	t.Helper()
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	in := false
	for _, l := range strings.Split(string(src), "\n") {
		switch {
		case strings.HasPrefix(l, "//\tapiVersion:"):
			in = true
		case in && !strings.HasPrefix(l, "//\t"):
			in = false
		}
		if in {
			lines = append(lines, strings.TrimPrefix(l, "//\t"))
		}
	}
	if len(lines) == 0 {
		t.Fatal("no rules file in doc.go")
	}
	doc := strings.Join(lines, "\n") + "\n"
	if !strings.Contains(doc, "pinnedMemoryLimitMiB: 0") || !strings.Contains(doc, "activeThreadPercentage: 0") {
		t.Fatalf("doc.go's rules file no longer shows the zero MPS limits:\n%s", doc)
	}
	return strings.Replace(doc, "strategy: time-slicing", "strategy: "+strategy, 1)
}

// TestMPSDocSkeleton checks that the documented skeleton, with strategy
// mps, loads: 0 means the default limits, which the plan fills in, and
// failRequestsGreaterThanOne is true.
func TestMPSDocSkeleton(t *testing.T) {
	rs, err := Parse("doc.yaml", []byte(docRule(t, "mps")))
	if err != nil {
		t.Fatalf("the documented rules file with strategy mps: %v", err)
	}
	p := mustPlan(t, rs, modelNode(), map[string]string{"pool": "inference"})
	r, ok := p.Resource("nvidia.com/h100")
	if !ok || len(r.Devices) != 1 {
		t.Fatalf("resources = %+v, want nvidia.com/h100 with the H100", p.Resources)
	}
	want := plan.Sharing{Strategy: plan.SharingMPS, Replicas: 4, FailRequestsGreaterThanOne: true,
		MPS: &plan.MPSLimits{PinnedMemoryLimitMiB: 81559 / 4, ActiveThreadPercentage: 25}}
	if !r.Sharing.Equal(want) {
		t.Errorf("sharing = %s %+v, want %s %+v", r.Sharing, r.Sharing.MPS, want, want.MPS)
	}
}

// TestMPSErrors checks that MPS settings NVIDIA's plugin would refuse, or
// that cannot work, are errors naming the file, line, rule, field and
// value, with the range where there is one.
func TestMPSErrors(t *testing.T) {
	const rule = "- name: shared\n  devices: gpu\n  resource: example.com/mps\n  sharing:\n    strategy: mps\n    replicas: 2\n"
	for _, tt := range []struct {
		name, extra string
		want        []string
	}{
		{"failRequestsGreaterThanOne false", "    failRequestsGreaterThanOne: false\n",
			[]string{"r.yaml:", `rules[0] "shared"`, "sharing.failRequestsGreaterThanOne: must be true for strategy mps", "(have false)"}},
		{"negative threads", "    mps: {activeThreadPercentage: -5}\n",
			[]string{"r.yaml:", `rules[0] "shared"`, "sharing.mps.activeThreadPercentage: must be between 0 and 100", "(have -5)"}},
		{"negative memory", "    mps: {pinnedMemoryLimitMiB: -5}\n",
			[]string{"r.yaml:", `rules[0] "shared"`, "sharing.mps.pinnedMemoryLimitMiB: must be between 0 and 16777216", "(have -5)"}},
		{"threads above 100", "    mps: {activeThreadPercentage: 101}\n",
			[]string{"sharing.mps.activeThreadPercentage: must be between 0 and 100", "(have 101)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("r.yaml", []byte(header+rule+tt.extra))
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "must be an integer") {
				t.Errorf("a range error is reported as a type error:\n%v", err)
			}
		})
	}
	// Written true is what mps forces anyway; time-slicing keeps false.
	mustParse(t, rule+"    failRequestsGreaterThanOne: true\n")
	p := mustPlan(t, mustParse(t, "- name: ts\n  devices: gpu\n  resource: example.com/ts\n  sharing: {strategy: time-slicing, replicas: 2, failRequestsGreaterThanOne: false}\n"), modelNode(), nil)
	if r, _ := p.Resource("example.com/ts"); r.Sharing.OneReplicaPerContainer() {
		t.Errorf("time-slicing with failRequestsGreaterThanOne false: %s allows one replica per container", r.Sharing)
	}
}

// TestMPSMemoryAboveGPU checks that a per-replica memory limit larger than
// a claimed GPU's memory is a plan error naming the rule, the device and
// both values, while GPUs it fits are fine.
func TestMPSMemoryAboveGPU(t *testing.T) {
	rs := mustParse(t, "- name: big\n  devices: gpu\n  resource: example.com/mps\n  sharing: {strategy: mps, replicas: 2, mps: {pinnedMemoryLimitMiB: 50000}}\n")
	_, err := rs.Plan(modelNode(), nil)
	if err == nil {
		t.Fatal("Plan succeeded with a 50000 MiB limit on a 40960 MiB GPU")
	}
	for _, w := range []string{`rules[0] "big"`, "sharing.mps.pinnedMemoryLimitMiB", "(have 50000)", "GPU 2 NVIDIA A100-SXM4-40GB", "GPU-00000002", "50000 MiB", "40960 MiB"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not contain %q:\n%v", w, err)
		}
	}
	for _, other := range []string{"GPU 0 ", "GPU 1 "} {
		if strings.Contains(err.Error(), other) {
			t.Errorf("error names %s, whose memory is enough:\n%v", other, err)
		}
	}
	fits := mustParse(t, "- name: fits\n  devices: gpu\n  resource: example.com/mps\n  sharing: {strategy: mps, replicas: 2, mps: {pinnedMemoryLimitMiB: 15360}}\n")
	if r, _ := mustPlan(t, fits, modelNode(), nil).Resource("example.com/mps"); len(r.Devices) != 4 {
		t.Errorf("a limit every GPU holds: devices = %d, want 4", len(r.Devices))
	}
}
