package rules

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
	"sigs.k8s.io/node-feature-discovery/pkg/apis/nfd/nodefeaturerule"

	"github.com/featureplug/featureplug/discovery"
)

// termExplainer is one matcher term split into single expressions, in key
// order, so that a miss can name the expression that failed.
type termExplainer struct {
	feature   string // lowercased, as NFD looks it up
	exprs     []singleExpr
	matchName *nfdv1alpha1.MatchExpression
}

// singleExpr is one expression of a term, as a set of its own.
type singleExpr struct {
	key  string
	expr *nfdv1alpha1.MatchExpression
	set  nfdv1alpha1.MatchExpressionSet
}

// checkMatcher validates a matcher (matchFeatures, or one element of
// matchAny) at load time and prepares its explainer. Malformed expressions
// are errors; references to what featureplug never publishes are warnings.
func (c *checker) checkMatcher(r *rule, at path, m nfdv1alpha1.FeatureMatcher) []termExplainer {
	out := make([]termExplainer, 0, len(m))
	for j := range m {
		term := &m[j]
		tp := at.with(j)
		feature := strings.ToLower(term.Feature)
		te := termExplainer{feature: feature, matchName: term.MatchName}
		fs, known := c.schema[feature]
		switch {
		case feature == "":
			c.ruleError(r, tp.with("feature"), "", "required, e.g. "+discovery.FeatureGPU)
		case !known:
			c.ruleWarning(r, tp.with("feature"), strconv.Quote(term.Feature),
				"featureplug never publishes this feature, so the term never matches"+didYouMean(feature, c.schema.names())+
					" (it publishes "+strings.Join(c.schema.names(), ", ")+")")
		default:
			c.checkKindFeature(r, tp, term, feature) // vfio.go
		}
		if term.MatchExpressions != nil {
			keys := make([]string, 0, len(*term.MatchExpressions))
			for k := range *term.MatchExpressions {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				e := (*term.MatchExpressions)[k]
				ep := tp.with("matchExpressions", k)
				if e == nil {
					c.ruleError(r, ep, "null", "an expression needs at least op")
					continue
				}
				c.checkExpression(r, ep, feature, fs, known, k, e)
				te.exprs = append(te.exprs, singleExpr{key: k, expr: e, set: nfdv1alpha1.MatchExpressionSet{k: e}})
			}
		}
		if term.MatchName != nil {
			if err := checkSyntax(term.MatchName); err != nil {
				c.ruleError(r, tp.with("matchName"), formatExpression(term.MatchName), "invalid expression: "+err.Error())
			}
		}
		out = append(out, te)
	}
	return out
}

// checkSyntax evaluates an expression with NFD on a value that is both a
// number and a version, which reports a bad op, a wrong number of values,
// values that are not numbers or versions, and bad regular expressions.
func checkSyntax(e *nfdv1alpha1.MatchExpression) error {
	_, _, err := nodefeaturerule.MatchValues(&nfdv1alpha1.MatchExpressionSet{"k": e}, map[string]string{"k": "1"}, false)
	if err != nil {
		return errors.New(trimNFDError(err.Error()))
	}
	return nil
}

// trimNFDError drops what an NFD expression error repeats of our own
// message: its "invalid expression, " lead and its trailing "(have ...)",
// since errors here name the expression themselves.
func trimNFDError(msg string) string {
	for _, p := range []string{"invalid expression, ", "invalid expressiom, "} {
		msg = strings.TrimPrefix(msg, p)
	}
	if i := strings.LastIndex(msg, " (have "); i > 0 && strings.HasSuffix(msg, ")") {
		msg = msg[:i]
	}
	return msg
}

// checkExpression validates one expression on key of a feature.
func (c *checker) checkExpression(r *rule, at path, feature string, fs featureSchema, known bool, key string, e *nfdv1alpha1.MatchExpression) {
	if err := checkSyntax(e); err != nil {
		c.ruleError(r, at, formatExpression(e), "invalid expression: "+err.Error())
		return
	}
	if !known {
		return
	}
	attr, has := fs.attrs[key]
	if !has {
		attrs := slices.Sorted(maps.Keys(fs.attrs))
		c.ruleWarning(r, at, "", fmt.Sprintf("featureplug never publishes %q in %s, so the expression never matches%s (it publishes %s)",
			key, feature, didYouMean(key, attrs), strings.Join(attrs, ", ")))
		return
	}
	switch fs.kind {
	case flagFeature:
		switch e.Op {
		case nfdv1alpha1.MatchExists, nfdv1alpha1.MatchDoesNotExist, nfdv1alpha1.MatchAny:
		default:
			c.ruleWarning(r, at, formatExpression(e), fmt.Sprintf("%s is a flag without a value: op %s never matches it; use Exists or DoesNotExist", feature+"."+key, e.Op))
		}
	default:
		// The sample is a value of the attribute's catalog type, so
		// whether NFD can compare it is whether it can compare the type.
		set := nfdv1alpha1.MatchExpressionSet{key: e}
		if _, _, err := nodefeaturerule.MatchValues(&set, map[string]string{key: attr.sample}, false); err != nil {
			msg := fmt.Sprintf("op %s cannot compare %s.%s, a %s whose values look like %q: %v", e.Op, feature, key, attr.typ, attr.sample, err)
			if e.Type == "" && attr.typ == discovery.TypeVersion {
				msg += "; add type: version to compare versions"
			}
			c.ruleError(r, at, formatExpression(e), msg)
			return
		}
		if (e.Op == nfdv1alpha1.MatchIsTrue || e.Op == nfdv1alpha1.MatchIsFalse) && attr.typ != discovery.TypeBool {
			c.ruleWarning(r, at, formatExpression(e), fmt.Sprintf("%s.%s is not true or false (it is a %s; values look like %q), so op %s never matches", feature, key, attr.typ, attr.sample, e.Op))
		}
	}
}

// inputs lists the per-device attributes a rule's matchers read, in a
// stable order. Node-level features (flags and attributes) are the same for
// every device of a plan, so they are not inputs. It reports false when the
// verdict may depend on more than these values.
func (c *checker) inputs(s *ruleSpec) ([]input, bool) {
	var out []input
	seen := make(map[input]bool)
	memoize := true
	add := func(m nfdv1alpha1.FeatureMatcher) {
		for _, term := range m {
			feature := strings.ToLower(term.Feature)
			if fs, ok := c.schema[feature]; !ok || fs.kind != instanceFeature {
				continue
			}
			if term.MatchName != nil {
				memoize = false
			}
			if term.MatchExpressions == nil {
				continue
			}
			for k := range *term.MatchExpressions {
				in := input{feature: feature, key: k}
				if !seen[in] {
					seen[in] = true
					out = append(out, in)
				}
			}
		}
	}
	add(s.MatchFeatures)
	for _, e := range s.MatchAny {
		add(e.MatchFeatures)
	}
	slices.SortFunc(out, func(a, b input) int {
		return cmp.Or(cmp.Compare(a.feature, b.feature), cmp.Compare(a.key, b.key))
	})
	return out, memoize
}

// names returns the published feature names, sorted.
func (s schema) names() []string {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// formatExpression writes an expression as in explanations:
// "InRegexp [^NVIDIA H100]", "Gt 40000", "Ge 550 (version)", "Exists".
func formatExpression(e *nfdv1alpha1.MatchExpression) string {
	var b strings.Builder
	b.WriteString(string(e.Op))
	switch {
	case len(e.Value) == 0:
	case len(e.Value) == 1 && isComparison(e.Op):
		b.WriteString(" " + e.Value[0])
	default:
		b.WriteString(" [" + strings.Join(e.Value, ", ") + "]")
	}
	if e.Type != "" {
		b.WriteString(" (" + string(e.Type) + ")")
	}
	return b.String()
}

func isComparison(op nfdv1alpha1.MatchOp) bool {
	switch op {
	case nfdv1alpha1.MatchGt, nfdv1alpha1.MatchGe, nfdv1alpha1.MatchLt, nfdv1alpha1.MatchLe:
		return true
	}
	return false
}

// whyNot explains why the rule's matchers did not match a device's
// features, naming the first expression that failed and the value the
// device had.
func (r *rule) whyNot(f *nfdv1alpha1.Features) string {
	if len(r.explainAny) > 0 {
		var reasons []string
		matched := false
		for _, terms := range r.explainAny {
			why := firstFailure(terms, f)
			if why == "" {
				matched = true
				break
			}
			reasons = append(reasons, why)
		}
		if !matched {
			if len(reasons) == 1 {
				return "matchAny: " + reasons[0]
			}
			return "matchAny: no element matched: " + strings.Join(reasons, "; ")
		}
	}
	if why := firstFailure(r.explainAll, f); why != "" {
		return why
	}
	return "did not match"
}

// firstFailure returns why the first failing expression of a matcher failed,
// or "" when all of them match. Each expression is evaluated on its own by
// NFD: with exactly one instance per feature, the terms and expressions of a
// matcher match together exactly when each matches alone.
func firstFailure(terms []termExplainer, f *nfdv1alpha1.Features) string {
	for i := range terms {
		t := &terms[i]
		flags, okF := f.Flags[t.feature]
		attrs, okA := f.Attributes[t.feature]
		inst, okI := f.Instances[t.feature]
		if !okF && !okA && !okI {
			return t.feature + ": no such feature for this device"
		}
		for j := range t.exprs {
			x := &t.exprs[j]
			ok, _, _, err := nodefeaturerule.MatchMulti(&x.set, flags.Elements, attrs.Elements, inst.Elements, true)
			if err != nil {
				return fmt.Sprintf("%s.%s: %s: error: %v", t.feature, x.key, formatExpression(x.expr), err)
			}
			if !ok {
				return describeMiss(t.feature, x, flags, attrs, inst)
			}
		}
		if t.matchName != nil {
			ok, _, err := nodefeaturerule.MatchNamesMulti(t.matchName, flags.Elements, attrs.Elements, inst.Elements)
			if err != nil {
				return fmt.Sprintf("%s: matchName %s: error: %v", t.feature, formatExpression(t.matchName), err)
			}
			if !ok {
				return fmt.Sprintf("%s: matchName %s matched no name", t.feature, formatExpression(t.matchName))
			}
		}
	}
	return ""
}

// describeMiss says what value the device had for an expression that did
// not match.
func describeMiss(feature string, x *singleExpr, flags nfdv1alpha1.FlagFeatureSet, attrs nfdv1alpha1.AttributeFeatureSet, inst nfdv1alpha1.InstanceFeatureSet) string {
	name := feature + "." + x.key
	expr := formatExpression(x.expr)
	if _, set := flags.Elements[x.key]; set {
		return name + ": " + expr + ": the flag is set"
	}
	v, ok := attrs.Elements[x.key]
	if !ok && len(inst.Elements) > 0 {
		v, ok = inst.Elements[0].Attributes[x.key]
	}
	switch {
	case ok:
		return fmt.Sprintf("%s: %s did not match %q", name, expr, v)
	case flags.Elements != nil:
		return name + ": " + expr + ": the flag is not set"
	default:
		return name + ": " + expr + ": no such attribute"
	}
}
