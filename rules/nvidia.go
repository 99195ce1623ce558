package rules

import (
	"bytes"

	"github.com/featureplug/featureplug/rules/nvidiaconfig"
)

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
	rs, err = Parse(source+" (converted from NVIDIA's config)", res.Rules)
	if err != nil {
		return nil, true, err
	}
	rs.warnings = append(res.Warnings, rs.warnings...)
	return rs, true, nil
}
