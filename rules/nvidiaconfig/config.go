// Package nvidiaconfig reads the config files of NVIDIA's Kubernetes device
// plugin (k8s-device-plugin, config version v1) and converts them into a
// featureplug ResourceRules file that advertises what NVIDIA's plugin would
// advertise with them: the same resource names, device counts and replicas.
//
// It knows the v1 format: flags.migStrategy (none, single, mixed),
// sharing.timeSlicing and sharing.mps with renameByDefault,
// failRequestsGreaterThanOne and resources[] of name, rename, devices and
// replicas, and resources.gpus / resources.mig patterns. It follows what the
// released plugin does with them, not only what the format allows: the
// plugin ignores a rename other than renameByDefault's "<name>.shared", a
// devices list or count, and the resources patterns (each with a warning),
// so the converted rules ignore them too and say how to get them with
// featureplug. The flags featureplug's agent has too (the device-list and
// device-ID strategies, the CDI annotation prefix, GFD's interval and
// timestamp) are Settings: flags of featureplug run, which `run --rules`
// with the config applies and `rules import` names in the file's header.
// passDeviceSpecs: true, which featureplug cannot give, is Refused. Every
// other field without an equivalent is a warning that says what to do
// instead.
//
// Several named configs (the keys of a ConfigMap, or files named after the
// config) become one rules file whose rules select nodes by the
// nvidia.com/device-plugin.config label, as NVIDIA's config manager does;
// the default config applies to nodes without the label.
//
// The package only produces rules text; the rules package loads it.
package nvidiaconfig

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/featureplug/featureplug/rules/plan"
)

// Version is the only config version NVIDIA's plugin (and this package)
// reads.
const Version = "v1"

// NodeLabel is the node label NVIDIA's config manager picks a named config
// by.
const NodeLabel = "nvidia.com/device-plugin.config"

// MIG strategies of flags.migStrategy.
const (
	MIGStrategyNone   = "none"
	MIGStrategySingle = "single"
	MIGStrategyMixed  = "mixed"
)

// Error is a problem in an NVIDIA config that stops its conversion. It names
// the file, the config (for a named config), the field and the value.
type Error struct {
	// File is the file the config came from.
	File string
	// Config is the config's name, empty for a lone unnamed config.
	Config string
	// Field is the path of the field, e.g. "sharing.timeSlicing.resources[0].replicas".
	Field string
	// Value is the offending value as written, empty when there is none.
	Value string
	// Msg says what is wrong.
	Msg string
}

// Error formats the problem as
//
//	cm.yaml: config "a": sharing.timeSlicing.resources[0].replicas: must be at least 1 (have 0)
func (e *Error) Error() string {
	return where(e.File, e.Config, e.Field) + e.Msg + have(e.Value)
}

// where formats the location of a problem or warning.
func where(file, config, field string) string {
	var b strings.Builder
	b.WriteString(file + ": ")
	if config != "" {
		b.WriteString("config " + strconv.Quote(config) + ": ")
	}
	if field != "" {
		b.WriteString(field + ": ")
	}
	return b.String()
}

// have formats a value in a message.
func have(v string) string {
	if v == "" {
		return ""
	}
	return " (have " + v + ")"
}

// Config is one NVIDIA device-plugin config, as far as it decides what is
// advertised.
type Config struct {
	// File and Name say where the config came from; Name is empty for a
	// lone config.
	File, Name string
	// Origin says in words where in File the config is, e.g. `data key "a"`.
	Origin string
	// MIGStrategy is flags.migStrategy: none (the default), single or mixed.
	MIGStrategy string
	// TimeSlicing and MPS are sharing.timeSlicing and sharing.mps; nil when
	// absent or without resources.
	TimeSlicing, MPS *Replicated
	// Patterns counts the entries of resources.gpus and resources.mig.
	Patterns int
	// Settings are the flags featureplug's agent applies itself
	// (settings.go), in field order.
	Settings []Setting

	warnings []string
	refused  []string
}

// Replicated is sharing.timeSlicing or sharing.mps.
type Replicated struct {
	// Field is "sharing.timeSlicing" or "sharing.mps".
	Field string
	// RenameByDefault advertises each shared resource as <name>.shared.
	RenameByDefault bool
	// FailRequestsGreaterThanOne as written; nil when absent.
	FailRequestsGreaterThanOne *bool
	// Resources are the shared resources, in order.
	Resources []Resource
}

// Resource is one entry of a sharing's resources.
type Resource struct {
	// Name is the resource shared, e.g. nvidia.com/gpu.
	Name string
	// Rename is the name asked for, empty when none.
	Rename string
	// Devices is the devices field as written; "all" when absent.
	Devices string
	// Replicas is how many containers share one device.
	Replicas int
}

// Warnings returns what the config asks for that the conversion cannot
// give, each naming the file, config and field and saying what to do.
func (c *Config) Warnings() []string { return slices.Clone(c.warnings) }

// Refused returns what the config asks for that featureplug cannot give
// and whose loss would change what containers get, each saying what to do
// instead; `run --rules` refuses such a config.
func (c *Config) Refused() []string { return slices.Clone(c.refused) }

// parser walks one decoded config, collecting errors and warnings.
type parser struct {
	cfg  *Config
	errs []error
}

func (p *parser) fail(field, value, msg string) {
	p.errs = append(p.errs, &Error{File: p.cfg.File, Config: p.cfg.Name, Field: field, Value: value, Msg: msg})
}

func (p *parser) warn(field, value, msg string) {
	p.cfg.warnings = append(p.cfg.warnings, where(p.cfg.File, p.cfg.Name, field)+msg+have(value))
}

// ParseConfig parses one config (YAML or JSON). file and name say where it
// came from in errors and warnings (name is empty for a lone config; origin
// may say where in the file it is). It returns every problem, each an
// *Error, joined.
func ParseConfig(file, name, origin string, data []byte) (*Config, error) {
	c := &Config{File: file, Name: name, Origin: origin, MIGStrategy: MIGStrategyNone}
	p := &parser{cfg: c}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		p.fail("", "", "invalid YAML: "+strings.TrimPrefix(err.Error(), "error converting YAML to JSON: yaml: "))
		return nil, joinErrors(p.errs)
	}
	if doc == nil {
		doc = map[string]any{}
	}
	top, ok := p.mapping("", doc)
	if !ok {
		return nil, joinErrors(p.errs)
	}
	if av, ok := top["apiVersion"]; ok {
		p.fail("apiVersion", scalar(av), "not an NVIDIA device-plugin config (those have no apiVersion; a featureplug rules file is read as it is)")
		return nil, joinErrors(p.errs)
	}
	for _, k := range sortedKeys(top) {
		v := top[k]
		switch k {
		case "version":
			if s, ok := p.str(k, v); ok && s != Version && s != "" {
				p.fail(k, strconv.Quote(s), "unknown version: only "+Version+" is known (to NVIDIA's plugin too)")
			}
		case "flags":
			p.flags(v)
		case "resources":
			p.resources(v)
		case "sharing":
			p.sharing(v)
		case "imex":
			p.warn(k, "", "IMEX channels have no equivalent: featureplug does not inject IMEX channels; keep NVIDIA's plugin on nodes whose workloads need them")
		default:
			p.warn(k, "", "unknown field, ignored (NVIDIA's plugin ignores it too)")
		}
	}
	if len(p.errs) > 0 {
		return nil, joinErrors(p.errs)
	}
	return c, nil
}

// flagAdvice says, per flag without an equivalent in the rules, what to do
// instead.
var flagAdvice = map[string]string{
	"failOnInitError":         "featureplug never exits when NVML cannot start: it serves nothing, reports it and keeps running; nothing to set",
	"nvidiaDriverRoot":        "not needed with the NVIDIA container runtime; otherwise deploy featureplug with the driver root mounted (Helm driverRoot, kustomize components/driver-root or components/driver-container)",
	"nvidiaDevRoot":           "featureplug takes device nodes from the driver root it is deployed with (Helm driverRoot, kustomize components/driver-root)",
	"gdsEnabled":              "GPUDirect Storage is not supported: featureplug does not inject GDS devices",
	"mofedEnabled":            "MOFED is not supported: featureplug does not inject MOFED devices",
	"gdrcopyEnabled":          "GDRCopy is not supported: featureplug does not inject the gdrdrv device",
	"useNodeFeatureAPI":       "featureplug always publishes a NodeFeature object (run --publish nodefeature, the default; --publish file for nfd-worker's feature file)",
	"deviceDiscoveryStrategy": "featureplug discovers GPUs through NVML only; Tegra and VFIO discovery are not supported",
	"plugin":                  "",
	"gfd":                     "",
}

// pluginAdvice is flagAdvice for flags.plugin.*; the fields featureplug's
// agent honours (settingSpecs) are not here.
var pluginAdvice = map[string]string{
	"nvidiaCTKPath":       "featureplug writes CDI specs without nvidia-ctk; the CDI hook path is set with featureplug run --cdi-hook-path",
	"containerDriverRoot": "featureplug reads the driver from the root it is deployed with (Helm driverRoot, kustomize components/driver-root)",
}

// gfdAdvice is flagAdvice for flags.gfd.*.
var gfdAdvice = map[string]string{
	"oneshot":         "featureplug always runs as a daemon; use featureplug discover for a one-shot listing",
	"outputFile":      "featureplug publishes a NodeFeature (the same labels); for nfd-worker's feature file use featureplug run --publish file --features-file PATH (kustomize overlays/features-d)",
	"machineTypeFile": "featureplug reads the machine type from DMI; nothing to set",
}

func (p *parser) flags(v any) {
	m, ok := p.mapping("flags", v)
	if !ok {
		return
	}
	for _, k := range sortedKeys(m) {
		f := "flags." + k
		switch k {
		case "migStrategy":
			s, ok := p.str(f, m[k])
			if !ok {
				continue
			}
			switch s {
			case MIGStrategyNone, MIGStrategySingle, MIGStrategyMixed:
				p.cfg.MIGStrategy = s
			default:
				p.fail(f, strconv.Quote(s), `must be "none", "single" or "mixed"`)
			}
		case "plugin", "gfd":
			advice := pluginAdvice
			if k == "gfd" {
				advice = gfdAdvice
			}
			sub, ok := p.mapping(f, m[k])
			if !ok {
				continue
			}
			for _, sk := range sortedKeys(sub) {
				field := f + "." + sk
				if _, honoured := settingSpecs[field]; honoured {
					p.setting(field, sub[sk])
				} else if field == "flags.plugin.passDeviceSpecs" {
					p.passDeviceSpecs(field, sub[sk])
				} else if a, known := advice[sk]; known {
					p.warn(field, scalar(sub[sk]), "no equivalent in the rules: "+a)
				} else {
					p.warn(f+"."+sk, "", "unknown field, ignored (NVIDIA's plugin ignores it too)")
				}
			}
		case "renameByDefault", "failRequestsGreaterThanOne":
			p.warn(f, scalar(m[k]), "ignored: NVIDIA's plugin reads it only under sharing.timeSlicing or sharing.mps, so it has no effect here either")
		default:
			if a, known := flagAdvice[k]; known {
				p.warn(f, scalar(m[k]), "no equivalent in the rules: "+a)
			} else {
				p.warn(f, "", "unknown field, ignored (NVIDIA's plugin ignores it too)")
			}
		}
	}
}

// passDeviceSpecs reads flags.plugin.passDeviceSpecs: true asks for the
// device nodes in every Allocate response, which featureplug does not give.
func (p *parser) passDeviceSpecs(field string, v any) {
	b, ok := p.boolean(field, v)
	if ok && b {
		p.refuse(field, "true", "featureplug does not pass device nodes in Allocate responses: give containers their device nodes through CDI "+
			"(featureplug run --device-list-strategy cdi-annotations or cdi-cri, which write them into the CDI spec) and remove the field")
	}
}

func (p *parser) resources(v any) {
	m, ok := p.mapping("resources", v)
	if !ok {
		return
	}
	for _, k := range sortedKeys(m) {
		f := "resources." + k
		if k != "gpus" && k != "mig" {
			p.warn(f, "", "unknown field, ignored (NVIDIA's plugin ignores it too)")
			continue
		}
		list, ok := p.list(f, m[k])
		if !ok {
			continue
		}
		for i, e := range list {
			ef := fmt.Sprintf("%s[%d]", f, i)
			em, ok := p.mapping(ef, e)
			if !ok {
				continue
			}
			pattern, _ := p.str(ef+".pattern", em["pattern"])
			name, _ := p.str(ef+".name", em["name"])
			if em["pattern"] == nil {
				p.fail(ef+".pattern", "", "required (NVIDIA's plugin refuses the config without it)")
			}
			if em["name"] == nil {
				p.fail(ef+".name", "", "required (NVIDIA's plugin refuses the config without it)")
			}
			p.cfg.Patterns++
			kind, attr := "gpu", "product"
			if k == "mig" {
				kind, attr = "mig", "profile"
			}
			p.warn(ef, fmt.Sprintf("pattern %q, name %q", pattern, name),
				fmt.Sprintf("ignored, as NVIDIA's plugin ignores it (\"Customizing the 'resources' field is not yet supported\"); "+
					"to advertise these devices under that name with featureplug, add a devices: %s rule matching nvidia.%s %s before the others", kind, kind, attr))
		}
	}
}

func (p *parser) sharing(v any) {
	m, ok := p.mapping("sharing", v)
	if !ok {
		return
	}
	for _, k := range sortedKeys(m) {
		f := "sharing." + k
		switch k {
		case "timeSlicing":
			p.cfg.TimeSlicing = p.replicated(f, m[k])
		case "mps":
			p.cfg.MPS = p.replicated(f, m[k])
		default:
			p.warn(f, "", "unknown field, ignored (NVIDIA's plugin ignores it too)")
		}
	}
}

func (p *parser) replicated(f string, v any) *Replicated {
	if v == nil {
		return nil
	}
	m, ok := p.mapping(f, v)
	if !ok {
		return nil
	}
	r := &Replicated{Field: f}
	for _, k := range sortedKeys(m) {
		kf := f + "." + k
		switch k {
		case "renameByDefault":
			r.RenameByDefault, _ = p.boolean(kf, m[k])
		case "failRequestsGreaterThanOne":
			if b, ok := p.boolean(kf, m[k]); ok {
				r.FailRequestsGreaterThanOne = &b
			}
		case "resources":
			list, ok := p.list(kf, m[k])
			if !ok {
				continue
			}
			for i, e := range list {
				if res, ok := p.resource(fmt.Sprintf("%s[%d]", kf, i), e); ok {
					r.Resources = append(r.Resources, res)
				}
			}
		case "strategy":
			if s, ok := p.str(kf, m[k]); ok && s != "" {
				p.fail(kf, strconv.Quote(s), "unknown time-slicing strategy (NVIDIA's plugin knows none but the empty one)")
			}
		default:
			p.warn(kf, "", "unknown field, ignored (NVIDIA's plugin ignores it too)")
		}
	}
	if len(r.Resources) == 0 {
		if !p.failedUnder(f + ".resources") {
			p.fail(f+".resources", "", "no resources specified (NVIDIA's plugin refuses such a config)")
		}
		return nil
	}
	return r
}

// failedUnder reports whether an error was recorded at or below a field.
func (p *parser) failedUnder(field string) bool {
	for _, err := range p.errs {
		if e, ok := err.(*Error); ok && strings.HasPrefix(e.Field, field) {
			return true
		}
	}
	return false
}

func (p *parser) resource(f string, v any) (Resource, bool) {
	m, ok := p.mapping(f, v)
	if !ok {
		return Resource{}, false
	}
	r := Resource{Devices: "all"}
	good := true
	for _, k := range sortedKeys(m) {
		kf := f + "." + k
		switch k {
		case "name", "rename":
			s, ok := p.str(kf, m[k])
			if !ok {
				good = false
				continue
			}
			if err := checkResourceName(s); err != nil {
				p.fail(kf, strconv.Quote(s), err.Error())
				good = false
				continue
			}
			if k == "name" {
				r.Name = qualify(s)
			} else {
				r.Rename = qualify(s)
			}
		case "replicas":
			n, ok := p.integer(kf, m[k])
			switch {
			case !ok:
				good = false
			case n < 1:
				p.fail(kf, strconv.Itoa(n), "must be at least 1")
				good = false
			case plan.CheckReplicas(n) != nil:
				p.fail(kf, strconv.Itoa(n), plan.CheckReplicas(n).Error())
				good = false
			default:
				r.Replicas = n
			}
		case "devices":
			d, ok := p.devices(kf, m[k])
			if !ok {
				good = false
			}
			r.Devices = d
		default:
			p.warn(kf, "", "unknown field, ignored (NVIDIA's plugin ignores it too)")
		}
	}
	if _, ok := m["name"]; !ok {
		p.fail(f+".name", "", "required: the resource to share, e.g. nvidia.com/gpu")
		good = false
	}
	if _, ok := m["replicas"]; !ok {
		p.fail(f+".replicas", "", "required: how many containers share one device")
		good = false
	}
	return r, good
}

// devices validates a devices field as NVIDIA's plugin does: "all", a
// count above 0, or a list of GPU indices, MIG indices (gpu:mig) and
// GPU or MIG UUIDs. It returns the field as written, for messages.
func (p *parser) devices(f string, v any) (string, bool) {
	switch v := v.(type) {
	case string:
		if v != "all" {
			p.fail(f, strconv.Quote(v), `the only string allowed is "all"`)
			return v, false
		}
		return v, true
	case float64:
		if v != math.Trunc(v) || v <= 0 {
			p.fail(f, scalar(v), "a count of devices must be an integer above 0")
			return scalar(v), false
		}
		return scalar(v), true
	case []any:
		var refs []string
		good := true
		for i, e := range v {
			s := scalar(e)
			if _, isNum := e.(float64); isNum || isDeviceRef(s) {
				refs = append(refs, s)
				continue
			}
			p.fail(fmt.Sprintf("%s[%d]", f, i), strconv.Quote(s), "must be a GPU index, a MIG index (gpu:mig) or a GPU or MIG UUID")
			good = false
		}
		return "[" + strings.Join(refs, ", ") + "]", good
	}
	p.fail(f, scalar(v), `must be "all", a count or a list of device indices or UUIDs`)
	return scalar(v), false
}

// isDeviceRef reports whether s names a device as NVIDIA's devices lists
// may: a GPU index, a MIG index (gpu:mig) or a GPU or MIG UUID.
func isDeviceRef(s string) bool {
	isUint := func(s string) bool { _, err := strconv.ParseUint(s, 10, 0); return err == nil }
	if isUint(s) {
		return true
	}
	if a, b, ok := strings.Cut(s, ":"); ok && isUint(a) && isUint(b) {
		return true
	}
	return strings.HasPrefix(s, "GPU-") || strings.HasPrefix(s, "MIG-")
}

// checkResourceName checks a resource name as NVIDIA's plugin does: a
// name without a domain gets nvidia.com/, and the part after the slash
// must be a DNS subdomain.
func checkResourceName(s string) error {
	full := qualify(s)
	if len(full) > 63 {
		return fmt.Errorf("fully-qualified resource name must be 63 characters or less")
	}
	_, name, _ := strings.Cut(full, "/")
	if name == "" || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-.") != "" ||
		!isAlnum(name[0]) || !isAlnum(name[len(name)-1]) {
		return fmt.Errorf("must be a lowercase DNS subdomain after the domain, e.g. nvidia.com/gpu")
	}
	return nil
}

func isAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

// qualify prefixes nvidia.com/ to a name without one, as NVIDIA's plugin
// does.
func qualify(s string) string {
	if strings.HasPrefix(s, "nvidia.com/") {
		return s
	}
	return "nvidia.com/" + s
}

// mapping returns v as a mapping, or records that it is not.
func (p *parser) mapping(f string, v any) (map[string]any, bool) {
	if v == nil {
		return map[string]any{}, true
	}
	m, ok := v.(map[string]any)
	if !ok {
		p.fail(f, scalar(v), "must be a mapping")
	}
	return m, ok
}

func (p *parser) list(f string, v any) ([]any, bool) {
	if v == nil {
		return nil, true
	}
	l, ok := v.([]any)
	if !ok {
		p.fail(f, scalar(v), "must be a list")
	}
	return l, ok
}

func (p *parser) str(f string, v any) (string, bool) {
	if v == nil {
		return "", true
	}
	s, ok := v.(string)
	if !ok {
		p.fail(f, scalar(v), "must be a string")
	}
	return s, ok
}

func (p *parser) boolean(f string, v any) (bool, bool) {
	b, ok := v.(bool)
	if !ok {
		p.fail(f, scalar(v), "must be true or false")
	}
	return b, ok
}

func (p *parser) integer(f string, v any) (int, bool) {
	n, ok := v.(float64)
	if !ok || n != math.Trunc(n) || math.Abs(n) > 1<<31 {
		p.fail(f, scalar(v), "must be an integer")
		return 0, false
	}
	return int(n), true
}

// scalar formats a decoded YAML value for messages.
func scalar(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(v)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	case []any:
		const limit = 8
		parts := make([]string, 0, min(len(v), limit+1))
		for i, e := range v {
			if i == limit {
				parts = append(parts, fmt.Sprintf("... %d more", len(v)-limit))
				break
			}
			parts = append(parts, scalar(e))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprint(v)
}

// sortedKeys returns a mapping's keys sorted, for reproducible messages.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
