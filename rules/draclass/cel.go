package draclass

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	semver "github.com/Masterminds/semver/v3"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
	"sigs.k8s.io/node-feature-discovery/pkg/apis/nfd/nodefeaturerule"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/draattr"
)

// The constant CEL expressions and/or fold away.
const (
	celTrue  = "true"
	celFalse = "false"
)

// and joins CEL conditions with &&, folding constants and repeats.
func and(conds ...string) string {
	return join(" && ", "||", celTrue, celFalse, conds)
}

// or joins CEL conditions with ||, folding constants and repeats.
func or(conds ...string) string {
	return join(" || ", "&&", celFalse, celTrue, conds)
}

// join joins conditions with op; unit is the constant op drops, zero the
// one that decides it. An operand with a top-level other (or op's own
// operator, for ||-operands with &&) is put in parentheses.
func join(op, other, unit, zero string, conds []string) string {
	var parts []string
	for _, c := range conds {
		switch c {
		case "", unit:
			continue
		case zero:
			return zero
		}
		for _, p := range splitTop(c, strings.TrimSpace(op)) {
			if !slices.Contains(parts, p) {
				parts = append(parts, p)
			}
		}
	}
	switch len(parts) {
	case 0:
		return unit
	case 1:
		return parts[0]
	}
	for i, c := range parts {
		if topLevel(c, other) {
			parts[i] = "(" + c + ")"
		}
	}
	return strings.Join(parts, op)
}

// not negates a CEL condition, folding constants.
func not(c string) string {
	switch c {
	case celTrue:
		return celFalse
	case celFalse:
		return celTrue
	}
	return "!" + wrap(c)
}

// wrap puts a condition in parentheses unless it is one operand already.
func wrap(c string) string {
	if topLevel(c, "||") || topLevel(c, "&&") || topLevel(c, " ") {
		return "(" + c + ")"
	}
	return c
}

// splitTop splits c at its top-level sep, so that a join flattens
// nested joins of the same operator.
func splitTop(c, sep string) []string {
	var out []string
	start := 0
	scanTop(c, func(i int) int {
		if !strings.HasPrefix(c[i:], " "+sep+" ") {
			return 0
		}
		out = append(out, c[start:i])
		start = i + len(sep) + 2
		return len(sep) + 1
	})
	return append(out, c[start:])
}

// topLevel reports whether sep occurs in c outside parentheses, brackets
// and string literals.
func topLevel(c, sep string) bool {
	found := false
	scanTop(c, func(i int) int {
		if !found && strings.HasPrefix(c[i:], sep) {
			found = true
		}
		return 0
	})
	return found
}

// scanTop calls at with each index of c outside parentheses, brackets and
// string literals (escapes included); at returns how many bytes to skip
// after the one at i.
func scanTop(c string, at func(i int) int) {
	depth := 0
	for i := 0; i < len(c); i++ {
		switch c[i] {
		case '"':
			for i++; i < len(c) && c[i] != '"'; i++ {
				if c[i] == '\\' {
					i++
				}
			}
		case '(', '[':
			depth++
		case ')', ']':
			depth--
		default:
			if depth == 0 {
				i += at(i)
			}
		}
	}
}

// quote writes a CEL string literal. Go's escapes are a subset of CEL's.
func quote(s string) string { return strconv.Quote(s) }

// errNoCEL marks an expression CEL cannot express exactly.
var errNoCEL = errors.New("no CEL form")

// noCEL returns an error saying why an expression has no CEL form.
func noCEL(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errNoCEL, fmt.Sprintf(format, args...))
}

// expression compiles one NFD expression on an attribute, read on a DRA
// device as form says, into a CEL condition that holds exactly when NFD's
// expression matches the device's published value.
func expression(f draattr.Form, e *nfdv1alpha1.MatchExpression) (string, error) {
	op := e.Op
	if op == nfdv1alpha1.MatchAny {
		return celTrue, nil
	}
	switch {
	case f.Absent:
		return celFalse, nil
	case f.Missing:
		return boolConst(op == nfdv1alpha1.MatchDoesNotExist), nil
	case f.Flag && f.Const != "":
		// A flag every device of the kind has set.
		return boolConst(op == nfdv1alpha1.MatchExists), nil
	case f.Flag:
		switch op {
		case nfdv1alpha1.MatchExists:
			return f.Value(), nil
		case nfdv1alpha1.MatchDoesNotExist:
			return not(f.Value()), nil
		}
		// NFD compares no value of a flag: every other op misses.
		return celFalse, nil
	case f.Const != "":
		ok, _, err := nodefeaturerule.MatchValues(&nfdv1alpha1.MatchExpressionSet{f.Name: e}, map[string]string{f.Name: f.Const}, true)
		if err != nil {
			return "", noCEL("NFD cannot evaluate it on %q: %v", f.Const, err)
		}
		return boolConst(ok), nil
	}
	switch op {
	case nfdv1alpha1.MatchExists:
		return f.Exists(), nil
	case nfdv1alpha1.MatchDoesNotExist:
		return not(f.Exists()), nil
	}
	var cond string
	var err error
	switch {
	case f.Capacity:
		cond, err = quantityExpression(f.Value(), e)
	case f.Version && f.Part == "":
		cond, err = versionExpression(f.Value(), e)
	case f.Part != "" || f.Type == discovery.TypeInt || f.Type == discovery.TypeQuantity:
		cond, err = intExpression(f.Value(), e)
	case f.Type == discovery.TypeBool:
		cond, err = boolExpression(f.Value(), e)
	case f.Type == discovery.TypeString:
		cond, err = stringExpression(f.Value(), e)
	default:
		err = noCEL("%s is a %s, which has no DRA form", f.Name, f.Type)
	}
	if err != nil {
		return "", err
	}
	return and(f.Has(), cond), nil
}

func boolConst(b bool) string {
	if b {
		return celTrue
	}
	return celFalse
}

// canonicalInts returns the values that are integers written as NFD
// publishes them (strconv): NFD compares In and NotIn as strings, so "08"
// never equals a published "8".
func canonicalInts(values []string) []string {
	var out []string
	for _, v := range values {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && strconv.FormatInt(n, 10) == v {
			out = append(out, v)
		}
	}
	return out
}

// membership writes v == x or v in [x, y], or false for no values.
func membership(v string, lits []string) string {
	switch len(lits) {
	case 0:
		return celFalse
	case 1:
		return v + " == " + lits[0]
	}
	return v + " in [" + strings.Join(lits, ", ") + "]"
}

// regexps writes a match of any of the patterns on s, a CEL string. NFD
// and CEL both use RE2 (Go's regexp) and find a match anywhere.
func regexps(s string, patterns []string) (string, error) {
	var conds []string
	for _, p := range patterns {
		if _, err := regexp.Compile(p); err != nil {
			return "", noCEL("invalid regular expression %q: %v", p, err)
		}
		conds = append(conds, s+".matches("+quote(p)+")")
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

// ordered compiles Gt, Ge, Lt, Le, GtLt and GeLe with cmp(i, op), which
// writes the comparison of the value with bound i.
func ordered(e *nfdv1alpha1.MatchExpression, n int, cmp func(i int, op string) string) (string, error) {
	want := 1
	if e.Op == nfdv1alpha1.MatchGtLt || e.Op == nfdv1alpha1.MatchGeLe {
		want = 2
	}
	if n != want {
		return "", noCEL("op %s takes %d values (have %d)", e.Op, want, n)
	}
	switch e.Op {
	case nfdv1alpha1.MatchGt:
		return cmp(0, ">"), nil
	case nfdv1alpha1.MatchGe:
		return cmp(0, ">="), nil
	case nfdv1alpha1.MatchLt:
		return cmp(0, "<"), nil
	case nfdv1alpha1.MatchLe:
		return cmp(0, "<="), nil
	case nfdv1alpha1.MatchGtLt:
		return and(cmp(0, ">"), cmp(1, "<")), nil
	case nfdv1alpha1.MatchGeLe:
		return and(cmp(0, ">="), cmp(1, "<=")), nil
	}
	return "", noCEL("unsupported op %s", e.Op)
}

func isOrdered(op nfdv1alpha1.MatchOp) bool {
	switch op {
	case nfdv1alpha1.MatchGt, nfdv1alpha1.MatchGe, nfdv1alpha1.MatchLt, nfdv1alpha1.MatchLe, nfdv1alpha1.MatchGtLt, nfdv1alpha1.MatchGeLe:
		return true
	}
	return false
}

// intExpression compiles an expression on an int value v.
func intExpression(v string, e *nfdv1alpha1.MatchExpression) (string, error) {
	switch {
	case e.Op == nfdv1alpha1.MatchIn:
		return membership(v, canonicalInts(e.Value)), nil
	case e.Op == nfdv1alpha1.MatchNotIn:
		return not(membership(v, canonicalInts(e.Value))), nil
	case e.Op == nfdv1alpha1.MatchInRegexp:
		return regexps("string("+v+")", e.Value)
	case e.Op == nfdv1alpha1.MatchIsTrue, e.Op == nfdv1alpha1.MatchIsFalse:
		return celFalse, nil // an integer is never "true" or "false"
	case isOrdered(e.Op):
		b, err := intBounds(e)
		if err != nil {
			return "", err
		}
		if len(b) == 2 && b[0] >= b[1] {
			return "", noCEL("op %s needs value[0] < value[1] (have %v)", e.Op, e.Value)
		}
		return ordered(e, len(b), func(i int, op string) string { return v + " " + op + " " + strconv.FormatInt(b[i], 10) })
	}
	return "", noCEL("unsupported op %s", e.Op)
}

// quantityExpression compiles an expression on memory, a capacity q in
// bytes where NFD has an integer in MiB.
func quantityExpression(q string, e *nfdv1alpha1.MatchExpression) (string, error) {
	mib := func(n string) string { return q + ".compareTo(quantity(" + quote(n+"Mi") + "))" }
	switch {
	case e.Op == nfdv1alpha1.MatchIn, e.Op == nfdv1alpha1.MatchNotIn:
		var conds []string
		for _, n := range canonicalInts(e.Value) {
			conds = append(conds, mib(n)+" == 0")
		}
		if e.Op == nfdv1alpha1.MatchNotIn {
			return not(or(conds...)), nil
		}
		return or(conds...), nil
	case e.Op == nfdv1alpha1.MatchIsTrue, e.Op == nfdv1alpha1.MatchIsFalse:
		return celFalse, nil
	case isOrdered(e.Op):
		b, err := intBounds(e)
		if err != nil {
			return "", err
		}
		if len(b) == 2 && b[0] >= b[1] {
			return "", noCEL("op %s needs value[0] < value[1] (have %v)", e.Op, e.Value)
		}
		return ordered(e, len(b), func(i int, op string) string { return mib(strconv.FormatInt(b[i], 10)) + " " + op + " 0" })
	}
	return "", noCEL("op %s on memory, a capacity (a quantity, not text)", e.Op)
}

// versionExpression compiles an expression on a version v (a CEL semver).
// NFD compares In and NotIn as text; on the device the version is
// semantic, so "12.8" and "12.8.0" are the same there.
func versionExpression(v string, e *nfdv1alpha1.MatchExpression) (string, error) {
	switch {
	case e.Op == nfdv1alpha1.MatchIn, e.Op == nfdv1alpha1.MatchNotIn:
		var conds []string
		for _, s := range e.Value {
			if sv, ok := draattr.Semver(s); ok {
				conds = append(conds, v+".compareTo(semver("+quote(sv)+")) == 0")
			}
		}
		if e.Op == nfdv1alpha1.MatchNotIn {
			return not(or(conds...)), nil
		}
		return or(conds...), nil
	case e.Op == nfdv1alpha1.MatchIsTrue, e.Op == nfdv1alpha1.MatchIsFalse:
		return celFalse, nil
	case isOrdered(e.Op):
		if e.Type != nfdv1alpha1.TypeVersion {
			return "", noCEL("op %s compares a version as an integer; add type: version", e.Op)
		}
		bounds := make([]string, len(e.Value))
		for i, s := range e.Value {
			// As NFD reads a version (extractVersion): Masterminds'
			// lenient parse, pre-release dropped.
			sv, err := semver.NewVersion(s)
			if err != nil {
				return "", noCEL("%q is not a version: %v", s, err)
			}
			bounds[i] = fmt.Sprintf("%d.%d.%d", sv.Major(), sv.Minor(), sv.Patch())
		}
		return ordered(e, len(bounds), func(i int, op string) string {
			return v + ".compareTo(semver(" + quote(bounds[i]) + ")) " + op + " 0"
		})
	}
	return "", noCEL("op %s on a version: CEL has no text form of a semver", e.Op)
}

// boolExpression compiles an expression on a bool value v.
func boolExpression(v string, e *nfdv1alpha1.MatchExpression) (string, error) {
	var lits []string
	for _, s := range e.Value {
		if s == "true" || s == "false" {
			lits = append(lits, s)
		}
	}
	slices.Sort(lits)
	lits = slices.Compact(lits)
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
		return regexps("string("+v+")", e.Value)
	case isOrdered(e.Op):
		return celFalse, nil // NFD fails to read "true" as a number: no match
	}
	return "", noCEL("unsupported op %s", e.Op)
}

// stringExpression compiles an expression on a string value v.
func stringExpression(v string, e *nfdv1alpha1.MatchExpression) (string, error) {
	lits := make([]string, len(e.Value))
	for i, s := range e.Value {
		lits[i] = quote(s)
	}
	switch {
	case e.Op == nfdv1alpha1.MatchIn:
		return membership(v, lits), nil
	case e.Op == nfdv1alpha1.MatchNotIn:
		return not(membership(v, lits)), nil
	case e.Op == nfdv1alpha1.MatchInRegexp:
		return regexps(v, e.Value)
	case e.Op == nfdv1alpha1.MatchIsTrue:
		return v + ` == "true"`, nil
	case e.Op == nfdv1alpha1.MatchIsFalse:
		return v + ` == "false"`, nil
	case isOrdered(e.Op):
		return "", noCEL("op %s compares text as a number", e.Op)
	}
	return "", noCEL("unsupported op %s", e.Op)
}
