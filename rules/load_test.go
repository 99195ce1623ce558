package rules

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// header starts every rules file in the tests; rules begin on line 4.
const header = "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n"

func TestBuiltinsLoadCleanly(t *testing.T) {
	names := BuiltinNames()
	if want := []string{"mixed", "none", "per-model", "single"}; !slices.Equal(names, want) {
		t.Fatalf("BuiltinNames() = %v, want %v", names, want)
	}
	for _, name := range names {
		rs, err := Load(name)
		if err != nil {
			t.Fatalf("Load(%q): %v", name, err)
		}
		if w := rs.Warnings(); len(w) > 0 {
			t.Errorf("Load(%q) warns: %v", name, w)
		}
		if got, want := rs.Source(), "builtin:"+name; got != want {
			t.Errorf("Source() = %q, want %q", got, want)
		}
	}
	if got := Default().RuleNames(); !slices.Equal(got, []string{"gpu", "vfio"}) {
		t.Errorf("Default().RuleNames() = %v, want [gpu vfio]", got)
	}
}

func TestLoadPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mixed")
	if err := os.WriteFile(file, []byte(header+"- name: local\n  devices: gpu\n  resource: example.com/gpu\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if got := rs.RuleNames(); !slices.Equal(got, []string{"local"}) {
		t.Errorf("Load(%q) rules = %v, want [local]", file, got)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("Load(missing) error = %v, want one naming the file", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte(header+"# "+strings.Repeat("x", MaxFileSize)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load(big) error = %v, want a size error", err)
	}
}

// TestParseErrors checks that every validation error names the file, line,
// rule, field and value.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		want []string // substrings of the first error
	}{
		{"invalid yaml", header + "- name: [a\n", []string{"r.yaml: ", "invalid YAML"}},
		{"two documents", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n---\nkind: x\n", []string{"r.yaml:7: ", "one YAML document"}},
		{"api version", "apiVersion: v1\nkind: ResourceRules\nserveNothing: true\n", []string{"r.yaml:1: ", "apiVersion", `"featureplug.io/v1alpha1"`, `(have "v1")`}},
		{"kind", "apiVersion: featureplug.io/v1alpha1\nkind: Rules\nserveNothing: true\n", []string{"r.yaml:2: ", "kind", `(have "Rules")`}},
		{"unknown top field", header + "- name: a\n  devices: gpu\n  resource: a.com/b\nspec: {}\n", []string{"r.yaml:7: ", `unknown field "spec"`}},
		{"unknown rule field", header + "- name: a\n  device: gpu\n  resource: a.com/b\n", []string{"r.yaml:5: ", `rules[0] "a"`, `unknown field "device"`}},
		{"unknown sharing field", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  sharing:\n    strategy: time-slicing\n    replica: 2\n", []string{"r.yaml:9: ", `rules[0] "a"`, "sharing: ", `unknown field "replica"`}},
		{"unknown expression field", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  matchFeatures:\n  - feature: nvidia.gpu\n    matchExpressions:\n      product: {op: In, values: [x]}\n", []string{"r.yaml:10: ", `rules[0] "a"`, "matchFeatures[0].matchExpressions.product", `unknown field "values"`}},
		{"wrong type", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n- name: b\n  devices: gpu\n  resource: a.com/c\n  sharing:\n    strategy: time-slicing\n    replicas: four\n", []string{"r.yaml:12: ", `rules[1] "b"`, "sharing.replicas", "must be an integer, not string", "(have four)"}},
		{"duplicate key", header + "- name: a\n  devices: gpu\n  devices: mig\n  resource: a.com/b\n", []string{"r.yaml:6: ", `rules[0] "a": "devices" is given twice (first on line 5)`}},
		{"name missing", header + "- devices: gpu\n  resource: a.com/b\n", []string{"r.yaml:4: ", "rules[0]: name: required"}},
		{"name duplicate", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n- name: a\n  devices: mig\n  resource: a.com/c\n", []string{"r.yaml:7: ", `rules[1] "a": name: name already used by rules[0]`, `(have "a")`}},
		{"devices missing", header + "- name: a\n  resource: a.com/b\n", []string{"r.yaml:4: ", `rules[0] "a": devices: required`}},
		{"devices bad", header + "- name: a\n  devices: gpus\n  resource: a.com/b\n", []string{"r.yaml:5: ", `rules[0] "a": devices: must be "gpu", "mig" or "vfio"`, `(have "gpus")`}},
		{"resource missing", header + "- name: a\n  devices: gpu\n", []string{"r.yaml:4: ", `rules[0] "a": resource: required`}},
		{"resource without domain", header + "- name: a\n  devices: gpu\n  resource: gpu\n", []string{"r.yaml:6: ", `rules[0] "a": resource: "gpu" is not an extended resource name`, "needs a domain"}},
		{"resource kubernetes.io", header + "- name: a\n  devices: gpu\n  resource: kubernetes.io/gpu\n", []string{"r.yaml:6: ", "resource: ", `"kubernetes.io/gpu"`, "reserved"}},
		{"resource k8s.io subdomain", header + "- name: a\n  devices: gpu\n  resource: x.k8s.io/gpu\n", []string{"r.yaml:6: ", `"x.k8s.io/gpu"`, `domain "x.k8s.io" is reserved`}},
		{"resource too long", header + "- name: a\n  devices: gpu\n  resource: a.com/" + strings.Repeat("g", 64) + "\n", []string{"r.yaml:6: ", "resource: ", strings.Repeat("g", 64), "63"}},
		{"resource bad characters", header + "- name: a\n  devices: gpu\n  resource: a.com/A100 GPU\n", []string{"r.yaml:6: ", `"a.com/A100 GPU"`, "alphanumeric"}},
		{"resource bad domain", header + "- name: a\n  devices: gpu\n  resource: A_B/gpu\n", []string{"r.yaml:6: ", `"A_B/gpu"`}},
		{"template syntax", header + "- name: a\n  devices: gpu\n  resource: 'a.com/{{ .product'\n", []string{"r.yaml:6: ", `rules[0] "a": resource: invalid template`, `(have "a.com/{{ .product")`}},
		{"template unknown attribute", header + "- name: a\n  devices: mig\n  resource: 'a.com/{{ .prodcut }}'\n", []string{"r.yaml:6: ", "resource: template fails on a sample mig device", `"prodcut"`, `(have "a.com/{{ .prodcut }}")`}},
		{"template unknown function", header + "- name: a\n  devices: gpu\n  resource: 'a.com/{{ .product | title }}'\n", []string{"r.yaml:6: ", "invalid template", `"title" not defined`}},
		{"template recursion", header + "- name: a\n  devices: gpu\n  resource: '{{define \"x\"}}{{template \"x\"}}{{end}}{{template \"x\"}}'\n", []string{"r.yaml:6: ", "may not define other templates"}},
		{"template loop", header + "- name: a\n  devices: gpu\n  resource: 'a.com/{{ range 1000000000 }}x{{ end }}'\n", []string{"r.yaml:6: ", "may not use {{range}}"}},
		{"template too long", header + "- name: a\n  devices: gpu\n  resource: 'a.com/{{ .product | replace \"\" \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\" }}'\n", []string{"r.yaml:6: ", "template fails on a sample gpu device", "longer than 1024 bytes"}},
		{"template output too long", header + "- name: a\n  devices: gpu\n  resource: 'a.com/{{ printf \"%0999999d\" 1 }}'\n", []string{"r.yaml:6: ", "longer than 1024 bytes"}},
		{"strategy bad", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  sharing: {strategy: timeslicing, replicas: 2}\n", []string{"r.yaml:7: ", "sharing.strategy", `(have "timeslicing")`}},
		{"replicas zero", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  sharing:\n    strategy: time-slicing\n    replicas: 0\n", []string{"r.yaml:9: ", `rules[0] "a": sharing.replicas: must be at least 1 (have 0)`}},
		{"replicas negative", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  sharing: {strategy: mps, replicas: -2}\n", []string{"sharing.replicas: must be at least 1 (have -2)"}},
		{"replicas missing", header + "- name: a\n  devices: mig\n  resource: a.com/b\n  sharing: {strategy: time-slicing}\n", []string{"r.yaml:7: ", "sharing.replicas: required for strategy time-slicing"}},
		{"replicas without strategy", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  sharing: {replicas: 4}\n", []string{"sharing.replicas: strategy none shares nothing", "(have 4)"}},
		{"mps on mig", header + "- name: a\n  devices: mig\n  resource: a.com/b\n  sharing: {strategy: mps, replicas: 2}\n", []string{"r.yaml:7: ", `rules[0] "a": sharing.strategy: mps is only for devices: gpu`, `(have "mps")`}},
		{"mps settings without mps", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  sharing: {strategy: time-slicing, replicas: 2, mps: {activeThreadPercentage: 50}}\n", []string{"sharing.mps: only for strategy mps (have strategy time-slicing)"}},
		{"mps threads", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  sharing: {strategy: mps, replicas: 2, mps: {activeThreadPercentage: 150}}\n", []string{"sharing.mps.activeThreadPercentage: must be between 0 and 100", "(have 150)"}},
		{"mps memory", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  sharing: {strategy: mps, replicas: 2, mps: {pinnedMemoryLimitMiB: -5}}\n", []string{"sharing.mps.pinnedMemoryLimitMiB: must be between 0 and 16777216", "(have -5)"}},
		{"one resource two sharings", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n- name: b\n  devices: mig\n  resource: a.com/b\n  sharing: {strategy: time-slicing, replicas: 2}\n", []string{"r.yaml:10: ", `rules[1] "b": sharing: resource "a.com/b" is also given by rules[0] "a" with sharing none`, "(have time-slicing x2)"}},
		{"feature missing", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  matchFeatures:\n  - matchExpressions: {product: {op: Exists}}\n", []string{"r.yaml:8: ", "matchFeatures[0].feature: required"}},
		{"null expression", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  matchFeatures:\n  - feature: nvidia.gpu\n    matchExpressions: {product: }\n", []string{"r.yaml:9: ", "matchFeatures[0].matchExpressions.product: an expression needs at least op (have null)"}},
		{"op unknown", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  matchFeatures:\n  - feature: nvidia.gpu\n    matchExpressions: {product: {op: Matches, value: [x]}}\n", []string{"r.yaml:9: ", `rules[0] "a": matchFeatures[0].matchExpressions.product: invalid expression: invalid Op "Matches"`, "(have Matches [x])"}},
		{"In without values", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  matchFeatures:\n  - feature: nvidia.gpu\n    matchExpressions: {product: {op: In}}\n", []string{"matchFeatures[0].matchExpressions.product: invalid expression", "must be non-empty", "(have In)"}},
		{"Exists with values", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  matchFeatures:\n  - feature: nvidia.gpu\n    matchExpressions: {product: {op: Exists, value: [x]}}\n", []string{"matchExpressions.product: invalid expression", "must be empty", "(have Exists [x])"}},
		{"Gt two values", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  matchFeatures:\n  - feature: nvidia.gpu\n    matchExpressions: {memory: {op: Gt, value: [1, 2]}}\n", []string{"matchExpressions.memory: invalid expression", "exactly one element", "(have Gt [1, 2])"}},
		{"Gt not a number", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  matchFeatures:\n  - feature: nvidia.gpu\n    matchExpressions: {memory: {op: Gt, value: [40GB]}}\n", []string{"matchExpressions.memory: invalid expression", `not a number "40GB"`, "(have Gt 40GB)"}},
		{"GtLt reversed", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  matchFeatures:\n  - feature: nvidia.gpu\n    matchExpressions: {memory: {op: GtLt, value: [9, 3]}}\n", []string{"matchExpressions.memory: invalid expression", "less than", "(have GtLt [9, 3])"}},
		{"bad regexp", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  matchAny:\n  - matchFeatures:\n    - feature: nvidia.gpu\n      matchExpressions: {product: {op: InRegexp, value: [\"A100(\"]}}\n", []string{"r.yaml:10: ", "matchAny[0].matchFeatures[0].matchExpressions.product: invalid expression", "valid regexps", "(have InRegexp [A100(])"}},
		{"bad type", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  matchFeatures:\n  - feature: nvidia.driver\n    matchExpressions: {version: {op: Gt, value: [\"550\"], type: semver}}\n", []string{"matchExpressions.version: invalid expression", `'type' field only accepts "version"`, "(have Gt 550 (semver))"}},
		{"Gt on a product", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  matchFeatures:\n  - feature: nvidia.gpu\n    matchExpressions: {product: {op: Gt, value: [\"100\"]}}\n", []string{"r.yaml:9: ", "matchExpressions.product: op Gt cannot compare nvidia.gpu.product", `"NVIDIA A100-SXM4-40GB"`, "(have Gt 100)"}},
		{"Ge on the driver version", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  matchFeatures:\n  - feature: nvidia.driver\n    matchExpressions: {version: {op: Ge, value: [\"550\"]}}\n", []string{"matchExpressions.version: op Ge cannot compare nvidia.driver.version", "add type: version", "(have Ge 550)"}},
		{"matchName invalid", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  matchFeatures:\n  - feature: nvidia.gpu\n    matchName: {op: InRegexp, value: [\"(\"]}\n", []string{"r.yaml:9: ", "matchFeatures[0].matchName: invalid expression", "(have InRegexp [(])"}},
		{"node selector", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  nodeSelector:\n    matchExpressions:\n    - {key: pool, operator: Near, values: [a]}\n", []string{"r.yaml:8: ", `rules[0] "a": nodeSelector: `, `"Near"`}},
		{"node selector label", header + "- name: a\n  devices: gpu\n  resource: a.com/b\n  nodeSelector:\n    matchLabels: {\"bad key!\": x}\n", []string{"r.yaml:8: ", "nodeSelector: ", "bad key!"}},
	}
	// A misspelt field also leaves the field it meant unset.
	cascades := map[string]bool{"unknown rule field": true, "unknown sharing field": true, "unknown expression field": true}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("r.yaml", []byte(tt.file))
			if err == nil {
				t.Fatalf("Parse succeeded, want an error with %q", tt.want)
			}
			errs := splitErrors(err)
			if len(errs) != 1 && !cascades[tt.name] {
				t.Errorf("Parse returned %d errors, want 1:\n%v", len(errs), err)
			}
			for _, w := range tt.want {
				if !strings.Contains(errs[0].Error(), w) {
					t.Errorf("first error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

// splitErrors undoes errors.Join.
func splitErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func TestParseReportsEveryError(t *testing.T) {
	file := header + `- name: a
  devices: gpu
  resource: gpu
- name: a
  devices: mig
  resource: a.com/b
  sharing: {strategy: time-slicing, replicas: 0}
- name: c
  devices: gpus
  resource: a.com/c
  matchFeatures:
  - feature: nvidia.gpu
    matchExpressions: {memory: {op: Gt, value: [x]}}
`
	_, err := Parse("r.yaml", []byte(file))
	errs := splitErrors(err)
	want := []string{
		`r.yaml:6: rules[0] "a": resource: "gpu" is not an extended resource name`,
		`r.yaml:10: rules[1] "a": sharing.replicas: must be at least 1 (have 0)`,
		`r.yaml:7: rules[1] "a": name: name already used by rules[0]`,
		`r.yaml:12: rules[2] "c": devices: must be "gpu", "mig" or "vfio" (have "gpus")`,
		`r.yaml:16: rules[2] "c": matchFeatures[0].matchExpressions.memory: invalid expression`,
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i].Error(), w) {
			t.Errorf("error %d = %q, want it to start with %q", i, errs[i], w)
		}
		var e *Error
		if !errors.As(errs[i], &e) || e.Source != "r.yaml" {
			t.Errorf("error %d is not an *Error from r.yaml: %#v", i, errs[i])
		}
	}
}

func TestParseWarnings(t *testing.T) {
	tests := []struct {
		name string
		rule string
		want string
	}{
		{"unknown feature", "  matchFeatures:\n  - feature: nvidia.gpus\n    matchExpressions: {product: {op: Exists}}\n",
			`r.yaml:8: rules[0] "a": matchFeatures[0].feature: featureplug never publishes this feature, so the term never matches; did you mean "nvidia.gpu"?`},
		{"unknown attribute", "  matchFeatures:\n  - feature: nvidia.gpu\n    matchExpressions: {temperature: {op: Exists}}\n",
			`r.yaml:9: rules[0] "a": matchFeatures[0].matchExpressions.temperature: featureplug never publishes "temperature" in nvidia.gpu, so the expression never matches (it publishes`},
		{"misspelt attribute", "  matchFeatures:\n  - feature: nvidia.gpu\n    matchExpressions: {productName: {op: Exists}}\n",
			`matchExpressions.productName: featureplug never publishes "productName" in nvidia.gpu, so the expression never matches; did you mean "product"?`},
		{"mig feature on a gpu rule", "  matchFeatures:\n  - feature: nvidia.mig\n    matchExpressions: {profile: {op: Exists}}\n",
			`matchFeatures[0].feature: a devices: gpu rule sees no nvidia.mig instance`},
		{"value op on a flag", "  matchFeatures:\n  - feature: nvidia.capabilities\n    matchExpressions: {mig: {op: In, value: [\"true\"]}}\n",
			`matchExpressions.mig: nvidia.capabilities.mig is a flag without a value: op In never matches it`},
		{"IsTrue on a string", "  matchFeatures:\n  - feature: nvidia.gpu\n    matchExpressions: {product: {op: IsTrue}}\n",
			`matchExpressions.product: nvidia.gpu.product is not true or false`},
		{"template gives an invalid name", "  resource: 'example.com/{{ .product }}'\n",
			`resource: on a sample gpu device (NVIDIA A100-SXM4-40GB) the template gives an invalid name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := header + "- name: a\n  devices: gpu\n"
			if !strings.Contains(tt.rule, "resource:") {
				file += "  resource: a.com/b\n"
			}
			rs, err := Parse("r.yaml", []byte(file+tt.rule))
			if err != nil {
				t.Fatal(err)
			}
			w := rs.Warnings()
			if len(w) != 1 || !strings.Contains(w[0], tt.want) {
				t.Errorf("Warnings() = %q, want one containing %q", w, tt.want)
			}
		})
	}
}

// TestServeNothing checks that a file without rules is an error unless it
// says serveNothing, which a file with rules must not say, and that the
// plan of a serveNothing file carries the intent.
func TestServeNothing(t *testing.T) {
	const top = "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\n"
	const rule = "- name: all\n  devices: gpu\n  resource: nvidia.com/gpu\n"
	const missing = `rules: missing: the file would serve no device and withdraw every resource (an emptied or truncated file looks like this); ` +
		`a file meant to serve nothing says serveNothing: true`
	for _, tc := range []struct {
		name, file string
		want       string // "" for valid
	}{
		{"rules missing", top, "r.yaml:1: " + missing},
		{"rules null (cut after rules:)", top + "rules:\n", "r.yaml:3: rules: empty: "},
		{"rules empty list", top + "rules: []\n", "r.yaml:3: rules: empty: "},
		{"empty file", "", "rules: missing: "},
		{"serveNothing false", top + "serveNothing: false\nrules: []\n", "rules: empty: "},
		{"serveNothing without rules", top + "serveNothing: true\n", ""},
		{"serveNothing with empty rules", top + "serveNothing: true\nrules: []\n", ""},
		{"serveNothing with rules", top + "serveNothing: true\nrules:\n" + rule,
			`r.yaml:3: serveNothing: says the file serves no device, but it has 1 rules: remove the rules or serveNothing (have true)`},
		{"serveNothing not a bool", top + "serveNothing: yes please\n", "serveNothing: must be true or false, not string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := Parse("r.yaml", []byte(tc.file))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Parse: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Parse: error %v, want one containing %q", err, tc.want)
			case tc.want != "":
				return
			}
			if w := rs.Warnings(); len(w) > 0 {
				t.Errorf("warnings %q", w)
			}
			p := mustPlan(t, rs, a100Node(), nil)
			if !p.ServeNothing || len(p.Resources) != 0 || len(p.Decisions) == 0 {
				t.Errorf("plan: ServeNothing %v, %d resources, %d decisions; want true, none, every device decided", p.ServeNothing, len(p.Resources), len(p.Decisions))
			}
		})
	}
	if p := mustPlan(t, mustParse(t, rule), a100Node(), nil); p.ServeNothing {
		t.Error("a plan of a file with rules says ServeNothing")
	}
}

func TestFixtures(t *testing.T) {
	rs, err := Load(filepath.Join("testdata", "pools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if w := rs.Warnings(); len(w) > 0 {
		t.Errorf("pools.yaml warns: %v", w)
	}
	p := mustPlan(t, rs, a100Node(), map[string]string{"pool": "inference"})
	want := map[string]string{"0": "nvidia.com/gpu", "1:0": "example.com/mig-ampere-3g", "1:1": "nvidia.com/mig-2g.10gb", "1:2": "nvidia.com/mig-1g.5gb"}
	if got := claims(p); !maps.Equal(got, want) {
		t.Errorf("pools.yaml claims %v, want %v", got, want)
	}

	_, err = Load(filepath.Join("testdata", "many-errors.yaml"))
	var lines []string
	for _, e := range splitErrors(err) {
		var pe *Error
		if !errors.As(e, &pe) {
			t.Fatalf("%v is not an *Error", e)
		}
		lines = append(lines, strconv.Itoa(pe.Line)+" "+pe.RuleName+" "+pe.Field)
	}
	want2 := []string{
		"8 typo sharing",
		"15 bad-expression matchFeatures[0].matchExpressions.memory",
		"16 bad-expression matchFeatures[0].matchExpressions.product",
		"19 bad-name resource",
		"21 typo devices",
		"23 typo sharing.replicas",
		"20 typo name",
	}
	if !slices.Equal(lines, want2) {
		t.Errorf("many-errors.yaml errors at\n%q\nwant\n%q\n%v", lines, want2, err)
	}
}
