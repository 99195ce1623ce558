package rules

import (
	"bytes"
	"errors"
	"slices"
	"strings"

	"github.com/featureplug/featureplug/rules/nvidiaconfig"
)

// AgentSetting is a flag of an NVIDIA device-plugin config that the agent
// applies itself (its device-list strategy, for instance), not the rules:
// one of featureplug run's flags with the value the config gives it.
type AgentSetting = nvidiaconfig.Setting

// AgentSettings returns the agent flags the rules file sets: none for a
// featureplug rules file, the honoured flags of an NVIDIA config (sorted by
// field). `run --rules` applies them at start, and refuses a flag given on
// its command line with another value, or a later file that changes one.
func (rs *RuleSet) AgentSettings() []AgentSetting { return slices.Clone(rs.settings) }

// parseNVIDIA loads data as an NVIDIA device-plugin config or a ConfigMap
// of them, when it is one (ok); the converted rules are parsed as a rules
// file and the conversion's warnings come first among the rule set's.
func parseNVIDIA(source string, data []byte) (rs *RuleSet, ok bool, err error) {
	// A cheap look first: Parse runs on every rules reload, and a rules
	// file names neither.
	if !bytes.Contains(data, []byte("version:")) && !bytes.Contains(data, []byte("ConfigMap")) {
		return nil, false, nil
	}
	if nvidiaconfig.Detect(data) == nvidiaconfig.Other {
		return nil, false, nil
	}
	res, err := nvidiaconfig.ConvertData(source, data)
	if err != nil {
		return nil, true, err
	}
	if len(res.Refused) > 0 {
		return nil, true, errors.New(strings.Join(res.Refused, "\n"))
	}
	rs, err = Parse(source+" (converted from NVIDIA's config)", res.Rules)
	if err != nil {
		return nil, true, err
	}
	rs.warnings = append(res.Warnings, rs.warnings...)
	rs.settings = res.Settings
	return rs, true, nil
}
