package draclass

import (
	"testing"

	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/draattr"
)

// TestTreeRendersSimplified builds trees with and, or and not and checks
// what they render: constants folded, nested junctions flattened, repeats
// and double negations dropped, parentheses where CEL needs them (and
// around an && under ||, for the reader). Every rendering must compile.
func TestTreeRendersSimplified(t *testing.T) {
	a := attribute("a")
	b := equal(attribute("b"), intLit(1))
	c := method(attribute("c"), "matches", strLit(`x"y`))
	d := present{name: "d"}
	for _, tc := range []struct {
		name string
		tree node
		want string
	}{
		{"true", and(), "true"},
		{"false", or(), "false"},
		{"one term", and(celTrue, a), `device.attributes["gpu.featureplug.io"].a`},
		{"and decided by false", and(a, celFalse, b), "false"},
		{"or decided by true", or(a, celTrue), "true"},
		{"and drops true", and(a, celTrue, b), `device.attributes["gpu.featureplug.io"].a && device.attributes["gpu.featureplug.io"].b == 1`},
		{"nested and flattens", and(a, and(b, c)), `device.attributes["gpu.featureplug.io"].a && device.attributes["gpu.featureplug.io"].b == 1 && device.attributes["gpu.featureplug.io"].c.matches("x\"y")`},
		{"repeat dropped", and(b, and(a, b), a), `device.attributes["gpu.featureplug.io"].b == 1 && device.attributes["gpu.featureplug.io"].a`},
		{"or under and", and(a, or(b, c)), `device.attributes["gpu.featureplug.io"].a && (device.attributes["gpu.featureplug.io"].b == 1 || device.attributes["gpu.featureplug.io"].c.matches("x\"y"))`},
		{"and under or", or(and(a, b), c), `(device.attributes["gpu.featureplug.io"].a && device.attributes["gpu.featureplug.io"].b == 1) || device.attributes["gpu.featureplug.io"].c.matches("x\"y")`},
		{"nested or flattens", or(a, or(b, a)), `device.attributes["gpu.featureplug.io"].a || device.attributes["gpu.featureplug.io"].b == 1`},
		{"not folds constants", and(not(celFalse), not(not(celTrue))), "true"},
		{"not of a reference", not(a), `!device.attributes["gpu.featureplug.io"].a`},
		{"not of a call", not(c), `!device.attributes["gpu.featureplug.io"].c.matches("x\"y")`},
		{"not of a comparison", not(b), `!(device.attributes["gpu.featureplug.io"].b == 1)`},
		{"not of presence", not(d), `!("d" in device.attributes["gpu.featureplug.io"])`},
		{"not of and", not(and(a, b)), `!(device.attributes["gpu.featureplug.io"].a && device.attributes["gpu.featureplug.io"].b == 1)`},
		{"double negation", not(not(b)), `device.attributes["gpu.featureplug.io"].b == 1`},
		{"double negation flattens", and(a, not(not(and(b, c)))), `device.attributes["gpu.featureplug.io"].a && device.attributes["gpu.featureplug.io"].b == 1 && device.attributes["gpu.featureplug.io"].c.matches("x\"y")`},
		{"no members", membership(a, nil), "false"},
		{"one member", membership(a, []node{strLit("x")}), `device.attributes["gpu.featureplug.io"].a == "x"`},
		{"members", membership(a, []node{intLit(1), intLit(-2)}), `device.attributes["gpu.featureplug.io"].a in [1, -2]`},
		{"capacity", binary{op: ">", l: compareTo(ref{name: "memory", capacity: true}, "quantity", "8Mi"), r: intLit(0)},
			`device.capacity["gpu.featureplug.io"].memory.compareTo(quantity("8Mi")) > 0`},
		{"function", method(function("string", attribute("n")), "matches", strLit("^1")), `string(device.attributes["gpu.featureplug.io"].n).matches("^1")`},
		{"driver", equal(driverRef{}, strLit(draattr.Domain)), `device.driver == "gpu.featureplug.io"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := render(tc.tree)
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			if prog := dracel.GetCompiler(dracel.Features{EnableConsumableCapacity: true}).CompileCELExpression(got, dracel.Options{}); prog.Error != nil {
				t.Errorf("%s does not compile: %v", got, prog.Error)
			}
		})
	}
}

// TestFormReads checks what value, has and exists read of a form.
func TestFormReads(t *testing.T) {
	for _, tc := range []struct {
		kind, feature, name string
		value, has, exists  string
	}{
		{draattr.TypeGPU, discovery.FeatureDriver, discovery.AttrDriverMajor,
			`device.attributes["gpu.featureplug.io"].driverVersion.major()`, `"driverVersion" in device.attributes["gpu.featureplug.io"]`, `"driverVersion" in device.attributes["gpu.featureplug.io"]`},
		{draattr.TypeGPU, discovery.FeatureDriver, discovery.AttrDriverVersion,
			`device.attributes["gpu.featureplug.io"].driverVersion`, `"driverVersion" in device.attributes["gpu.featureplug.io"]`, "true"},
		{draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrMemory, `device.capacity["gpu.featureplug.io"].memory`, "true", "true"},
		{draattr.TypeGPU, discovery.FeatureCapabilities, discovery.FlagMPS,
			`device.attributes["gpu.featureplug.io"].capabilityMps`, "true", `device.attributes["gpu.featureplug.io"].capabilityMps`},
		{draattr.TypeMIG, discovery.FeatureCapabilities, discovery.FlagMPS, "", "true", "true"},
		{draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrNUMA,
			`device.attributes["resource.kubernetes.io"].numaNode`, `"numaNode" in device.attributes["resource.kubernetes.io"]`, "true"},
		{draattr.TypeMIG, discovery.FeatureCapabilities, discovery.FlagMIGEnabled, "", "true", "true"},
		{draattr.TypeGPU, discovery.FeatureGPU, "nonesuch", "", "true", "false"},
	} {
		f, err := draattr.OwnSchema().Lookup(tc.kind, tc.feature, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		read := ""
		if f.Attribute != "" {
			read = render(value(f))
		}
		if read != tc.value || render(has(f)) != tc.has || render(exists(f)) != tc.exists {
			t.Errorf("%s %s.%s: value %s, has %s, exists %s; want %s, %s, %s", tc.kind, tc.feature, tc.name,
				read, render(has(f)), render(exists(f)), tc.value, tc.has, tc.exists)
		}
	}
}
