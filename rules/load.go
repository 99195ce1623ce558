package rules

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/template"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/draattr"
	"github.com/featureplug/featureplug/rules/plan"
)

// MaxFileSize is the largest rules file Load and Parse accept.
const MaxFileSize = 1 << 20

// builtinFS holds the rule files shipped with featureplug.
//
//go:embed builtin/*.yaml
var builtinFS embed.FS

// builtinPrefix marks a builtin file in error messages.
const builtinPrefix = "builtin:"

// RuleSet is a loaded, validated rules file. It is immutable and safe for
// concurrent use.
type RuleSet struct {
	source   string
	rules    []*rule
	health   []*healthEntry // the health section (health.go)
	warnings []string
	// settings are the agent flags an NVIDIA config sets (nvidia.go).
	settings []AgentSetting
	// serveNothing is the file's serveNothing: it means to serve no
	// device (and has no rules).
	serveNothing bool
	// draCompat is the naming of DRA devices the dra section chooses
	// (dra.go).
	draCompat draattr.Compatibility
}

// rule is one compiled rule.
type rule struct {
	index    int
	name     string
	line     int // line of the rule
	devices  plan.DeviceKind
	nfd      nfdv1alpha1.Rule // the matchers, as NFD evaluates them
	selector labels.Selector  // nil: every node
	nodeMiss string           // why the rule skips a node its selector rejects

	resource     string             // literal name, or template text
	resourceLine int                // line of the resource field
	tmpl         *template.Template // nil for a literal name
	tmplInputs   []string           // attributes the template reads
	tmplMemoize  bool               // whether tmplInputs are all it reads

	sharing plan.Sharing // normalized; MPS holds only the values written
	serve   plan.Serve   // as written; "" leaves it to the agent (serve.go)
	// dynamic is the rule's mig section: it partitions GPUs on demand
	// (migdynamic.go); nil for other rules.
	dynamic *dynamicRule

	// explain holds the matchers split into single expressions, in a stable
	// order, to say which one failed.
	explainAll []termExplainer
	explainAny [][]termExplainer

	// inputs are the per-device attributes the matchers read; two devices
	// that agree on them get the same verdict, so Plan evaluates the rule
	// once per distinct input. memoize is false when the rule reads more
	// than named attributes (matchName on a per-device feature).
	inputs  []input
	memoize bool
}

// input is one attribute of a per-device (instance) feature.
type input struct {
	feature, key string
}

// Source names the file the rules came from ("builtin:<name>" for a
// builtin file).
func (rs *RuleSet) Source() string { return rs.source }

// Warnings returns the problems that do not stop the rules from loading,
// such as matching on a feature featureplug never publishes.
func (rs *RuleSet) Warnings() []string { return slices.Clone(rs.warnings) }

// RuleNames returns the names of the rules, in order.
func (rs *RuleSet) RuleNames() []string {
	names := make([]string, len(rs.rules))
	for i, r := range rs.rules {
		names[i] = r.name
	}
	return names
}

// BuiltinNames returns the names of the rule files shipped with
// featureplug, sorted: "mixed", "none", "per-model", "single".
func BuiltinNames() []string {
	entries, err := builtinFS.ReadDir("builtin")
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	slices.Sort(names)
	return names
}

// Load loads a builtin rules file by name (see BuiltinNames) or a rules
// file by path. A name is looked up among the builtin files first; write
// "./mixed" to load a file called mixed from the working directory.
func Load(nameOrPath string) (*RuleSet, error) {
	if slices.Contains(BuiltinNames(), nameOrPath) {
		data, err := builtinFS.ReadFile("builtin/" + nameOrPath + ".yaml")
		if err != nil {
			return nil, fmt.Errorf("reading builtin rules %q: %w", nameOrPath, err)
		}
		return Parse(builtinPrefix+nameOrPath, data)
	}
	f, err := os.Open(nameOrPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, notFoundError(nameOrPath, err)
	}
	if err != nil {
		return nil, fmt.Errorf("reading rules file: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only: a close error loses nothing
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading rules file %s: %w", nameOrPath, err)
	}
	return Parse(nameOrPath, data)
}

// Default returns the rules used when no file is given: the builtin
// "none" rules, which advertise every whole GPU as nvidia.com/gpu.
func Default() *RuleSet {
	rs, err := Load("none")
	if err != nil {
		panic("builtin rules \"none\" do not load: " + err.Error())
	}
	return rs
}

// Parse loads a rules file from its content; source names the file in
// errors and warnings. An NVIDIA device-plugin config (a top-level
// "version: v1") or a ConfigMap manifest of such configs is converted
// first (see package nvidiaconfig), its conversion warnings becoming the
// rule set's. It returns every problem it finds, joined with
// errors.Join, each an *Error naming the file, line, rule and field.
func Parse(source string, data []byte) (*RuleSet, error) {
	if len(data) > MaxFileSize {
		return nil, &Error{Source: source, Rule: -1, Msg: fmt.Sprintf("file is larger than %d bytes", MaxFileSize)}
	}
	if rs, ok, err := parseNVIDIA(source, data); ok {
		return rs, err
	}
	doc, err := parseDocument(data)
	if de := (*docError)(nil); errors.As(err, &de) {
		return nil, &Error{Source: source, Line: de.line, Rule: -1, Msg: de.msg}
	} else if err != nil {
		return nil, &Error{Source: source, Rule: -1, Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	c := &checker{source: source, doc: doc}

	for _, u := range doc.unknownFields(reflect.TypeFor[fileSpec]()) {
		section, rule, field := c.split(u.at)
		msg := fmt.Sprintf("unknown field %q", u.key)
		if u.duplicate > 0 {
			msg = fmt.Sprintf("%q is given twice (first on line %d)", u.key, u.duplicate)
		}
		c.add(false, &Error{Line: u.line, Section: section, Rule: rule, Field: field.String(), Msg: msg})
	}

	var spec fileSpec
	decode := yaml.Unmarshal
	if len(c.errs) == 0 {
		// Nothing unknown found: decode strictly anyway, which also
		// rejects duplicate keys and unknown fields behind aliases.
		decode = yaml.UnmarshalStrict
	}
	if err := decode(data, &spec); err != nil {
		c.decodeError(err)
		return nil, errors.Join(c.errs...)
	}

	if spec.APIVersion != APIVersion {
		c.add(false, &Error{Line: doc.line(path{"apiVersion"}), Rule: -1, Field: "apiVersion",
			Value: strconv.Quote(spec.APIVersion), Msg: fmt.Sprintf("must be %q", APIVersion)})
	}
	if spec.Kind != Kind {
		c.add(false, &Error{Line: doc.line(path{"kind"}), Rule: -1, Field: "kind",
			Value: strconv.Quote(spec.Kind), Msg: fmt.Sprintf("must be %q", Kind)})
	}
	c.checkServeNothing(&spec)

	sample := sampleInventory()
	c.schema = newSchema(discovery.Features(sample))
	c.sample = sample

	rs := &RuleSet{source: source, serveNothing: spec.ServeNothing}
	names := make(map[string]int, len(spec.Rules))
	literal := make(map[string][]*rule) // rules by the literal name they give
	for i := range spec.Rules {
		before := len(c.errs)
		r := c.compile(i, &spec.Rules[i])
		broken := len(c.errs) > before
		if r.name != "" {
			if first, dup := names[r.name]; dup {
				c.ruleError(r, path{"name"}, strconv.Quote(r.name), fmt.Sprintf("name already used by rules[%d]", first))
			} else {
				names[r.name] = i
			}
		}
		// Comparing a broken rule's sharing with the others would only
		// repeat its errors.
		if !broken && r.tmpl == nil && r.resource != "" {
			c.checkSharing(r, literal[r.resource])
			c.checkServe(r, literal[r.resource]) // serve.go
			c.checkKinds(r, literal[r.resource]) // vfio.go
			literal[r.resource] = append(literal[r.resource], r)
		}
		rs.rules = append(rs.rules, r)
	}
	rs.health = c.compileHealth(spec.Health) // health.go
	rs.draCompat = c.compileDRA(spec.DRA)    // dra.go
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	rs.warnings = c.warnings
	return rs, nil
}

// checkServeNothing checks that a file has rules unless it says
// serveNothing, and that a file saying serveNothing has none. An agent
// given a file without rules would withdraw every resource, and an emptied
// ConfigMap or a file cut short after "rules:" looks just like that, so
// serving nothing must be said in so many words.
func (c *checker) checkServeNothing(spec *fileSpec) {
	switch {
	case spec.ServeNothing && len(spec.Rules) > 0:
		c.add(false, &Error{Line: c.doc.line(path{"serveNothing"}), Rule: -1, Field: "serveNothing", Value: "true",
			Msg: fmt.Sprintf("says the file serves no device, but it has %d rules: remove the rules or serveNothing", len(spec.Rules))})
	case !spec.ServeNothing && len(spec.Rules) == 0:
		what := "missing"
		if c.doc.root != nil && child(c.doc.root, "rules") != nil {
			what = "empty"
		}
		c.add(false, &Error{Line: c.doc.line(path{"rules"}), Rule: -1, Field: "rules",
			Msg: what + ": the file would serve no device and withdraw every resource (an emptied or truncated file looks like this); " +
				"a file meant to serve nothing says serveNothing: true"})
	}
}

// checker collects the errors and warnings of one Parse.
type checker struct {
	source   string
	doc      *document
	schema   schema
	sample   *discovery.Inventory
	errs     []error
	warnings []string
}

// split turns a document path into a section ("" for rules, "health"), an
// index in it (-1 for none) and the path inside the rule or entry.
func (c *checker) split(p path) (string, int, path) {
	if len(p) >= 2 && (p[0] == "rules" || p[0] == "health") {
		if i, ok := p[1].(int); ok {
			section := ""
			if p[0] == "health" {
				section = "health"
			}
			return section, i, p[2:]
		}
	}
	return "", -1, p
}

// add records an error or, with warning set, a warning. It fills in the
// source and, from the document, the rule's name.
func (c *checker) add(warning bool, e *Error) {
	e.Source = c.source
	if e.Rule >= 0 && e.RuleName == "" {
		e.RuleName = c.doc.scalar(path{e.section(), e.Rule, "name"})
	}
	if warning {
		c.warnings = append(c.warnings, e.Error())
		return
	}
	c.errs = append(c.errs, e)
}

// ruleError records an error on a field of a rule.
func (c *checker) ruleError(r *rule, field path, value, msg string) {
	c.add(false, &Error{Line: c.doc.line(path{"rules", r.index}.with(field...)), Rule: r.index, RuleName: r.name,
		Field: field.String(), Value: value, Msg: msg})
}

// ruleWarning records a warning on a field of a rule.
func (c *checker) ruleWarning(r *rule, field path, value, msg string) {
	c.add(true, &Error{Line: c.doc.line(path{"rules", r.index}.with(field...)), Rule: r.index, RuleName: r.name,
		Field: field.String(), Value: value, Msg: msg})
}

// decodeError records a decoding failure, located in the document where the
// decoder says enough.
func (c *checker) decodeError(err error) {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		have, _, _ := strings.Cut(te.Value, " ")
		if at, line, ok := c.doc.locateTypeError(reflect.TypeFor[fileSpec](), te.Field, have); ok {
			section, rule, field := c.split(at)
			c.add(false, &Error{Line: line, Section: section, Rule: rule, Field: field.String(), Value: c.doc.scalar(at),
				Msg: fmt.Sprintf("must be %s, not %s", jsonTypeName(te.Type), have)})
			return
		}
		c.add(false, &Error{Rule: -1, Field: te.Field, Msg: fmt.Sprintf("must be %s, not %s", jsonTypeName(te.Type), te.Value)})
		return
	}
	msg := err.Error()
	for _, p := range []string{"error converting YAML to JSON: ", "error unmarshaling JSON: ", "while decoding JSON: ", "json: ", "yaml: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	c.add(false, &Error{Rule: -1, Msg: msg})
}

// jsonTypeName says in words what a Go type takes in YAML.
func jsonTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return t.String()
}

// compile validates one rule and turns it into its evaluated form,
// recording what is wrong with it.
func (c *checker) compile(i int, s *ruleSpec) *rule {
	r := &rule{
		index:        i,
		name:         s.Name,
		line:         c.doc.line(path{"rules", i}),
		devices:      s.Devices,
		resource:     s.Resource,
		resourceLine: c.doc.line(path{"rules", i, "resource"}),
	}
	if s.Name == "" {
		c.ruleError(r, path{"name"}, "", "required: rules are named in plans and explanations")
	}
	switch s.Devices {
	case plan.DeviceGPU, plan.DeviceMIG, plan.DeviceVFIO:
	case "":
		c.ruleError(r, path{"devices"}, "", `required: "gpu", "mig" or "vfio"`)
	default:
		c.ruleError(r, path{"devices"}, strconv.Quote(string(s.Devices)), `must be "gpu", "mig" or "vfio"`)
	}

	r.nfd = nfdv1alpha1.Rule{Name: s.Name, MatchFeatures: s.MatchFeatures, MatchAny: s.MatchAny}
	r.explainAll = c.checkMatcher(r, path{"matchFeatures"}, s.MatchFeatures)
	for j := range s.MatchAny {
		r.explainAny = append(r.explainAny, c.checkMatcher(r, path{"matchAny", j, "matchFeatures"}, s.MatchAny[j].MatchFeatures))
	}
	r.inputs, r.memoize = c.inputs(s)

	c.compileSelector(r, s.NodeSelector)
	c.compileServe(r, s.Serve) // serve.go
	c.compileMIG(r, s)         // migdynamic.go
	c.compileResource(r)
	c.compileSharing(r, s.Sharing)
	return r
}

// compileSelector validates the node selector.
func (c *checker) compileSelector(r *rule, sel *metav1.LabelSelector) {
	if sel == nil {
		return
	}
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		c.ruleError(r, path{"nodeSelector"}, "", err.Error())
		return
	}
	r.selector = selector
	r.nodeMiss = fmt.Sprintf("nodeSelector %q does not select this node", selector.String())
}

// compileResource validates a literal resource name, or parses a template
// and tries it on a sample device.
func (c *checker) compileResource(r *rule) {
	field := path{"resource"}
	switch {
	case r.resource == "":
		c.ruleError(r, field, "", "required: the extended resource name, e.g. nvidia.com/gpu")
	case !isTemplate(r.resource):
		if err := plan.ValidateResourceName(r.resource); err != nil {
			c.ruleError(r, field, "", err.Error())
		}
	default:
		t, err := parseTemplate(r.name, r.resource)
		if err != nil {
			c.ruleError(r, field, strconv.Quote(r.resource), "invalid template: "+err.Error())
			return
		}
		if r.devices != plan.DeviceGPU && r.devices != plan.DeviceMIG && r.devices != plan.DeviceVFIO {
			r.tmpl = t
			return
		}
		kind := r.templateKind()
		attrs := sampleAttributes(c.sample, kind)
		name, err := executeTemplate(t, attrs)
		if err != nil {
			c.ruleError(r, field, strconv.Quote(r.resource), "template fails on a sample "+string(kind)+" device: "+err.Error())
			return
		}
		r.tmpl = t
		r.tmplInputs, r.tmplMemoize = templateInputs(t, attrs)
		if err := templateNameError(name); err != nil {
			c.ruleWarning(r, field, strconv.Quote(r.resource),
				fmt.Sprintf("on a sample %s device (%s) the template gives an invalid name: %v", kind, sampleDescription(c.sample, kind), err))
		}
	}
}

// sampleDescription names the sample device of a kind in warnings.
func sampleDescription(inv *discovery.Inventory, kind plan.DeviceKind) string {
	switch kind {
	case plan.DeviceMIG:
		return inv.GPUs[1].Product + " MIG " + inv.GPUs[1].MIGDevices[0].Profile
	case plan.DeviceVFIO:
		return inv.VFIO[0].Product + " on vfio-pci"
	}
	return inv.GPUs[0].Product
}

// compileSharing validates the sharing settings and normalizes them, by
// the strategy table of the plan package.
func (c *checker) compileSharing(r *rule, s *plan.SharingSpec) {
	var errs field.ErrorList
	r.sharing, errs = s.Compile(field.NewPath("sharing"), r.devices)
	for _, e := range errs {
		value := ""
		if e.Type != field.ErrorTypeRequired && e.Type != field.ErrorTypeForbidden {
			value = fieldValue(e.BadValue)
		}
		var p path
		for _, part := range strings.Split(e.Field, ".") {
			p = append(p, part)
		}
		c.ruleError(r, p, value, e.Detail)
	}
}

// fieldValue formats a field error's value as rules errors show values:
// strings quoted, numbers as written.
func fieldValue(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case plan.SharingStrategy:
		return strconv.Quote(string(v))
	default:
		return fmt.Sprint(v)
	}
}

// MisspeltBuiltin returns Load's error for a rules name that is neither a
// builtin nor an existing file but is within two edits of a builtin name
// ("mixd"), and nil otherwise: a missing file whose name is far from every
// builtin may still appear (a ConfigMap not mounted yet), a misspelt
// builtin never will. `featureplug run` checks its --rules with it before
// starting.
func MisspeltBuiltin(nameOrPath string) error {
	if nameOrPath == "" || slices.Contains(BuiltinNames(), nameOrPath) {
		return nil
	}
	_, err := os.Stat(nameOrPath)
	if !errors.Is(err, fs.ErrNotExist) || suggestBuiltin(nameOrPath, BuiltinNames()) == "" {
		return nil
	}
	return notFoundError(nameOrPath, err)
}

// notFoundError says that a rules name is neither a file nor a builtin,
// suggesting the closest builtin name when one is near.
func notFoundError(nameOrPath string, err error) error {
	builtins := BuiltinNames()
	msg := fmt.Sprintf("rules %q is neither a file nor a builtin (builtins: %s)", nameOrPath, strings.Join(builtins, ", "))
	if s := suggestBuiltin(nameOrPath, builtins); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	return fmt.Errorf("%s: %w", msg, err)
}

// suggestBuiltin returns the builtin name closest to name when it is within
// two edits (or differs only in case), else "".
func suggestBuiltin(name string, builtins []string) string {
	best, bestDist := "", 3
	for _, b := range builtins {
		d := editDistance(strings.ToLower(name), b)
		if d < bestDist {
			best, bestDist = b, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between two short strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
