package main

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/featureplug/featureplug/cmd/internal/agentconfig"
	"github.com/featureplug/featureplug/rules"
)

// settingsOf returns the agent flags a rule set sets (an NVIDIA config's
// flags.plugin.deviceListStrategy, ...), or none.
func settingsOf(rs agentconfig.RuleSet) []rules.AgentSetting {
	if s, ok := rs.(interface{ AgentSettings() []rules.AgentSetting }); ok {
		return s.AgentSettings()
	}
	return nil
}

// applyAgentSettings gives run's flags the values the --rules file sets
// (an NVIDIA config's device-list strategy, device-ID strategy, ...), so
// that the config means with featureplug what it meant with NVIDIA's
// plugin. A flag given on the command line or by its environment variable
// with another value is an error naming both. A file that does not load is
// left to the agent, which reports it.
func applyAgentSettings(fs *pflag.FlagSet, rulesName string, log *slog.Logger) error {
	if rulesName == "" {
		return nil
	}
	rs, err := rules.Load(rulesName)
	if err != nil {
		return nil
	}
	settings := rs.AgentSettings()
	var conflicts []string
	for _, s := range settings {
		fl := fs.Lookup(s.Flag)
		if fl == nil {
			return fmt.Errorf("%s: %s sets --%s, which featureplug run does not have (a bug, please report it)", s.Where, s.Field, s.Flag)
		}
		if fl.Changed && !sameFlagValue(fl, s.Value) {
			conflicts = append(conflicts, fmt.Sprintf("--%s=%s (from the command line or $%s) conflicts with %s %s in %s, which means --%s=%s",
				s.Flag, flagValue(fl), envName(s.Flag), s.Field, s.Written, s.Where, s.Flag, s.Value))
		}
	}
	if len(conflicts) > 0 {
		return usageErrorf("%s: give each once, as a flag or in the config", strings.Join(conflicts, "; "))
	}
	for _, s := range settings {
		if fs.Lookup(s.Flag).Changed {
			continue
		}
		if err := fs.Set(s.Flag, s.Value); err != nil {
			return fmt.Errorf("%s: %s %s: --%s=%s: %w", s.Where, s.Field, s.Written, s.Flag, s.Value, err)
		}
		log.Info("flag set by the NVIDIA config given as --rules", "flag", "--"+s.Flag, "value", s.Value, "field", s.Field, "config", s.Where)
	}
	return nil
}

// refuseSettingChanges wraps the agent's rules engine so that a rules
// file whose agent settings differ from the flags the agent started with
// is refused (the last good rules keep serving): those flags are read
// once, at start, and the error says to restart the agent.
func refuseSettingChanges(e agentconfig.RulesEngine, fs *pflag.FlagSet) agentconfig.RulesEngine {
	check := func(rs agentconfig.RuleSet, err error) (agentconfig.RuleSet, error) {
		if err != nil {
			return rs, err
		}
		var diffs []string
		for _, s := range settingsOf(rs) {
			fl := fs.Lookup(s.Flag)
			if fl != nil && !sameFlagValue(fl, s.Value) {
				diffs = append(diffs, fmt.Sprintf("%s %s (--%s=%s) differs from the agent's --%s=%s", s.Field, s.Written, s.Flag, s.Value, s.Flag, flagValue(fl)))
			}
		}
		if len(diffs) > 0 {
			return nil, fmt.Errorf("%s: %s; the agent reads these flags at start: restart it to apply them (kubectl -n featureplug rollout restart daemonset/featureplug)",
				rs.Source(), strings.Join(diffs, "; "))
		}
		return rs, nil
	}
	load, parse := e.Load, e.Parse
	e.Load = func(name string) (agentconfig.RuleSet, error) { return check(load(name)) }
	e.Parse = func(source string, data []byte) (agentconfig.RuleSet, error) { return check(parse(source, data)) }
	return e
}

// flagValue is a flag's value as its command line would give it:
// "envvar,volume-mounts" for a list.
func flagValue(fl *pflag.Flag) string {
	if sv, ok := fl.Value.(pflag.SliceValue); ok {
		return strings.Join(sv.GetSlice(), ",")
	}
	return fl.Value.String()
}

// sameFlagValue reports whether a flag holds value (in its command-line
// syntax), comparing durations and booleans by what they mean.
func sameFlagValue(fl *pflag.Flag, value string) bool {
	cur := flagValue(fl)
	switch fl.Value.Type() {
	case "duration":
		a, errA := time.ParseDuration(cur)
		b, errB := time.ParseDuration(value)
		return errA == nil && errB == nil && a == b
	case "bool":
		a, errA := strconv.ParseBool(cur)
		b, errB := strconv.ParseBool(value)
		return errA == nil && errB == nil && a == b
	}
	return cur == value
}

// settingsSummary says which run flags a rule set sets, for rules check
// and rules explain: "" when none.
func settingsSummary(rs *rules.RuleSet) string {
	settings := rs.AgentSettings()
	if len(settings) == 0 {
		return ""
	}
	parts := make([]string, len(settings))
	for i, s := range settings {
		parts[i] = fmt.Sprintf("%s (%s)", s, s.Field)
	}
	return "sets the agent's flags (run --rules applies them): " + strings.Join(parts, ", ")
}
