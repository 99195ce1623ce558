package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// document is a rules file parsed into YAML nodes. It is kept next to the
// decoded values only to find line numbers and unknown fields: decoding
// itself goes through sigs.k8s.io/yaml, which honours the JSON field names of
// the Kubernetes and NFD types.
type document struct {
	root *yaml.Node // the top-level value; nil for an empty document
}

// path is a location inside the document: string keys and int indexes,
// e.g. ["rules", 2, "sharing", "replicas"].
type path []any

// String formats a path as rules[2].sharing.replicas.
func (p path) String() string {
	var b strings.Builder
	for _, e := range p {
		switch v := e.(type) {
		case int:
			b.WriteString("[" + strconv.Itoa(v) + "]")
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(v)
		}
	}
	return b.String()
}

// with returns a copy of p extended by more elements.
func (p path) with(more ...any) path {
	out := make(path, 0, len(p)+len(more))
	return append(append(out, p...), more...)
}

// parseDocument parses data as exactly one YAML document.
func parseDocument(data []byte) (*document, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var n yaml.Node
	if err := dec.Decode(&n); err != nil {
		if errors.Is(err, io.EOF) {
			return &document{}, nil
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &docError{line: extra.Line, msg: "a rules file holds one YAML document, found another"}
	} else if !errors.Is(err, io.EOF) {
		return nil, err
	}
	doc := &document{}
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		doc.root = n.Content[0]
	}
	return doc, nil
}

// docError is a problem with the document as a whole, at a line.
type docError struct {
	line int
	msg  string
}

func (e *docError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// line returns the line of the node at p, or of its deepest existing
// ancestor when p does not exist; 0 when nothing is known.
func (d *document) line(p path) int {
	n := d.root
	if n == nil {
		return 0
	}
	line := n.Line
	for _, e := range p {
		n = child(n, e)
		if n == nil {
			break
		}
		line = n.Line
	}
	return line
}

// child returns the value of key k (a string) in a mapping node, or element
// k (an int) of a sequence node.
func child(n *yaml.Node, k any) *yaml.Node {
	switch key := k.(type) {
	case string:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return n.Content[i+1]
			}
		}
	case int:
		if n.Kind == yaml.SequenceNode && key >= 0 && key < len(n.Content) {
			return n.Content[key]
		}
	}
	return nil
}

// scalar returns the scalar value at p, or "" when there is none.
func (d *document) scalar(p path) string {
	n := d.root
	for _, e := range p {
		if n == nil {
			return ""
		}
		n = child(n, e)
	}
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

// unknownField is a mapping key that no field of the target type takes,
// or a key given twice.
type unknownField struct {
	at        path // the mapping holding the key
	key       string
	line      int
	duplicate int // the line of the first occurrence, for a duplicate key
}

// unknownFields walks the document against the Go type it decodes into and
// returns every mapping key that the type does not have, and every key given
// twice in one mapping, in document order.
// Field names are matched exactly (as Kubernetes' strict decoding does), by
// their JSON names. Aliases are not followed (they cannot multiply the work);
// the strict decoder still rejects unknown fields behind them.
func (d *document) unknownFields(t reflect.Type) []unknownField {
	var out []unknownField
	if d.root != nil {
		walkFields(d.root, t, nil, &out)
	}
	return out
}

func walkFields(n *yaml.Node, t reflect.Type, at path, out *[]unknownField) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return
		}
		fields := jsonFields(t)
		seen := make(map[string]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" && k.Tag == "!!merge" {
				continue
			}
			if first, dup := seen[k.Value]; dup {
				*out = append(*out, unknownField{at: at, key: k.Value, line: k.Line, duplicate: first})
				continue
			}
			seen[k.Value] = k.Line
			ft, ok := fields[k.Value]
			if !ok {
				*out = append(*out, unknownField{at: at, key: k.Value, line: k.Line})
				continue
			}
			walkFields(v, ft, at.with(k.Value), out)
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, e := range n.Content {
			walkFields(e, t.Elem(), at.with(i), out)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		seen := make(map[string]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if first, dup := seen[k.Value]; dup {
				*out = append(*out, unknownField{at: at, key: k.Value, line: k.Line, duplicate: first})
				continue
			}
			seen[k.Value] = k.Line
			walkFields(n.Content[i+1], t.Elem(), at.with(k.Value), out)
		}
	}
}

// jsonFields maps the JSON names of a struct's fields to their types,
// promoting the fields of embedded structs without a name as encoding/json
// does.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					fields[k] = v
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

// locateTypeError finds the first node at the JSON field path of a decoding
// type error (struct field names joined by dots, as encoding/json reports
// them, without slice indexes or map keys) whose JSON kind is jsonKind. It
// returns the node's full path and line, or ok false.
func (d *document) locateTypeError(t reflect.Type, fieldPath, jsonKind string) (at path, line int, ok bool) {
	if d.root == nil {
		return nil, 0, false
	}
	var want []string
	if fieldPath != "" {
		want = strings.Split(fieldPath, ".")
	}
	var find func(n *yaml.Node, t reflect.Type, at path, depth int) bool
	find = func(n *yaml.Node, t reflect.Type, p path, depth int) bool {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if depth == len(want) {
			if nodeJSONKind(n) == jsonKind {
				at, line = p, n.Line
				return true
			}
			// A slice or map of the wanted kind: the error is inside.
		}
		switch t.Kind() {
		case reflect.Struct:
			if n.Kind != yaml.MappingNode || depth >= len(want) {
				return false
			}
			fields := jsonFields(t)
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if ft, ok := fields[k]; ok && k == want[depth] && find(n.Content[i+1], ft, p.with(k), depth+1) {
					return true
				}
			}
		case reflect.Slice, reflect.Array:
			if n.Kind == yaml.SequenceNode {
				for i, e := range n.Content {
					if find(e, t.Elem(), p.with(i), depth) {
						return true
					}
				}
			}
		case reflect.Map:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if find(n.Content[i+1], t.Elem(), p.with(n.Content[i].Value), depth) {
						return true
					}
				}
			}
		}
		return false
	}
	ok = find(d.root, t, nil, 0)
	return at, line, ok
}

// nodeJSONKind names the JSON kind a YAML node converts to, as
// json.UnmarshalTypeError.Value names it.
func nodeJSONKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "object"
	case yaml.SequenceNode:
		return "array"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!int", "!!float":
			return "number"
		case "!!bool":
			return "bool"
		case "!!null":
			return "null"
		default:
			return "string"
		}
	}
	return ""
}
