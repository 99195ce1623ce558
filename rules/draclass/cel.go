package draclass

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"

	semver "github.com/Masterminds/semver/v3"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
	"sigs.k8s.io/node-feature-discovery/pkg/apis/nfd/nodefeaturerule"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/draattr"
)

// errNoCEL marks an expression CEL cannot express exactly.
var errNoCEL = errors.New("no CEL form")

// noCEL returns an error saying why an expression has no CEL form.
func noCEL(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errNoCEL, fmt.Sprintf(format, args...))
}

// value reads the form's value on the device: an int (for Part, the
// version's part), a bool, a string, a semver, or a quantity (Capacity).
func value(f draattr.Form) node {
	switch {
	case f.Capacity:
		return ref{name: f.Attribute, capacity: true}
	case f.Part != "":
		return method(attribute(f.Attribute), f.Part)
	}
	return attribute(f.Attribute)
}

// has is the condition under which the form's value can be read: true
// when every device of the kind carries it.
func has(f draattr.Form) node {
	if !f.Optional || f.Attribute == "" {
		return celTrue
	}
	return present{name: f.Attribute}
}

// exists is NFD's Exists on the form's attribute: the flag's value for a
// flag, true for what NFD always publishes, false for what it never does.
func exists(f draattr.Form) node {
	switch {
	case f.Missing:
		return celFalse
	case f.Flag && f.Const != "":
		return celTrue
	case f.Flag:
		return value(f)
	case f.Part != "" && f.Optional:
		// NFD publishes the part when the version has one, which the
		// catalog's versions do when they are versions at all.
		return has(f)
	}
	return celTrue
}

// expression compiles one NFD expression on an attribute, read on a DRA
// device as form says, into a CEL condition that holds exactly when NFD's
// expression matches the device's published value.
func expression(f draattr.Form, e *nfdv1alpha1.MatchExpression) (node, error) {
	op := e.Op
	if op == nfdv1alpha1.MatchAny {
		return celTrue, nil
	}
	switch {
	case f.Absent:
		return celFalse, nil
	case f.Missing:
		return boolLit(op == nfdv1alpha1.MatchDoesNotExist), nil
	case f.Flag && f.Const != "":
		// A flag every device of the kind has set.
		return boolLit(op == nfdv1alpha1.MatchExists), nil
	case f.Flag:
		switch op {
		case nfdv1alpha1.MatchExists:
			return value(f), nil
		case nfdv1alpha1.MatchDoesNotExist:
			return not(value(f)), nil
		}
		// NFD compares no value of a flag: every other op misses.
		return celFalse, nil
	case f.Const != "":
		ok, _, err := nodefeaturerule.MatchValues(&nfdv1alpha1.MatchExpressionSet{f.Name: e}, map[string]string{f.Name: f.Const}, true)
		if err != nil {
			return nil, noCEL("NFD cannot evaluate it on %q: %v", f.Const, err)
		}
		return boolLit(ok), nil
	}
	switch op {
	case nfdv1alpha1.MatchExists:
		return exists(f), nil
	case nfdv1alpha1.MatchDoesNotExist:
		return not(exists(f)), nil
	}
	var cond node
	var err error
	switch {
	case f.Capacity:
		cond, err = quantityExpression(value(f), f.Unit, e)
	case f.Version && f.Part == "":
		cond, err = versionExpression(value(f), e)
	case f.Part != "" || f.Type == discovery.TypeInt || f.Type == discovery.TypeQuantity:
		cond, err = intExpression(value(f), e)
	case f.Type == discovery.TypeBool:
		cond, err = boolExpression(value(f), e)
	case f.Type == discovery.TypeString:
		cond, err = stringExpression(value(f), e)
	default:
		err = noCEL("%s is a %s, which has no DRA form", f.Name, f.Type)
	}
	if err != nil {
		return nil, err
	}
	withValue := and(has(f), cond)
	if f.Optional && f.Default != "" {
		// NFD publishes Default where the device lacks the attribute
		// (numa -1 for a GPU without NUMA affinity, which carries no
		// standard numaNode): the expression decides on that value.
		ok, _, err := nodefeaturerule.MatchValues(&nfdv1alpha1.MatchExpressionSet{f.Name: e}, map[string]string{f.Name: f.Default}, true)
		if err != nil {
			return nil, noCEL("NFD cannot evaluate it on %q: %v", f.Default, err)
		}
		return or(withValue, and(not(has(f)), boolLit(ok))), nil
	}
	return withValue, nil
}

// canonicalInts returns the values that are integers written as NFD
// publishes them (strconv): NFD compares In and NotIn as strings, so "08"
// never equals a published "8".
func canonicalInts(values []string) []int64 {
	var out []int64
	for _, v := range values {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && strconv.FormatInt(n, 10) == v {
			out = append(out, n)
		}
	}
	return out
}

// regexps is a match of any of the patterns on s, a CEL string. NFD and
// CEL both use RE2 (Go's regexp) and find a match anywhere.
func regexps(s node, patterns []string) (node, error) {
	var conds []node
	for _, p := range patterns {
		if _, err := regexp.Compile(p); err != nil {
			return nil, noCEL("invalid regular expression %q: %v", p, err)
		}
		conds = append(conds, method(s, "matches", strLit(p)))
	}
	return or(conds...), nil
}

// intBounds reads the integer bounds of Gt, Ge, Lt, Le, GtLt and GeLe.
func intBounds(e *nfdv1alpha1.MatchExpression) ([]int64, error) {
	if e.Type != "" {
		return nil, noCEL("type: %s on an integer", e.Type)
	}
	out := make([]int64, len(e.Value))
	for i, v := range e.Value {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, noCEL("%q is not an integer", v)
		}
		out[i] = n
	}
	return out, nil
}

// orderedInts reads the integer bounds of an ordered op, checking that a
// range's are in order.
func orderedInts(e *nfdv1alpha1.MatchExpression) ([]int64, error) {
	b, err := intBounds(e)
	if err != nil {
		return nil, err
	}
	if len(b) == 2 && b[0] >= b[1] {
		return nil, noCEL("op %s needs value[0] < value[1] (have %v)", e.Op, e.Value)
	}
	return b, nil
}

// ordered compiles Gt, Ge, Lt, Le, GtLt and GeLe on n bounds; sides(i)
// gives the two sides of the comparison with bound i.
func ordered(e *nfdv1alpha1.MatchExpression, n int, sides func(i int) (l, r node)) (node, error) {
	want := 1
	if e.Op == nfdv1alpha1.MatchGtLt || e.Op == nfdv1alpha1.MatchGeLe {
		want = 2
	}
	if n != want {
		return nil, noCEL("op %s takes %d values (have %d)", e.Op, want, n)
	}
	rel := func(i int, op string) node {
		l, r := sides(i)
		return binary{op: op, l: l, r: r}
	}
	switch e.Op {
	case nfdv1alpha1.MatchGt:
		return rel(0, ">"), nil
	case nfdv1alpha1.MatchGe:
		return rel(0, ">="), nil
	case nfdv1alpha1.MatchLt:
		return rel(0, "<"), nil
	case nfdv1alpha1.MatchLe:
		return rel(0, "<="), nil
	case nfdv1alpha1.MatchGtLt:
		return and(rel(0, ">"), rel(1, "<")), nil
	case nfdv1alpha1.MatchGeLe:
		return and(rel(0, ">="), rel(1, "<=")), nil
	}
	return nil, noCEL("unsupported op %s", e.Op)
}

func isOrdered(op nfdv1alpha1.MatchOp) bool {
	switch op {
	case nfdv1alpha1.MatchGt, nfdv1alpha1.MatchGe, nfdv1alpha1.MatchLt, nfdv1alpha1.MatchLe, nfdv1alpha1.MatchGtLt, nfdv1alpha1.MatchGeLe:
		return true
	}
	return false
}

// intExpression compiles an expression on an int value v.
func intExpression(v node, e *nfdv1alpha1.MatchExpression) (node, error) {
	switch {
	case e.Op == nfdv1alpha1.MatchIn, e.Op == nfdv1alpha1.MatchNotIn:
		var lits []node
		for _, n := range canonicalInts(e.Value) {
			lits = append(lits, intLit(n))
		}
		if e.Op == nfdv1alpha1.MatchNotIn {
			return not(membership(v, lits)), nil
		}
		return membership(v, lits), nil
	case e.Op == nfdv1alpha1.MatchInRegexp:
		return regexps(function("string", v), e.Value)
	case e.Op == nfdv1alpha1.MatchIsTrue, e.Op == nfdv1alpha1.MatchIsFalse:
		return celFalse, nil // an integer is never "true" or "false"
	case isOrdered(e.Op):
		b, err := orderedInts(e)
		if err != nil {
			return nil, err
		}
		return ordered(e, len(b), func(i int) (node, node) { return v, intLit(b[i]) })
	}
	return nil, noCEL("unsupported op %s", e.Op)
}

// compareTo is v.compareTo(fn(text)), which a relation compares with 0:
// a quantity or a semver.
func compareTo(v node, fn, text string) node {
	return method(v, "compareTo", function(fn, strLit(text)))
}

// equalities is v.compareTo(...) == 0 for any of the texts.
func equalities(v node, fn string, texts []string) node {
	var conds []node
	for _, t := range texts {
		conds = append(conds, equal(compareTo(v, fn, t), intLit(0)))
	}
	return or(conds...)
}

// quantityExpression compiles an expression on a capacity q, of which one
// unit of NFD's integer is unit: memory in bytes where NFD has MiB, or a
// count (unit 1).
func quantityExpression(q node, unit int64, e *nfdv1alpha1.MatchExpression) (node, error) {
	mib := func(n int64) string {
		if unit == 1<<20 {
			return strconv.FormatInt(n, 10) + "Mi"
		}
		return strconv.FormatInt(n*unit, 10)
	}
	switch {
	case e.Op == nfdv1alpha1.MatchIn, e.Op == nfdv1alpha1.MatchNotIn:
		var texts []string
		for _, n := range canonicalInts(e.Value) {
			texts = append(texts, mib(n))
		}
		if e.Op == nfdv1alpha1.MatchNotIn {
			return not(equalities(q, "quantity", texts)), nil
		}
		return equalities(q, "quantity", texts), nil
	case e.Op == nfdv1alpha1.MatchIsTrue, e.Op == nfdv1alpha1.MatchIsFalse:
		return celFalse, nil
	case isOrdered(e.Op):
		b, err := orderedInts(e)
		if err != nil {
			return nil, err
		}
		return ordered(e, len(b), func(i int) (node, node) { return compareTo(q, "quantity", mib(b[i])), intLit(0) })
	}
	return nil, noCEL("op %s on a capacity (a quantity, not text)", e.Op)
}

// versionExpression compiles an expression on a version v (a CEL semver).
// NFD compares In and NotIn as text; on the device the version is
// semantic, so "12.8" and "12.8.0" are the same there.
func versionExpression(v node, e *nfdv1alpha1.MatchExpression) (node, error) {
	switch {
	case e.Op == nfdv1alpha1.MatchIn, e.Op == nfdv1alpha1.MatchNotIn:
		var texts []string
		for _, s := range e.Value {
			if sv, ok := draattr.Semver(s); ok {
				texts = append(texts, sv)
			}
		}
		if e.Op == nfdv1alpha1.MatchNotIn {
			return not(equalities(v, "semver", texts)), nil
		}
		return equalities(v, "semver", texts), nil
	case e.Op == nfdv1alpha1.MatchIsTrue, e.Op == nfdv1alpha1.MatchIsFalse:
		return celFalse, nil
	case isOrdered(e.Op):
		if e.Type != nfdv1alpha1.TypeVersion {
			return nil, noCEL("op %s compares a version as an integer; add type: version", e.Op)
		}
		bounds := make([]string, len(e.Value))
		for i, s := range e.Value {
			// As NFD reads a version (extractVersion): Masterminds'
			// lenient parse, pre-release dropped.
			sv, err := semver.NewVersion(s)
			if err != nil {
				return nil, noCEL("%q is not a version: %v", s, err)
			}
			bounds[i] = fmt.Sprintf("%d.%d.%d", sv.Major(), sv.Minor(), sv.Patch())
		}
		return ordered(e, len(bounds), func(i int) (node, node) { return compareTo(v, "semver", bounds[i]), intLit(0) })
	}
	return nil, noCEL("op %s on a version: CEL has no text form of a semver", e.Op)
}

// boolExpression compiles an expression on a bool value v.
func boolExpression(v node, e *nfdv1alpha1.MatchExpression) (node, error) {
	var texts []string
	for _, s := range e.Value {
		if s == "true" || s == "false" {
			texts = append(texts, s)
		}
	}
	slices.Sort(texts)
	lits := make([]node, 0, len(texts))
	for _, s := range slices.Compact(texts) {
		lits = append(lits, boolLit(s == "true"))
	}
	switch {
	case e.Op == nfdv1alpha1.MatchIsTrue:
		return v, nil
	case e.Op == nfdv1alpha1.MatchIsFalse:
		return not(v), nil
	case e.Op == nfdv1alpha1.MatchIn:
		return membership(v, lits), nil
	case e.Op == nfdv1alpha1.MatchNotIn:
		return not(membership(v, lits)), nil
	case e.Op == nfdv1alpha1.MatchInRegexp:
		return regexps(function("string", v), e.Value)
	case isOrdered(e.Op):
		return celFalse, nil // NFD fails to read "true" as a number: no match
	}
	return nil, noCEL("unsupported op %s", e.Op)
}

// stringExpression compiles an expression on a string value v.
func stringExpression(v node, e *nfdv1alpha1.MatchExpression) (node, error) {
	lits := make([]node, len(e.Value))
	for i, s := range e.Value {
		lits[i] = strLit(s)
	}
	switch {
	case e.Op == nfdv1alpha1.MatchIn:
		return membership(v, lits), nil
	case e.Op == nfdv1alpha1.MatchNotIn:
		return not(membership(v, lits)), nil
	case e.Op == nfdv1alpha1.MatchInRegexp:
		return regexps(v, e.Value)
	case e.Op == nfdv1alpha1.MatchIsTrue:
		return equal(v, strLit("true")), nil
	case e.Op == nfdv1alpha1.MatchIsFalse:
		return equal(v, strLit("false")), nil
	case isOrdered(e.Op):
		return nil, noCEL("op %s compares text as a number", e.Op)
	}
	return nil, noCEL("unsupported op %s", e.Op)
}
