package rules

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/featureplug/featureplug/rules/plan"
)

// maxTemplateOutput bounds what a resource template may produce: a valid
// resource name is far shorter, and the bound keeps a hostile template from
// growing strings without end.
const maxTemplateOutput = 1024

// errTemplateOutput is returned when a template's output grows past
// maxTemplateOutput.
var errTemplateOutput = fmt.Errorf("the template's output is longer than %d bytes", maxTemplateOutput)

// templateFuncs are the functions a resource template may call. They are
// pure string functions; pipelines pass the value last, as in
// {{ .product | trimPrefix "NVIDIA " | resourceName }}.
func templateFuncs() template.FuncMap {
	return template.FuncMap{
		"lower":        strings.ToLower,
		"upper":        strings.ToUpper,
		"replace":      replace,
		"trimPrefix":   func(prefix, s string) string { return strings.TrimPrefix(s, prefix) },
		"trimSuffix":   func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
		"resourceName": sanitizeName,
	}
}

// replace replaces every old in s by new, refusing results longer than
// maxTemplateOutput.
func replace(old, new, s string) (string, error) {
	n := strings.Count(s, old)
	if len(s)+n*(len(new)-len(old)) > maxTemplateOutput {
		return "", errTemplateOutput
	}
	return strings.ReplaceAll(s, old, new), nil
}

// isTemplate reports whether a resource field is a template rather than a
// literal name.
func isTemplate(resource string) bool {
	return strings.Contains(resource, "{{")
}

// parseTemplate parses a resource template. Missing attributes are errors.
// A template may not loop ({{range}}) nor define or call other templates
// (which could recurse): a name needs neither, and without them a template
// runs in time bounded by its length.
func parseTemplate(name, text string) (*template.Template, error) {
	t, err := template.New(name).Funcs(templateFuncs()).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, err
	}
	if len(t.Templates()) > 1 {
		return nil, errors.New("a resource template may not define other templates")
	}
	if what := forbiddenAction(t.Root); what != "" {
		return nil, fmt.Errorf("a resource template may not use {{%s}}", what)
	}
	return t, nil
}

// forbiddenAction returns the first {{range}} or {{template}} (or
// {{block}}) of a parse tree, or "".
func forbiddenAction(n parse.Node) string {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return ""
		}
		for _, c := range n.Nodes {
			if what := forbiddenAction(c); what != "" {
				return what
			}
		}
	case *parse.TemplateNode:
		return "template"
	case *parse.RangeNode:
		return "range"
	case *parse.IfNode:
		return cmp.Or(forbiddenAction(n.List), forbiddenAction(n.ElseList))
	case *parse.WithNode:
		return cmp.Or(forbiddenAction(n.List), forbiddenAction(n.ElseList))
	}
	return ""
}

// templateData is what a resource template sees: the device's attributes
// under their own names (use index for dotted names: {{ index . "compute.major" }})
// and again with every '.' replaced by '_' ({{ .compute_major }}).
func templateData(attrs map[string]string) map[string]string {
	data := make(map[string]string, 2*len(attrs))
	for k, v := range attrs {
		data[k] = v
		if strings.Contains(k, ".") {
			data[strings.ReplaceAll(k, ".", "_")] = v
		}
	}
	return data
}

// executeTemplate runs a resource template on a device's attributes.
func executeTemplate(t *template.Template, attrs map[string]string) (string, error) {
	var b limitedBuilder
	if err := t.Execute(&b, templateData(attrs)); err != nil {
		return "", err
	}
	return b.String(), nil
}

// limitedBuilder is a strings.Builder that refuses to grow past
// maxTemplateOutput.
type limitedBuilder struct{ strings.Builder }

func (b *limitedBuilder) Write(p []byte) (int, error) {
	if b.Len()+len(p) > maxTemplateOutput {
		return 0, errTemplateOutput
	}
	return b.Builder.Write(p)
}

// templateInputs returns the attributes a template reads when it reads them
// only by name ({{ .name }} or {{ index . "name" }}), resolved to attribute
// names through attrs (a sample of the device's attributes), so that Plan
// can render the template once per distinct value. ok is false for
// templates that read more (variables, range, with, the whole map).
func templateInputs(t *template.Template, attrs map[string]string) (keys []string, ok bool) {
	w := &inputWalker{ok: true}
	w.list(t.Root)
	if !w.ok {
		return nil, false
	}
	seen := make(map[string]bool, len(w.keys))
	for _, k := range w.keys {
		if _, known := attrs[k]; !known {
			dotted := strings.ReplaceAll(k, "_", ".")
			if _, known := attrs[dotted]; !known {
				return nil, false
			}
			k = dotted
		}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys, true
}

// inputWalker collects the attribute names a template's parse tree reads.
type inputWalker struct {
	keys []string
	ok   bool
}

func (w *inputWalker) list(l *parse.ListNode) {
	if l == nil {
		return
	}
	for _, n := range l.Nodes {
		switch n := n.(type) {
		case *parse.TextNode, *parse.CommentNode:
		case *parse.ActionNode:
			w.pipe(n.Pipe)
		case *parse.IfNode:
			w.pipe(n.Pipe)
			w.list(n.List)
			w.list(n.ElseList)
		default:
			w.ok = false
		}
	}
}

func (w *inputWalker) pipe(p *parse.PipeNode) {
	if p == nil {
		return
	}
	if len(p.Decl) > 0 {
		w.ok = false
		return
	}
	for _, c := range p.Cmds {
		w.command(c)
	}
}

func (w *inputWalker) command(c *parse.CommandNode) {
	for i := 0; i < len(c.Args); i++ {
		switch a := c.Args[i].(type) {
		case *parse.FieldNode:
			w.keys = append(w.keys, a.Ident[0])
		case *parse.StringNode, *parse.NumberNode, *parse.BoolNode, *parse.NilNode:
		case *parse.IdentifierNode:
			if a.Ident != "index" || i != 0 || len(c.Args) < 3 {
				continue
			}
			_, dot := c.Args[1].(*parse.DotNode)
			s, str := c.Args[2].(*parse.StringNode)
			if dot && str {
				w.keys = append(w.keys, s.Text)
				i += 2
			}
		case *parse.PipeNode:
			w.pipe(a)
		default:
			w.ok = false
		}
	}
}

// templateNameError validates a resource name a template gave. A name
// with the '+' of a MIG profile (1g.10gb+me) gets a short error that says
// how to fix the template, instead of Kubernetes' name rules.
func templateNameError(name string) error {
	err := plan.ValidateResourceName(name)
	if err == nil || !strings.Contains(name, "+") {
		return err
	}
	return fmt.Errorf(`%q is not an extended resource name: it may not contain '+', which MIG profiles with media extensions have (1g.10gb+me): `+
		`replace it in the template, e.g. {{ .profile | replace "+" "." }}`, name)
}
