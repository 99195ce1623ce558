package labeler

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/validate/content"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules/plan"
)

func TestSanitizeValue(t *testing.T) {
	tests := []struct{ in, want string }{
		{"NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"},
		{"NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"},
		{"  Tesla  V100 (SXM2) ", "Tesla-V100-SXM2"},
		{"GeForce RTX™ 4090", "GeForce-RTX-4090"},
		{"a/b:c", "abc"},
		{"-leading.and.trailing_", "leading.and.trailing"},
		{"", ""},
		{"???", ""},
		{strings.Repeat("x", 70), strings.Repeat("x", 63)},
		{strings.Repeat("x", 62) + "-y", strings.Repeat("x", 62)},
		{"1g.10gb+me", "1g.10gbme"},
	}
	for _, tt := range tests {
		got := SanitizeValue(tt.in)
		if got != tt.want {
			t.Errorf("SanitizeValue(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if errs := content.IsLabelValue(got); len(errs) > 0 {
			t.Errorf("SanitizeValue(%q) = %q is not a valid label value: %v", tt.in, got, errs)
		}
	}
}

func FuzzSanitizeValue(f *testing.F) {
	for _, s := range []string{"NVIDIA A100-SXM4-40GB", "-x-", strings.Repeat("ab ", 40), "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if errs := content.IsLabelValue(SanitizeValue(s)); len(errs) > 0 {
			t.Fatalf("SanitizeValue(%q) = %q: %v", s, SanitizeValue(s), errs)
		}
	})
}

// TestLabelsValid checks every label of every fixture is a valid label.
func TestLabelsValid(t *testing.T) {
	for name, inv := range map[string]*discovery.Inventory{
		"a100-mixed": a100MixedMIG(), "a100-all-mig": a100AllMIG(), "h100": h100(), "heterogeneous": heterogeneous(),
	} {
		for _, plan := range []*plan.Plan{nil, mixedPlan(inv), singlePlan(inv), perModelPlan(inv)} {
			for k, v := range Labels(inv, plan, LabelOptions{Machine: "Some Machine (rev 2)", Timestamp: time.Unix(1, 0)}) {
				if errs := content.IsLabelKey(k); len(errs) > 0 {
					t.Errorf("%s: key %q: %v", name, k, errs)
				}
				if errs := content.IsLabelValue(v); len(errs) > 0 {
					t.Errorf("%s: %s=%q: %v", name, k, v, errs)
				}
			}
		}
	}
}

func TestLabelsNoGPUs(t *testing.T) {
	for _, inv := range []*discovery.Inventory{nil, inventory()} {
		got := Labels(inv, &plan.Plan{}, LabelOptions{Timestamp: time.Now(), Machine: "x"})
		if got == nil || len(got) != 0 {
			t.Errorf("Labels(no GPUs) = %v, want an empty, non-nil map", got)
		}
	}
}

func TestLabelsDeterministic(t *testing.T) {
	inv := a100MixedMIG()
	plan := mixedPlan(inv)
	first := Labels(inv, plan, LabelOptions{})
	for range 20 {
		if got := Labels(inv, plan, LabelOptions{}); !maps.Equal(got, first) {
			t.Fatalf("Labels changed between calls:\n%v\n%v", got, first)
		}
	}
}

// TestLabelsChoices checks single labels for the choices documented on
// Labels.
func TestLabelsChoices(t *testing.T) {
	tied := inventory(gpu(0, "NVIDIA H100 80GB HBM3"), gpu(1, "NVIDIA L40S"), gpu(2, "NVIDIA L40S"), gpu(3, "NVIDIA H100 80GB HBM3"))
	migOnly := inventory(withMIG(gpu(0, "NVIDIA A100-SXM4-40GB"), "1g.5gb"), withMIG(gpu(1, "NVIDIA A100-SXM4-40GB"), "2g.10gb"))
	mpsOnMIG := a100MixedMIG()
	mpsPlan := sharedPlan(mpsOnMIG, plan.SharingMPS, 2)
	// A resource that mixes profiles: two 1g.5gb and one 3g.20gb.
	mixedResource := planFor(a100MixedMIG(), func(g *discovery.GPU, m *discovery.MIGDevice) (string, plan.Sharing) {
		if m != nil && g.Index == 0 && m.Profile != "2g.10gb" {
			return "example.com/small", plan.Sharing{}
		}
		return "", plan.Sharing{}
	})

	tests := []struct {
		name string
		inv  *discovery.Inventory
		plan *plan.Plan
		opts LabelOptions
		want map[string]string // "" value: label must be absent
	}{
		{
			name: "tie goes to lowest index",
			inv:  tied,
			want: map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "2"},
		},
		{
			name: "no rules: no per-resource labels",
			inv:  h100(),
			want: map[string]string{"nvidia.com/gpu.replicas": "", "nvidia.com/gpu.sharing-strategy": "", "nvidia.com/mig.strategy": "", "nvidia.com/mps.capable": "false"},
		},
		{
			name: "MIG devices exposed by no resource (strategy none: no label)",
			inv:  migOnly,
			plan: &plan.Plan{},
			want: map[string]string{"nvidia.com/mig.strategy": "", "nvidia.com/gpu.replicas": "0", "nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/gpu.count": "2"},
		},
		{
			name: "MPS with a MIG-enabled GPU is not MPS capable",
			inv:  mpsOnMIG,
			plan: mpsPlan,
			want: map[string]string{"nvidia.com/mps.capable": "false", "nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "2"},
		},
		{
			name: "replicas 1 is not shared",
			inv:  h100(),
			plan: sharedPlan(h100(), plan.SharingTimeSlicing, 1),
			want: map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/gpu.replicas": "1"},
		},
		{
			name: "resource described by its most common profile",
			inv:  a100MixedMIG(),
			plan: mixedResource,
			want: map[string]string{"example.com/small.count": "3", "example.com/small.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "example.com/small.memory": "4864"},
		},
		{
			name: "driver without revision",
			inv:  &discovery.Inventory{DriverVersion: "550.54", CUDADriverVersion: "12.4", GPUs: h100().GPUs},
			want: map[string]string{"nvidia.com/cuda.driver-version.revision": "", "nvidia.com/cuda.driver-version.full": "550.54", "nvidia.com/cuda.driver.rev": ""},
		},
		{
			name: "unparsable versions give no version labels",
			inv:  &discovery.Inventory{DriverVersion: discovery.Unknown, CUDADriverVersion: "", GPUs: h100().GPUs},
			want: map[string]string{"nvidia.com/cuda.driver-version.full": "", "nvidia.com/cuda.runtime-version.full": ""},
		},
		{
			name: "timestamp only on request",
			inv:  h100(),
			opts: LabelOptions{Timestamp: time.Unix(1234, 0)},
			want: map[string]string{"nvidia.com/gfd.timestamp": "1234"},
		},
		{
			name: "family as discovery names it (its table maps compute capabilities)",
			inv:  &discovery.Inventory{GPUs: []discovery.GPU{{Product: "X", Family: "blackwell", ComputeMajor: 10, MemoryMiB: 1}}},
			want: map[string]string{"nvidia.com/gpu.family": "blackwell"},
		},
		{
			name: "no compute capability: no family or compute labels",
			inv:  &discovery.Inventory{GPUs: []discovery.GPU{{Product: "X", Family: "ampere"}}},
			want: map[string]string{"nvidia.com/gpu.family": "", "nvidia.com/gpu.compute.major": "", "nvidia.com/gpu.memory": ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Labels(tt.inv, tt.plan, tt.opts)
			for k, want := range tt.want {
				v, ok := got[k]
				switch {
				case want == "" && k != "nvidia.com/cuda.driver-version.revision" && k != "nvidia.com/cuda.driver.rev":
					if ok {
						t.Errorf("%s=%q present, want absent", k, v)
					}
				case !ok:
					t.Errorf("%s absent, want %q", k, want)
				case v != want:
					t.Errorf("%s=%q, want %q", k, v, want)
				}
			}
		})
	}
}

func TestLabelsDropsInvalidKeys(t *testing.T) {
	inv := h100()
	long := "example.com/" + strings.Repeat("a", 60)
	plan := planFor(inv, func(*discovery.GPU, *discovery.MIGDevice) (string, plan.Sharing) { return long, plan.Sharing{} })
	var dropped []string
	got := Labels(inv, plan, LabelOptions{OnDropped: func(key, reason string) {
		if reason == "" {
			t.Errorf("dropped %s without a reason", key)
		}
		dropped = append(dropped, key)
	}})
	if len(dropped) == 0 {
		t.Fatal("no label dropped for a 60-character resource name")
	}
	for _, k := range dropped {
		if _, ok := got[k]; ok {
			t.Errorf("dropped key %s is in the labels", k)
		}
	}
	if got["nvidia.com/gpu.product"] != "NVIDIA-H100-80GB-HBM3" {
		t.Errorf("node labels missing after dropping resource labels: %v", got)
	}
}

func TestMachineType(t *testing.T) {
	path := filepath.Join(t.TempDir(), "product_name")
	if err := os.WriteFile(path, []byte("DGX A100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := MachineType(path)
	if err != nil || got != "DGX A100" {
		t.Errorf("MachineType = %q, %v; want DGX A100", got, err)
	}
	if _, err := MachineType(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("MachineType(missing) error = %v, want one naming the file", err)
	}
}

func BenchmarkLabels(b *testing.B) {
	inv := a100MixedMIG()
	plan := mixedPlan(inv)
	b.ReportAllocs()
	for b.Loop() {
		Labels(inv, plan, LabelOptions{})
	}
}

// FuzzValidLabelKey checks validLabelKey agrees with apimachinery.
func FuzzValidLabelKey(f *testing.F) {
	for _, s := range []string{"nvidia.com/gpu.count", "a", "/a", "a/", "a/b/c", "Example.com/x", "e-.com/x", "-e.com/x",
		"e..com/x", "nvidia.com/mig-1g.10gb+me.count", "x_y", "_x", strings.Repeat("a", 64), "example.com/" + strings.Repeat("a", 63)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		want := len(content.IsLabelKey(key)) == 0
		if got := validLabelKey(key) == ""; got != want {
			t.Fatalf("validLabelKey(%q) valid=%v, apimachinery says %v (%v)", key, got, want, content.IsLabelKey(key))
		}
	})
}
