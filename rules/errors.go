package rules

import (
	"fmt"
	"strconv"
	"strings"
)

// Error is one problem in a rules file, found when it is loaded or when it
// is applied to a node. Parse and Plan return every problem they find,
// joined with errors.Join; errors.As finds the first *Error.
type Error struct {
	// Source names the rules file, e.g. "rules.yaml" or "builtin:mixed".
	Source string
	// Line is the 1-based line the problem is on, 0 when unknown.
	Line int
	// Rule is the index of the rule in the file (of the entry in Section),
	// -1 for the file itself.
	Rule int
	// RuleName is the rule's (or entry's) name, when it has one.
	RuleName string
	// Section is the list Rule indexes when it is not rules: "health".
	Section string
	// Field is the path of the offending field inside the rule (or inside
	// the file when Rule is -1), e.g. "sharing.replicas"; empty for the rule
	// or file as a whole.
	Field string
	// Value is the offending value as written, empty when there is none.
	Value string
	// Msg says what is wrong.
	Msg string
}

// Error formats the problem as
//
//	rules.yaml:12: rules[2] "a100": sharing.replicas: must be at least 1 (have 0)
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Source)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Rule >= 0 {
		fmt.Fprintf(&b, "%s[%d]", e.section(), e.Rule)
		if e.RuleName != "" {
			fmt.Fprintf(&b, " %q", e.RuleName)
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	if e.Value != "" {
		b.WriteString(" (have " + e.Value + ")")
	}
	return b.String()
}

// section is the list Rule indexes: Section, or "rules".
func (e *Error) section() string {
	if e.Section == "" {
		return "rules"
	}
	return e.Section
}
