package rules

import (
	"strings"
	"testing"

	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"

	"github.com/featureplug/featureplug/discovery"
)

// checkWithSample checks one matcher against the schema a sample node
// gives, and returns the errors and warnings.
func checkWithSample(t *testing.T, sample *discovery.Inventory, m nfdv1alpha1.FeatureMatcher) (errs []string, warnings []string) {
	t.Helper()
	doc, err := parseDocument([]byte("rules:\n- name: a\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := &checker{source: "r.yaml", doc: doc, schema: newSchema(discovery.Features(sample)), sample: sample}
	c.checkMatcher(&rule{name: "a"}, path{"matchFeatures"}, m)
	for _, e := range c.errs {
		errs = append(errs, e.Error())
	}
	return errs, c.warnings
}

func versionTerm(feature, key, op string, values ...string) nfdv1alpha1.FeatureMatcherTerm {
	return nfdv1alpha1.FeatureMatcherTerm{Feature: feature, MatchExpressions: &nfdv1alpha1.MatchExpressionSet{
		key: {Op: nfdv1alpha1.MatchOp(op), Value: values, Type: nfdv1alpha1.TypeVersion},
	}}
}

// TestVersionRulesDoNotDependOnTheSample: were the schema to guess an
// attribute's type from the sample node's value, a version attribute the
// sample node left empty (or that NVML reported as unknown) would make
// valid type: version rules fail to load. Types come from
// discovery's catalog.
func TestVersionRulesDoNotDependOnTheSample(t *testing.T) {
	m := nfdv1alpha1.FeatureMatcher{
		versionTerm(discovery.FeatureDriver, discovery.AttrDriverVersion, "Ge", "550"),
		versionTerm(discovery.FeatureDriver, discovery.AttrCUDAVersion, "GeLe", "12.0", "12.8"),
	}
	for _, version := range []string{"", discovery.Unknown} {
		sample := sampleInventory()
		sample.DriverVersion = version
		sample.CUDADriverVersion = version
		errs, warnings := checkWithSample(t, sample, m)
		if len(errs) > 0 || len(warnings) > 0 {
			t.Errorf("sample versions %q: valid type: version rules got errors %q, warnings %q", version, errs, warnings)
		}
	}
}

// TestTypeErrorsFollowTheCatalog checks that what a type cannot do is still
// an error or warning whatever the sample node holds.
func TestTypeErrorsFollowTheCatalog(t *testing.T) {
	term := func(feature, key string, e nfdv1alpha1.MatchExpression) nfdv1alpha1.FeatureMatcher {
		return nfdv1alpha1.FeatureMatcher{{Feature: feature, MatchExpressions: &nfdv1alpha1.MatchExpressionSet{key: &e}}}
	}
	empty := sampleInventory()
	empty.DriverVersion = ""
	empty.NVMLVersion = ""
	empty.GPUs[0].Product = ""
	for _, tt := range []struct {
		name     string
		m        nfdv1alpha1.FeatureMatcher
		wantErr  string
		wantWarn string
	}{
		{"Ge without type on a version", term(discovery.FeatureDriver, discovery.AttrDriverVersion,
			nfdv1alpha1.MatchExpression{Op: nfdv1alpha1.MatchGe, Value: []string{"550"}}), "add type: version", ""},
		{"type: version on the four-part NVML version", term(discovery.FeatureDriver, discovery.AttrNVMLVersion,
			nfdv1alpha1.MatchExpression{Op: nfdv1alpha1.MatchGe, Value: []string{"12"}, Type: nfdv1alpha1.TypeVersion}), "not a version", ""},
		{"Gt on a product", term(discovery.FeatureGPU, discovery.AttrProduct,
			nfdv1alpha1.MatchExpression{Op: nfdv1alpha1.MatchGt, Value: []string{"1"}}), "cannot compare nvidia.gpu.product", ""},
		{"IsTrue on a product", term(discovery.FeatureGPU, discovery.AttrProduct,
			nfdv1alpha1.MatchExpression{Op: nfdv1alpha1.MatchIsTrue}), "", "is not true or false"},
	} {
		for _, sample := range []*discovery.Inventory{sampleInventory(), empty} {
			errs, warnings := checkWithSample(t, sample, tt.m)
			if got := strings.Join(errs, "\n"); !strings.Contains(got, tt.wantErr) || (tt.wantErr == "") != (got == "") {
				t.Errorf("%s (driver %q): errors %q, want one with %q", tt.name, sample.DriverVersion, got, tt.wantErr)
			}
			if got := strings.Join(warnings, "\n"); !strings.Contains(got, tt.wantWarn) || (tt.wantWarn == "") != (got == "") {
				t.Errorf("%s (driver %q): warnings %q, want one with %q", tt.name, sample.DriverVersion, got, tt.wantWarn)
			}
		}
	}
}
