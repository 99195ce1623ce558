package nvidiaconfig_test

import (
	"strings"
	"testing"

	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/nvidiaconfig"
)

// TestSettingsFromFlags: the flags featureplug's agent honours become
// settings with featureplug's values; the others stay warnings that show
// their values.
func TestSettingsFromFlags(t *testing.T) {
	res, err := nvidiaconfig.ConvertData("nv.yaml", []byte(`version: v1
flags:
  plugin:
    deviceListStrategy: [volume-mounts, envvar]
    deviceIDStrategy: index
    cdiAnnotationPrefix: cdi.example.com/
    nvidiaCTKPath: /usr/local/bin/nvidia-ctk
  gfd:
    sleepInterval: 90s
    noTimestamp: false
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range res.Settings {
		got = append(got, s.String()+" <- "+s.Field)
	}
	want := []string{
		"--timestamp-label=true <- flags.gfd.noTimestamp",
		"--rediscover-interval=1m30s <- flags.gfd.sleepInterval",
		"--cdi-annotation-prefix=cdi.example.com/ <- flags.plugin.cdiAnnotationPrefix",
		"--device-id-strategy=index <- flags.plugin.deviceIDStrategy",
		"--device-list-strategy=volume-mounts,envvar <- flags.plugin.deviceListStrategy",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("settings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], `flags.plugin.nvidiaCTKPath: no equivalent in the rules`) ||
		!strings.Contains(res.Warnings[0], `(have "/usr/local/bin/nvidia-ctk")`) {
		t.Errorf("warnings %q", res.Warnings)
	}
}

func TestSettingErrors(t *testing.T) {
	for _, tt := range []struct{ name, config, want string }{
		{"unknown strategy", "version: v1\nflags:\n  plugin:\n    deviceListStrategy: magic\n",
			`nv.yaml: flags.plugin.deviceListStrategy: unknown strategy (use envvar, volume-mounts, cdi-annotations, cdi-cri) (have "magic")`},
		{"bad id strategy", "version: v1\nflags:\n  plugin:\n    deviceIDStrategy: serial\n",
			`flags.plugin.deviceIDStrategy: must be "uuid" or "index" (have "serial")`},
		{"bad interval", "version: v1\nflags:\n  gfd:\n    sleepInterval: soon\n",
			`flags.gfd.sleepInterval: must be a positive duration, e.g. 60s (have "soon")`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := nvidiaconfig.ConvertData("nv.yaml", []byte(tt.config)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestSettingsDifferBetweenConfigs: one agent serves every node, so named
// configs must agree on the flags it applies (a config without the field
// has NVIDIA's default).
func TestSettingsDifferBetweenConfigs(t *testing.T) {
	cm := []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: plugin-configs}
data:
  a: |
    version: v1
    flags: {plugin: {deviceListStrategy: volume-mounts}}
  b: |
    version: v1
    flags: {migStrategy: mixed}
`)
	_, err := nvidiaconfig.ConvertData("cm.yaml", cm)
	for _, want := range []string{"flags.plugin.deviceListStrategy differs between the configs", `a: "volume-mounts" (volume-mounts)`,
		"b: absent: NVIDIA's default (envvar)", "--device-list-strategy applies to every node of an agent"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want one containing %q", err, want)
		}
	}
	same := []byte(strings.ReplaceAll(string(cm), "flags: {migStrategy: mixed}", "flags: {migStrategy: mixed, plugin: {deviceListStrategy: [volume-mounts]}}"))
	res, err := nvidiaconfig.ConvertData("cm.yaml", same)
	if err != nil || len(res.Settings) != 1 || res.Settings[0].String() != "--device-list-strategy=volume-mounts" {
		t.Errorf("configs that agree: %v, %+v", err, res)
	}
}

// TestPassDeviceSpecsRefused: passDeviceSpecs: true asks for what
// featureplug does not give; run --rules (rules.Parse) refuses the config,
// naming what to use instead, and import warns.
func TestPassDeviceSpecsRefused(t *testing.T) {
	data := []byte("version: v1\nflags:\n  plugin:\n    passDeviceSpecs: true\n")
	_, err := rules.Parse("nv.yaml", data)
	if err == nil || !strings.Contains(err.Error(), "nv.yaml: flags.plugin.passDeviceSpecs: featureplug does not pass device nodes") ||
		!strings.Contains(err.Error(), "--device-list-strategy cdi-annotations or cdi-cri") {
		t.Errorf("rules.Parse: %v", err)
	}
	res, err := nvidiaconfig.ConvertData("nv.yaml", data)
	if err != nil || len(res.Refused) != 1 {
		t.Errorf("import: %v, %+v", err, res)
	}
	if _, err := rules.Parse("nv.yaml", []byte("version: v1\nflags:\n  plugin:\n    passDeviceSpecs: false\n")); err != nil {
		t.Errorf("passDeviceSpecs: false (NVIDIA's default): %v", err)
	}
}

// TestImportHeaderExplainsOnAFakeNode: the imported file's header suggests
// an explain command that works without a GPU, and names the agent flags.
func TestImportHeaderExplainsOnAFakeNode(t *testing.T) {
	res, err := nvidiaconfig.ConvertData("nv.yaml", []byte("version: v1\nflags:\n  plugin:\n    deviceIDStrategy: index\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"#   featureplug rules explain --rules FILE --fake-node dgx-h100\n", "#   --device-id-strategy=index   (flags.plugin.deviceIDStrategy \"index\")\n"} {
		if !strings.Contains(string(res.Rules), want) {
			t.Errorf("the header lacks %q:\n%s", want, res.Rules)
		}
	}
}
