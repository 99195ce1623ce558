package draclass

import (
	"reflect"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/featureplug/featureplug/discovery/draattr"
)

// A node is a CEL expression of a selector: a condition, or a value a
// condition reads. The compiler builds a class's selector as a tree of
// nodes and renders it once; and, or and not simplify as they build.
type node interface {
	// prec is how tightly the node binds (precOr .. precPrimary).
	prec() int
	// write renders the node.
	write(b *strings.Builder)
}

// Precedence levels, loosest first, as CEL parses them.
const (
	precOr      = iota + 1 // a || b
	precAnd                // a && b
	precRel                // a == b, a < b, a in b
	precUnary              // !a
	precPrimary            // literals, references, calls
)

type (
	// boolLit is true or false.
	boolLit bool
	// strLit is a string literal.
	strLit string
	// intLit is an integer literal.
	intLit int64
	// list is a list literal: [a, b].
	list []node
	// ref reads one of the device's attributes by its published name
	// (device.attributes["gpu.featureplug.io"].name for an unqualified
	// one, device.attributes["resource.kubernetes.io"].pcieRoot for a
	// qualified one) or, with capacity, one of its capacities
	// (device.capacity[...].name).
	ref struct {
		name     resourceapi.QualifiedName
		capacity bool
	}
	// present holds when the device carries attribute name:
	// "name" in device.attributes["gpu.featureplug.io"].
	present struct{ name resourceapi.QualifiedName }
	// driverRef is the device's driver: device.driver.
	driverRef struct{}
	// call is recv.fn(args), or fn(args) without recv.
	call struct {
		recv node
		fn   string
		args []node
	}
	// binary is a comparison or membership: l == r, l >= r, l in r.
	binary struct {
		op   string
		l, r node
	}
	// junction is a && b && ... (or, with anyOf, a || b || ...), never
	// of fewer than two terms.
	junction struct {
		anyOf bool
		terms []node
	}
	// negation is !x.
	negation struct{ x node }
)

// The constant conditions, which and, or and not fold away.
const (
	celTrue  = boolLit(true)
	celFalse = boolLit(false)
)

func (boolLit) prec() int   { return precPrimary }
func (strLit) prec() int    { return precPrimary }
func (intLit) prec() int    { return precPrimary }
func (list) prec() int      { return precPrimary }
func (ref) prec() int       { return precPrimary }
func (present) prec() int   { return precRel }
func (driverRef) prec() int { return precPrimary }
func (call) prec() int      { return precPrimary }
func (binary) prec() int    { return precRel }
func (negation) prec() int  { return precUnary }

func (j junction) prec() int {
	if j.anyOf {
		return precOr
	}
	return precAnd
}

func (n boolLit) write(b *strings.Builder) { b.WriteString(strconv.FormatBool(bool(n))) }
func (n intLit) write(b *strings.Builder)  { b.WriteString(strconv.FormatInt(int64(n), 10)) }
func (driverRef) write(b *strings.Builder) { b.WriteString("device.driver") }

// write quotes n; Go's escapes are a subset of CEL's.
func (n strLit) write(b *strings.Builder) { b.WriteString(strconv.Quote(string(n))) }

func (n list) write(b *strings.Builder) {
	b.WriteByte('[')
	writeJoined(b, n, ", ", 0)
	b.WriteByte(']')
}

func (n ref) write(b *strings.Builder) {
	if n.capacity {
		b.WriteString("device.capacity[")
	} else {
		b.WriteString("device.attributes[")
	}
	domain, id := draattr.SplitName(n.name)
	strLit(domain).write(b)
	b.WriteString("].")
	b.WriteString(id)
}

func (n present) write(b *strings.Builder) {
	domain, id := draattr.SplitName(n.name)
	strLit(id).write(b)
	b.WriteString(" in device.attributes[")
	strLit(domain).write(b)
	b.WriteByte(']')
}

func (n call) write(b *strings.Builder) {
	if n.recv != nil {
		writeOperand(b, n.recv, precPrimary)
		b.WriteByte('.')
	}
	b.WriteString(n.fn)
	b.WriteByte('(')
	writeJoined(b, n.args, ", ", 0)
	b.WriteByte(')')
}

func (n binary) write(b *strings.Builder) {
	writeOperand(b, n.l, precUnary)
	b.WriteString(" " + n.op + " ")
	writeOperand(b, n.r, precUnary)
}

// write puts an || term that is an && in parentheses, which CEL does not
// need but a reader does.
func (n junction) write(b *strings.Builder) {
	if n.anyOf {
		writeJoined(b, n.terms, " || ", precRel)
		return
	}
	writeJoined(b, n.terms, " && ", precAnd)
}

func (n negation) write(b *strings.Builder) {
	b.WriteByte('!')
	writeOperand(b, n.x, precUnary)
}

// writeOperand writes n, in parentheses when it binds less tightly than
// atLeast.
func writeOperand(b *strings.Builder, n node, atLeast int) {
	if n.prec() < atLeast {
		b.WriteByte('(')
		n.write(b)
		b.WriteByte(')')
		return
	}
	n.write(b)
}

func writeJoined(b *strings.Builder, ns []node, sep string, atLeast int) {
	for i, n := range ns {
		if i > 0 {
			b.WriteString(sep)
		}
		writeOperand(b, n, atLeast)
	}
}

// render writes a tree as CEL.
func render(n node) string {
	var b strings.Builder
	n.write(&b)
	return b.String()
}

// and is the conjunction of conds: constants fold, nested conjunctions
// flatten, a repeated term is dropped.
func and(conds ...node) node { return join(false, conds) }

// or is the disjunction of conds, simplified as and simplifies.
func or(conds ...node) node { return join(true, conds) }

// join builds the junction of conds; unit is the constant it drops, and
// the other constant decides it.
func join(anyOf bool, conds []node) node {
	unit := boolLit(!anyOf)
	var terms []node
	for _, c := range conds {
		if lit, ok := c.(boolLit); ok {
			if lit == unit {
				continue
			}
			return lit
		}
		sub := []node{c}
		if j, ok := c.(junction); ok && j.anyOf == anyOf {
			sub = j.terms
		}
		for _, t := range sub {
			if !slices.ContainsFunc(terms, func(u node) bool { return reflect.DeepEqual(t, u) }) {
				terms = append(terms, t)
			}
		}
	}
	switch len(terms) {
	case 0:
		return unit
	case 1:
		return terms[0]
	}
	return junction{anyOf: anyOf, terms: terms}
}

// not negates c, folding constants and double negations.
func not(c node) node {
	switch c := c.(type) {
	case boolLit:
		return !c
	case negation:
		return c.x
	}
	return negation{x: c}
}

// equal is l == r.
func equal(l, r node) node { return binary{op: "==", l: l, r: r} }

// membership is v == x for one literal, v in [x, y] for more, false for
// none.
func membership(v node, lits []node) node {
	switch len(lits) {
	case 0:
		return celFalse
	case 1:
		return equal(v, lits[0])
	}
	return binary{op: "in", l: v, r: list(lits)}
}

// method is recv.fn(args).
func method(recv node, fn string, args ...node) node { return call{recv: recv, fn: fn, args: args} }

// function is fn(args).
func function(fn string, args ...node) node { return call{fn: fn, args: args} }

// attribute reads one of the driver's attributes of the device.
func attribute(name resourceapi.QualifiedName) node { return ref{name: name} }
