package nvidiaconfig

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Setting is a flag of an NVIDIA config that featureplug's agent applies
// itself rather than through the rules: one of featureplug run's own flags,
// with the value the config gives it. `run --rules` with the config takes
// it (an explicit, different flag is an error naming both); a rules file
// cannot carry it, so `rules import` says which flag to pass.
type Setting struct {
	// Field is the config's field, e.g. "flags.plugin.deviceListStrategy".
	Field string
	// Flag is featureplug run's flag, e.g. "device-list-strategy".
	Flag string
	// Value is the flag's value in featureplug's syntax, e.g.
	// "volume-mounts", "envvar,volume-mounts", "index", "1m0s", "true".
	Value string
	// Written is the field's value as the config writes it.
	Written string
	// Where names the file and config, e.g. `cm.yaml: config "a"`.
	Where string
}

// String formats a setting as the flag to give: "--device-list-strategy=volume-mounts".
func (s Setting) String() string { return "--" + s.Flag + "=" + s.Value }

// settingSpec is how one config field maps to an agent flag.
type settingSpec struct {
	flag string
	// nvidiaDefault is the flag value NVIDIA's components use when the
	// field is absent.
	nvidiaDefault string
	// parse converts the field's value into the flag's, or records why
	// it cannot.
	parse func(p *parser, field string, v any) (string, bool)
}

// settingSpecs are the config fields featureplug's agent honours, by
// field path.
var settingSpecs = map[string]settingSpec{
	"flags.plugin.deviceListStrategy": {flag: "device-list-strategy", nvidiaDefault: "envvar", parse: parseDeviceListStrategy},
	"flags.plugin.deviceIDStrategy": {flag: "device-id-strategy", nvidiaDefault: "uuid", parse: func(p *parser, f string, v any) (string, bool) {
		s, ok := p.str(f, v)
		if ok && s != "uuid" && s != "index" {
			p.fail(f, strconv.Quote(s), `must be "uuid" or "index"`)
			return "", false
		}
		return s, ok
	}},
	"flags.plugin.cdiAnnotationPrefix": {flag: "cdi-annotation-prefix", nvidiaDefault: "cdi.k8s.io/", parse: func(p *parser, f string, v any) (string, bool) {
		return p.str(f, v)
	}},
	"flags.gfd.sleepInterval": {flag: "rediscover-interval", nvidiaDefault: "1m0s", parse: func(p *parser, f string, v any) (string, bool) {
		s, ok := p.str(f, v)
		if !ok {
			return "", false
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			p.fail(f, strconv.Quote(s), "must be a positive duration, e.g. 60s")
			return "", false
		}
		return d.String(), true
	}},
	"flags.gfd.noTimestamp": {flag: "timestamp-label", nvidiaDefault: "true", parse: func(p *parser, f string, v any) (string, bool) {
		b, ok := p.boolean(f, v)
		return strconv.FormatBool(!b), ok
	}},
}

// deviceListStrategies are the strategies NVIDIA's plugin and featureplug
// both know, by the same names.
var deviceListStrategies = []string{"envvar", "volume-mounts", "cdi-annotations", "cdi-cri"}

// parseDeviceListStrategy reads flags.plugin.deviceListStrategy: one
// strategy or a list of them, as NVIDIA's plugin takes it.
func parseDeviceListStrategy(p *parser, f string, v any) (string, bool) {
	var list []string
	switch v := v.(type) {
	case string:
		list = []string{v}
	case []any:
		for i, e := range v {
			s, ok := e.(string)
			if !ok {
				p.fail(fmt.Sprintf("%s[%d]", f, i), scalar(e), "must be a string")
				return "", false
			}
			list = append(list, s)
		}
	default:
		p.fail(f, scalar(v), "must be a strategy or a list of them")
		return "", false
	}
	if len(list) == 0 {
		p.fail(f, "[]", "must name at least one strategy")
		return "", false
	}
	for _, s := range list {
		if !slices.Contains(deviceListStrategies, s) {
			p.fail(f, strconv.Quote(s), "unknown strategy (use "+strings.Join(deviceListStrategies, ", ")+")")
			return "", false
		}
	}
	return strings.Join(list, ","), true
}

// setting records a field featureplug's agent honours.
func (p *parser) setting(field string, v any) {
	spec := settingSpecs[field]
	value, ok := spec.parse(p, field, v)
	if !ok {
		return
	}
	p.cfg.Settings = append(p.cfg.Settings, Setting{Field: field, Flag: spec.flag, Value: value, Written: scalar(v),
		Where: strings.TrimSuffix(where(p.cfg.File, p.cfg.Name, ""), ": ")})
}

// refuse records a field whose value featureplug cannot give and whose
// loss would change what containers get: `run --rules` refuses the config
// (the rules package makes it an error), `rules import` warns.
func (p *parser) refuse(field, value, msg string) {
	p.cfg.refused = append(p.cfg.refused, where(p.cfg.File, p.cfg.Name, field)+msg+have(value))
}

// mergeSettings gives the settings of several configs as one list, since
// one agent applies them whichever config a node's label picks. A field
// whose value differs between configs (a config without the field counts
// with NVIDIA's default) is an error naming them.
func mergeSettings(cfgs []*Config) ([]Setting, error) {
	var fields []string
	for _, c := range cfgs {
		for _, s := range c.Settings {
			if !slices.Contains(fields, s.Field) {
				fields = append(fields, s.Field)
			}
		}
	}
	slices.Sort(fields)
	var out []Setting
	var errs []string
	for _, field := range fields {
		spec := settingSpecs[field]
		var first *Setting
		var values []string
		differ := false
		for _, c := range cfgs {
			value, written := spec.nvidiaDefault, "absent: NVIDIA's default"
			for i := range c.Settings {
				if c.Settings[i].Field == field {
					value, written = c.Settings[i].Value, c.Settings[i].Written
					if first == nil {
						first = &c.Settings[i]
					}
				}
			}
			name := c.Name
			if name == "" {
				name = c.File
			}
			values = append(values, fmt.Sprintf("%s: %s (%s)", name, written, value))
			differ = differ || (len(values) > 1 && value != settingValue(cfgs[0], field, spec))
		}
		if differ {
			errs = append(errs, fmt.Sprintf("%s differs between the configs (%s): featureplug run --%s applies to every node of an agent, "+
				"so give the configs one value, or run one agent (DaemonSet) per value", field, strings.Join(values, "; "), spec.flag))
			continue
		}
		out = append(out, *first)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: %s", cfgs[0].File, strings.Join(errs, "\n"))
	}
	return out, nil
}

// settingValue is the flag value a config gives field: its own, or
// NVIDIA's default.
func settingValue(c *Config, field string, spec settingSpec) string {
	for _, s := range c.Settings {
		if s.Field == field {
			return s.Value
		}
	}
	return spec.nvidiaDefault
}
