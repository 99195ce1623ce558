package draclass_test

import (
	"strings"
	"testing"

	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/draclass"
)

// expand writes the short forms of the expected selectors in full: D for
// the driver test, A. for featureplug's attributes, C. for its capacities.
func expand(s string) string {
	s = strings.ReplaceAll(s, "A.", `device.attributes["gpu.featureplug.io"].`)
	s = strings.ReplaceAll(s, "C.", `device.capacity["gpu.featureplug.io"].`)
	return strings.Replace(s, "D &&", `device.driver == "gpu.featureplug.io" &&`, 1)
}

// wantClass is a hand-written class of a bundled rules file.
type wantClass struct {
	name, resource, selector string
	fallback                 string // a part of Class.Fallback; "" for a compiled class
}

const (
	wholeGPU = `A.type == "gpu" && !A.migEnabled`
	notH100  = `!A.product.matches("H100")`
	notA100  = `!(C.memory.compareTo(quantity("70000Mi")) > 0 && A.product.matches("A100"))`
)

func TestBundledClasses(t *testing.T) {
	for _, c := range []struct {
		file string
		want []wantClass
		// none are resource names that must get no class: every device
		// that template would name is claimed by an earlier rule.
		none []string
		// only, when set, is the number of classes.
		only int
	}{
		{file: "none", only: 1, want: []wantClass{
			{"gpu.nvidia.com.featureplug.io", "nvidia.com/gpu", `D && ` + wholeGPU, ""},
		}},
		{file: "single", only: 1, want: []wantClass{
			{"gpu.nvidia.com.featureplug.io", "nvidia.com/gpu", `D && ((` + wholeGPU + `) || A.type == "mig")`, ""},
		}},
		{file: "mixed", want: []wantClass{
			{"gpu.nvidia.com.featureplug.io", "nvidia.com/gpu", `D && ` + wholeGPU, ""},
			{"mig-1g.10gb.me.nvidia.com.featureplug.io", "nvidia.com/mig-1g.10gb.me", `D && A.type == "mig" && A.profile == "1g.10gb+me"`, ""},
			{"mig-3g.40gb.nvidia.com.featureplug.io", "nvidia.com/mig-3g.40gb", `D && A.type == "mig" && A.profile == "3g.40gb"`, ""},
			{"mig-7g.80gb.nvidia.com.featureplug.io", "nvidia.com/mig-7g.80gb", `D && A.type == "mig" && A.profile == "7g.80gb"`, ""},
		}},
		{file: "per-model", none: []string{"nvidia.com/a100-sxm4-80gb", "nvidia.com/h100-80gb-hbm3", "nvidia.com/h100-nvl"}, want: []wantClass{
			{"h100.shared.nvidia.com.featureplug.io", "nvidia.com/h100.shared", `D && ` + wholeGPU + ` && A.product.matches("H100")`, ""},
			{"a100-80gb.nvidia.com.featureplug.io", "nvidia.com/a100-80gb",
				`D && ` + wholeGPU + ` && C.memory.compareTo(quantity("70000Mi")) > 0 && A.product.matches("A100") && ` + notH100, ""},
			{"a100-sxm4-40gb.nvidia.com.featureplug.io", "nvidia.com/a100-sxm4-40gb",
				`D && ` + wholeGPU + ` && ` + notH100 + ` && ` + notA100 + ` && A.product == "NVIDIA A100-SXM4-40GB"`, ""},
			{"h200.nvidia.com.featureplug.io", "nvidia.com/h200", `D && ` + wholeGPU + ` && ` + notH100 + ` && ` + notA100 + ` && A.product == "NVIDIA H200"`, ""},
			{"mig-1g.18gb.me.nvidia.com.featureplug.io", "nvidia.com/mig-1g.18gb.me", `D && A.type == "mig" && A.profile == "1g.18gb+me"`, ""},
		}},
		{file: "../../manifests/examples/rules/per-model-time-slicing.yaml", none: []string{"nvidia.com/l4"}, want: []wantClass{
			{"l4.shared.nvidia.com.featureplug.io", "nvidia.com/l4.shared", `D && ` + wholeGPU + ` && A.product == "NVIDIA L4"`, ""},
			{"l40s.nvidia.com.featureplug.io", "nvidia.com/l40s", `D && ` + wholeGPU + ` && !(A.product == "NVIDIA L4") && A.product == "NVIDIA L40S"`, ""},
			{"mig-2g.20gb.nvidia.com.featureplug.io", "nvidia.com/mig-2g.20gb", `D && A.type == "mig" && A.profile == "2g.20gb"`, ""},
		}},
		{file: "../../manifests/examples/rules/mixed-mig.yaml", none: []string{"nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.5gb"}, want: []wantClass{
			{"gpu.nvidia.com.featureplug.io", "nvidia.com/gpu", `D && ` + wholeGPU, ""},
			{"mig-1g.10gb.shared.nvidia.com.featureplug.io", "nvidia.com/mig-1g.10gb.shared", `D && A.type == "mig" && A.slicesGi == 1 && A.profile == "1g.10gb"`, ""},
			{"mig-1g.10gb.me.shared.nvidia.com.featureplug.io", "nvidia.com/mig-1g.10gb.me.shared", `D && A.type == "mig" && A.slicesGi == 1 && A.profile == "1g.10gb+me"`, ""},
			{"mig-3g.40gb.nvidia.com.featureplug.io", "nvidia.com/mig-3g.40gb", `D && A.type == "mig" && !(A.slicesGi == 1) && A.profile == "3g.40gb"`, ""},
		}},
		{file: "../../manifests/examples/rules/mps-inference-pool.yaml", want: []wantClass{
			{"h100.mps.nvidia.com.featureplug.io", "nvidia.com/h100.mps", `D && A.resource == "nvidia.com/h100.mps"`, `nodeSelector: a DeviceClass cannot select nodes`},
			{"gpu.nvidia.com.featureplug.io", "nvidia.com/gpu", `D && A.resource == "nvidia.com/gpu"`, `earlier rules[0] "h100-inference-mps"`},
			{"mig-3g.40gb.nvidia.com.featureplug.io", "nvidia.com/mig-3g.40gb", `D && A.type == "mig" && A.profile == "3g.40gb"`, ""},
		}},
	} {
		t.Run(c.file, func(t *testing.T) {
			rs, err := rules.Load(c.file)
			if err != nil {
				t.Fatal(err)
			}
			res, err := draclass.Compile(rs, catalogNodes(t))
			if err != nil {
				t.Fatal(err)
			}
			if c.only > 0 && len(res.Classes) != c.only {
				t.Errorf("%d classes, want %d", len(res.Classes), c.only)
			}
			for _, w := range c.want {
				got, ok := res.Class(w.resource)
				if !ok {
					t.Errorf("no class for %s", w.resource)
					continue
				}
				if got.Name != w.name {
					t.Errorf("%s: class name %q, want %q", w.resource, got.Name, w.name)
				}
				if want := expand(w.selector); got.Selector != want {
					t.Errorf("%s: selector\n got %s\nwant %s", w.resource, got.Selector, want)
				}
				if (w.fallback == "") != (got.Fallback == "") || !strings.Contains(got.Fallback, w.fallback) {
					t.Errorf("%s: fallback %q, want one with %q", w.resource, got.Fallback, w.fallback)
				}
				o := got.Object
				if o.APIVersion != "resource.k8s.io/v1" || o.Kind != "DeviceClass" || o.Name != w.name ||
					o.Spec.ExtendedResourceName == nil || *o.Spec.ExtendedResourceName != w.resource ||
					len(o.Spec.Selectors) != 1 || o.Spec.Selectors[0].CEL == nil || o.Spec.Selectors[0].CEL.Expression != got.Selector ||
					o.Labels[draclass.LabelManagedBy] != "featureplug" {
					t.Errorf("%s: object %+v", w.resource, o)
				}
				if w.fallback != "" && !strings.Contains(o.Annotations[draclass.AnnotationSelector], w.fallback) {
					t.Errorf("%s: annotation %s = %q, want the fallback's reason", w.resource, draclass.AnnotationSelector, o.Annotations[draclass.AnnotationSelector])
				}
			}
			for _, name := range c.none {
				if _, ok := res.Class(name); ok {
					t.Errorf("class for %s, which no device reaches", name)
				}
			}
		})
	}
}

func TestNodeSelectorAnnotation(t *testing.T) {
	rs, err := rules.Load("../../manifests/examples/rules/mps-inference-pool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := draclass.Compile(rs, catalogNodes(t))
	if err != nil {
		t.Fatal(err)
	}
	c, ok := res.Class("nvidia.com/h100.mps")
	if !ok {
		t.Fatal("no class for nvidia.com/h100.mps")
	}
	want := "h100-inference-mps: example.com/pool=inference (a DeviceClass cannot select nodes)"
	if got := c.Object.Annotations[draclass.AnnotationNodeSelectors]; got != want {
		t.Errorf("annotation %s = %q, want %q", draclass.AnnotationNodeSelectors, got, want)
	}
	var warned []string
	for _, w := range res.Warnings {
		warned = append(warned, w.Error())
	}
	all := strings.Join(warned, "\n")
	for _, want := range []string{`rules[0] "h100-inference-mps": nodeSelector:`, `(have "example.com/pool=inference")`, `rules[1] "gpu":`} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings do not say %q:\n%s", want, all)
		}
	}
}

func TestFallbackWarningsNameRuleFieldValue(t *testing.T) {
	rs, err := rules.Load("testdata/fallback.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := draclass.Compile(rs, catalogNodes(t))
	if err != nil {
		t.Fatal(err)
	}
	var warned []string
	for _, w := range res.Warnings {
		warned = append(warned, w.Error())
	}
	all := strings.Join(warned, "\n")
	for _, want := range []string{
		`testdata/fallback.yaml:6: rules[0] "branded-mig": matchFeatures[0].matchExpressions.brand: no CEL form: nvidia.gpu.brand has no DRA form on a mig device`,
		`(have In [Nvidia])`,
		`rules[2] "by-name": matchFeatures[0].matchName: no CEL form`,
		`rules[1] "mig": earlier rules[0] "branded-mig"`,
		`rules[3] "pool": nodeSelector:`,
		`rules[4] "gpu": earlier rules[2] "by-name"`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings do not say %q:\n%s", want, all)
		}
	}
	for _, c := range res.Classes {
		if c.Fallback == "" || c.Selector != expand(`D && A.resource == "`+c.Resource+`"`) {
			t.Errorf("class %s: fallback %q, selector %s; want the resource attribute", c.Name, c.Fallback, c.Selector)
		}
	}
	if len(res.Classes) != 5 {
		t.Errorf("%d classes, want 5", len(res.Classes))
	}
}

func TestClassName(t *testing.T) {
	for in, want := range map[string]string{
		"example.com/a100-80gb":     "a100-80gb.example.com.featureplug.io",
		"nvidia.com/mig-1g.10gb.me": "mig-1g.10gb.me.nvidia.com.featureplug.io",
		"nvidia.com/gpu":            "gpu.nvidia.com.featureplug.io",
		"example.com/Big_GPU":       "big-gpu.example.com.featureplug.io",
		"example.com/a..b":          "",
		"nodomain":                  "",
	} {
		got, err := draclass.ClassName(in)
		if (err != nil) != (want == "") || got != want {
			t.Errorf("ClassName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestServeDevicePluginGetsNoClass(t *testing.T) {
	rs, err := rules.Parse("serve.yaml", []byte(`apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: kept
  devices: gpu
  matchFeatures:
  - feature: nvidia.gpu
    matchExpressions:
      product: {op: In, value: ["NVIDIA L4"]}
  resource: example.com/l4
  serve: device-plugin
- name: moved
  devices: gpu
  resource: example.com/gpu
  serve: dra
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := draclass.Compile(rs, catalogNodes(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.DevicePlugin) != 1 || res.DevicePlugin[0] != "example.com/l4" {
		t.Errorf("DevicePlugin = %v, want [example.com/l4]", res.DevicePlugin)
	}
	if _, ok := res.Class("example.com/l4"); ok {
		t.Errorf("a class for a resource every rule serves through the device plugin")
	}
	c, ok := res.Class("example.com/gpu")
	if !ok {
		t.Fatal("no class for example.com/gpu")
	}
	// The device-plugin rule still claims L4s first.
	want := expand(`D && ` + wholeGPU + ` && !(A.product == "NVIDIA L4")`)
	if c.Serve != "dra" || c.Selector != want {
		t.Errorf("class = serve %q, selector %s; want dra, %s", c.Serve, c.Selector, want)
	}
}
