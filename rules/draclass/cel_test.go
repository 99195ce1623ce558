package draclass

import (
	"context"
	"strconv"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
	"sigs.k8s.io/node-feature-discovery/pkg/apis/nfd/nodefeaturerule"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/draattr"
)

// deviceWith returns a device that carries value, an NFD value of the
// form's attribute, as draattr.Device publishes it (absent: not at all).
func deviceWith(t *testing.T, f draattr.Form, value string, present bool) dracel.Device {
	t.Helper()
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	caps := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
	d := dracel.Device{Driver: draattr.Domain, Attributes: attrs, Capacity: caps}
	if f.Flag {
		// A flag is a bool that is false when NFD does not publish it.
		attrs[f.Attribute] = resourceapi.DeviceAttribute{BoolValue: &present}
		return d
	}
	if !present {
		return d
	}
	switch {
	case f.Part != "":
		v := value + ".0.0"
		if f.Part == "minor" {
			v = "1." + value + ".0"
		}
		attrs[f.Attribute] = resourceapi.DeviceAttribute{VersionValue: &v}
	case f.Capacity:
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		caps[f.Attribute] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(n<<20, resource.BinarySI)}
	case f.Version:
		if sv, ok := draattr.Semver(value); ok {
			attrs[f.Attribute] = resourceapi.DeviceAttribute{VersionValue: &sv}
		}
	case f.Type == discovery.TypeInt || f.Type == discovery.TypeQuantity:
		n, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		attrs[f.Attribute] = resourceapi.DeviceAttribute{IntValue: &n}
	case f.Type == discovery.TypeBool:
		b := value == "true"
		attrs[f.Attribute] = resourceapi.DeviceAttribute{BoolValue: &b}
	default:
		attrs[f.Attribute] = resourceapi.DeviceAttribute{StringValue: &value}
	}
	return d
}

// TestExpressionsAgreeWithNFD compiles expressions of every op on every
// kind of attribute and checks, value by value (boundaries included), that
// CEL on the DRA device decides as NFD does on the published value.
func TestExpressionsAgreeWithNFD(t *testing.T) {
	ex := func(op nfdv1alpha1.MatchOp, typ nfdv1alpha1.ValueType, values ...string) *nfdv1alpha1.MatchExpression {
		return &nfdv1alpha1.MatchExpression{Op: op, Value: values, Type: typ}
	}
	ops := func(lo, hi string) []*nfdv1alpha1.MatchExpression {
		return []*nfdv1alpha1.MatchExpression{
			ex(nfdv1alpha1.MatchIn, "", lo), ex(nfdv1alpha1.MatchIn, "", "0"+lo, hi), ex(nfdv1alpha1.MatchNotIn, "", lo, hi),
			ex(nfdv1alpha1.MatchInRegexp, "", "^"+lo[:1]), ex(nfdv1alpha1.MatchGt, "", lo), ex(nfdv1alpha1.MatchGe, "", lo),
			ex(nfdv1alpha1.MatchLt, "", lo), ex(nfdv1alpha1.MatchLe, "", lo), ex(nfdv1alpha1.MatchGtLt, "", lo, hi),
			ex(nfdv1alpha1.MatchGeLe, "", lo, hi), ex(nfdv1alpha1.MatchIsTrue, ""), ex(nfdv1alpha1.MatchIsFalse, ""),
			ex(nfdv1alpha1.MatchExists, ""), ex(nfdv1alpha1.MatchDoesNotExist, ""), ex(nfdv1alpha1.MatchAny, ""),
		}
	}
	versionOps := []*nfdv1alpha1.MatchExpression{
		ex(nfdv1alpha1.MatchIn, "", "550.127.05", "12.8"), ex(nfdv1alpha1.MatchNotIn, "", "12.8"),
		ex(nfdv1alpha1.MatchGt, nfdv1alpha1.TypeVersion, "550"), ex(nfdv1alpha1.MatchGe, nfdv1alpha1.TypeVersion, "550.127.5"),
		ex(nfdv1alpha1.MatchLt, nfdv1alpha1.TypeVersion, "12.8"), ex(nfdv1alpha1.MatchLe, nfdv1alpha1.TypeVersion, "v12.8-rc1"),
		ex(nfdv1alpha1.MatchGtLt, nfdv1alpha1.TypeVersion, "12.0", "13"), ex(nfdv1alpha1.MatchGeLe, nfdv1alpha1.TypeVersion, "550", "570.86.15"),
		ex(nfdv1alpha1.MatchExists, ""), ex(nfdv1alpha1.MatchDoesNotExist, ""), ex(nfdv1alpha1.MatchIsTrue, ""),
	}
	stringOps := []*nfdv1alpha1.MatchExpression{
		ex(nfdv1alpha1.MatchIn, "", "NVIDIA L4"), ex(nfdv1alpha1.MatchIn, "", "NVIDIA L4", `quo"te`), ex(nfdv1alpha1.MatchNotIn, "", "NVIDIA L4"),
		ex(nfdv1alpha1.MatchInRegexp, "", "^NVIDIA L4$", `H1\d0`), ex(nfdv1alpha1.MatchInRegexp, "", "(?i)l40"),
		ex(nfdv1alpha1.MatchIsTrue, ""), ex(nfdv1alpha1.MatchIsFalse, ""), ex(nfdv1alpha1.MatchExists, ""), ex(nfdv1alpha1.MatchDoesNotExist, ""),
	}
	boolOps := []*nfdv1alpha1.MatchExpression{
		ex(nfdv1alpha1.MatchIsTrue, ""), ex(nfdv1alpha1.MatchIsFalse, ""), ex(nfdv1alpha1.MatchIn, "", "true"),
		ex(nfdv1alpha1.MatchIn, "", "false", "True"), ex(nfdv1alpha1.MatchNotIn, "", "true"), ex(nfdv1alpha1.MatchInRegexp, "", "^t"),
		ex(nfdv1alpha1.MatchExists, ""), ex(nfdv1alpha1.MatchDoesNotExist, ""),
	}
	flagOps := []*nfdv1alpha1.MatchExpression{
		ex(nfdv1alpha1.MatchExists, ""), ex(nfdv1alpha1.MatchDoesNotExist, ""), ex(nfdv1alpha1.MatchIn, "", "true"), ex(nfdv1alpha1.MatchAny, ""),
	}
	for _, c := range []struct {
		kind, feature, name string
		exprs               []*nfdv1alpha1.MatchExpression
		values              []string
	}{
		{draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrComputeMajor, ops("8", "9"), []string{"0", "7", "8", "9", "10", "80"}},
		{draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrNUMA, ops("0", "1"), []string{"-1", "0", "1", "2"}},
		{draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrMemory, ops("40960", "81920"), []string{"0", "40959", "40960", "40961", "81920", "143771"}},
		{draattr.TypeMIG, discovery.FeatureGPU, discovery.AttrMemory, ops("40960", "81920"), []string{"40960", "40961", "81920"}},
		{draattr.TypeMIG, discovery.FeatureMIG, discovery.AttrMemory, ops("9856", "19968"), []string{"4864", "9856", "19968", "40192"}},
		{draattr.TypeMIG, discovery.FeatureGPU, discovery.AttrComputeMinor, ops("0", "9"), []string{"0", "9"}},
		{draattr.TypeGPU, discovery.FeatureDriver, discovery.AttrDriverMajor, ops("550", "570"), []string{"550", "551", "570"}},
		{draattr.TypeGPU, discovery.FeatureDriver, discovery.AttrDriverVersion, versionOps, []string{"550.127.05", "550", "570.86.15", "12.8", "12.8.1", "13"}},
		{draattr.TypeMIG, discovery.FeatureDriver, discovery.AttrCUDAVersion, versionOps, []string{"12.8", "12.0", "11.4"}},
		{draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrProduct, stringOps, []string{"NVIDIA L4", "NVIDIA L40S", "NVIDIA H100 NVL", `quo"te`, ""}},
		{draattr.TypeMIG, discovery.FeatureMIG, discovery.AttrProfile, stringOps, []string{"1g.10gb", "1g.10gb+me"}},
		{draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrMIGCapable, boolOps, []string{"true", "false"}},
		{draattr.TypeMIG, discovery.FeatureGPU, discovery.AttrMIGEnabled, boolOps, []string{"true"}},
		{draattr.TypeGPU, discovery.FeatureCapabilities, discovery.FlagNVLink, flagOps, []string{"", "absent"}},
		{draattr.TypeMIG, discovery.FeatureCapabilities, discovery.FlagMIGEnabled, flagOps, []string{""}},
		{draattr.TypeGPU, discovery.FeatureGPU, "nonesuch", stringOps, []string{"absent"}},
	} {
		f, err := draattr.OwnSchema().Lookup(c.kind, c.feature, c.name)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range c.exprs {
			tree, err := expression(f, e)
			if err != nil {
				t.Logf("%s %s.%s %s: %v", c.kind, c.feature, c.name, formatExpression(e), err)
				continue
			}
			cond := render(tree)
			prog := dracel.GetCompiler(dracel.Features{}).CompileCELExpression(cond, dracel.Options{})
			if prog.Error != nil {
				t.Fatalf("%s %s.%s %s: %s: %v", c.kind, c.feature, c.name, formatExpression(e), cond, prog.Error)
			}
			for _, v := range c.values {
				present := v != "absent"
				var nfd bool
				if f.Flag {
					nfd, err = nodefeaturerule.MatchKeys(&nfdv1alpha1.MatchExpressionSet{c.name: e}, map[string]nfdv1alpha1.Nil{})
					if present {
						nfd, err = nodefeaturerule.MatchKeys(&nfdv1alpha1.MatchExpressionSet{c.name: e}, map[string]nfdv1alpha1.Nil{c.name: {}})
					}
				} else if f.Const != "" {
					nfd, _, err = nodefeaturerule.MatchValues(&nfdv1alpha1.MatchExpressionSet{c.name: e}, map[string]string{c.name: f.Const}, true)
				} else {
					values := map[string]string{}
					if present {
						values[c.name] = v
					}
					nfd, _, err = nodefeaturerule.MatchValues(&nfdv1alpha1.MatchExpressionSet{c.name: e}, values, true)
				}
				if err != nil {
					nfd = false // the planner treats an evaluation error as a miss
				}
				dev := deviceWith(t, f, v, present && !f.Missing || f.Flag && present)
				got, _, err := prog.DeviceMatches(context.Background(), dev)
				if err != nil {
					t.Errorf("%s %s.%s %s on %q: %s: %v", c.kind, c.feature, c.name, formatExpression(e), v, cond, err)
					continue
				}
				if got != nfd {
					t.Errorf("%s %s.%s %s on %q: CEL %v, NFD %v\n%s", c.kind, c.feature, c.name, formatExpression(e), v, got, nfd, cond)
				}
			}
		}
	}
}

// TestVersionTextDiffers pins the one place CEL and NFD differ: In and
// NotIn compare a version as text in NFD, as a version on the device.
func TestVersionTextDiffers(t *testing.T) {
	f, _ := draattr.OwnSchema().Lookup(draattr.TypeGPU, discovery.FeatureDriver, discovery.AttrCUDAVersion)
	tree, err := expression(f, &nfdv1alpha1.MatchExpression{Op: nfdv1alpha1.MatchIn, Value: []string{"12.8.0"}})
	if err != nil {
		t.Fatal(err)
	}
	cond := render(tree)
	want := `"cudaVersion" in device.attributes["gpu.featureplug.io"] && device.attributes["gpu.featureplug.io"].cudaVersion.compareTo(semver("12.8.0")) == 0`
	if cond != want {
		t.Errorf("In [12.8.0] = %s, want %s", cond, want)
	}
}

func TestNoCELForm(t *testing.T) {
	for _, c := range []struct {
		kind, feature, name string
		e                   *nfdv1alpha1.MatchExpression
	}{
		{draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrMemory, &nfdv1alpha1.MatchExpression{Op: nfdv1alpha1.MatchInRegexp, Value: []string{"^8"}}},
		{draattr.TypeGPU, discovery.FeatureDriver, discovery.AttrDriverVersion, &nfdv1alpha1.MatchExpression{Op: nfdv1alpha1.MatchInRegexp, Value: []string{"^570"}}},
		{draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrProduct, &nfdv1alpha1.MatchExpression{Op: nfdv1alpha1.MatchGt, Value: []string{"5"}}},
		{draattr.TypeGPU, discovery.FeatureGPU, discovery.AttrComputeMajor, &nfdv1alpha1.MatchExpression{Op: nfdv1alpha1.MatchGt, Value: []string{"8"}, Type: nfdv1alpha1.TypeVersion}},
	} {
		f, err := draattr.OwnSchema().Lookup(c.kind, c.feature, c.name)
		if err != nil {
			t.Fatal(err)
		}
		if tree, err := expression(f, c.e); err == nil {
			t.Errorf("%s.%s %s = %s, want no CEL form", c.feature, c.name, formatExpression(c.e), render(tree))
		}
	}
}
