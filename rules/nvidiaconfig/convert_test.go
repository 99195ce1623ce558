package nvidiaconfig_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/nvidiaconfig"
	"github.com/featureplug/featureplug/rules/plan"
)

// advertised is what a device plugin advertises under one resource name:
// the devices, the replicas of each (the kubelet sees devices x replicas
// IDs), the sharing strategy and whether a container may ask for more
// than one replica.
type advertised struct {
	devices, replicas int
	strategy          plan.SharingStrategy
	onePerContainer   bool
}

func (a advertised) String() string {
	return fmt.Sprintf("%d devices x%d %s onePerContainer=%v", a.devices, a.replicas, a.strategy, a.onePerContainer)
}

// fakeInventory discovers a bundled fake node.
func fakeInventory(t *testing.T, name string) *discovery.Inventory {
	t.Helper()
	node, err := fakenode.Named(name)
	if err != nil {
		t.Fatalf("fake node %s: %v", name, err)
	}
	lib := node.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("fake NVML: %v", ret)
	}
	defer func() { _ = lib.Shutdown() }()
	inv, err := discovery.Discover(lib)
	if err != nil {
		t.Fatalf("discovering fake node %s: %v", name, err)
	}
	return inv
}

// advertisedBy plans a rule set on a node and returns what it advertises.
func advertisedBy(t *testing.T, rs *rules.RuleSet, inv *discovery.Inventory, labels map[string]string) map[string]advertised {
	t.Helper()
	p, err := rs.Plan(inv, labels)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	out := map[string]advertised{}
	for _, r := range p.Resources {
		strategy := r.Sharing.Strategy
		if strategy == "" {
			strategy = plan.SharingNone
		}
		out[r.Name] = advertised{devices: len(r.Devices), replicas: max(r.Sharing.Replicas, 1), strategy: strategy,
			onePerContainer: r.Sharing.FailRequestsGreaterThanOne || strategy == plan.SharingMPS}
	}
	return out
}

// The expectations below are what NVIDIA's device plugin advertises for
// each config on the node, worked out by hand from its documented
// semantics (README "Shared Access to GPUs", api/config/v1): replicas per
// device, renameByDefault appending ".shared", rename and devices ignored
// by the released plugin, MPS forcing failRequestsGreaterThanOne, mixed
// naming MIG devices nvidia.com/mig-<profile>, single naming every device
// nvidia.com/gpu. The fake nodes are discovery/fakenode/nodes/*.yaml.
func TestImportAdvertisesWhatNVIDIADoes(t *testing.T) {
	ts, mps, none := plan.SharingTimeSlicing, plan.SharingMPS, plan.SharingNone
	tests := []struct {
		file     string
		def      string
		node     string
		labels   map[string]string
		want     map[string]advertised
		warning  []string // substrings, one warning each
		settings []string // the agent flags the config sets
	}{
		{file: "time-slicing.yaml", node: "dgx-h100",
			want: map[string]advertised{"nvidia.com/gpu": {8, 10, ts, false}}},
		{file: "rename-by-default.yaml", node: "l40s-pcie",
			want: map[string]advertised{"nvidia.com/gpu.shared": {4, 10, ts, true}}},
		{file: "rename.yaml", node: "h100-nvl",
			want: map[string]advertised{"nvidia.com/gpu": {4, 4, ts, false}},
			warning: []string{
				`rename.yaml: flags.failOnInitError: no equivalent in the rules`,
				`sharing.timeSlicing.resources[0].rename: ignored, as NVIDIA's plugin ignores it (advertised as nvidia.com/gpu)`,
				`sharing.timeSlicing.resources[0].devices: ignored, as NVIDIA's plugin ignores it (every device of the resource is shared); to share only some devices with featureplug, give them a rule of their own, matching nvidia.gpu index or uuid, with its own resource name (have [0, 1])`,
			},
			settings: []string{"--device-id-strategy=uuid", "--device-list-strategy=envvar"}},
		{file: "mps.yaml", node: "hgx-b200",
			want: map[string]advertised{"nvidia.com/gpu": {8, 10, mps, true}}},
		// dgx-a100: GPUs 0-1 hold 3g.20gb, 2g.10gb and 2x 1g.5gb; GPUs 2-3
		// hold 3x 2g.10gb and 1g.5gb; GPUs 4-7 are whole.
		{file: "mixed.yaml", node: "dgx-a100",
			want: map[string]advertised{
				"nvidia.com/gpu":         {4, 8, ts, false},
				"nvidia.com/mig-1g.5gb":  {6, 2, ts, false},
				"nvidia.com/mig-2g.10gb": {8, 2, ts, false},
				"nvidia.com/mig-3g.20gb": {2, 3, ts, false},
			}},
		// a100-80gb-mixed: GPU 0 holds 3g.40gb, 2g.20gb, 1g.10gb and
		// 1g.10gb+me (nvidia.com/mig-1g.10gb.me); GPU 1 is whole. None of
		// its profiles is shared by this config.
		{file: "mixed.yaml", node: "a100-80gb-mixed",
			want: map[string]advertised{
				"nvidia.com/gpu":            {1, 8, ts, false},
				"nvidia.com/mig-3g.40gb":    {1, 1, none, false},
				"nvidia.com/mig-2g.20gb":    {1, 1, none, false},
				"nvidia.com/mig-1g.10gb":    {1, 1, none, false},
				"nvidia.com/mig-1g.10gb.me": {1, 1, none, false},
			}},
		{file: "single.yaml", node: "dgx-h100",
			want: map[string]advertised{"nvidia.com/gpu": {8, 4, ts, false}}},
		{file: "configmap.yaml", def: "b", node: "l40s-pcie", labels: map[string]string{nvidiaconfig.NodeLabel: "a"},
			want: map[string]advertised{"nvidia.com/gpu": {4, 4, ts, false}}},
		{file: "configmap.yaml", def: "b", node: "l40s-pcie", labels: map[string]string{nvidiaconfig.NodeLabel: "b"},
			want: map[string]advertised{"nvidia.com/gpu": {4, 2, ts, false}}},
		{file: "configmap.yaml", def: "b", node: "l40s-pcie",
			want: map[string]advertised{"nvidia.com/gpu": {4, 2, ts, false}}},
		// Without a default, unlabelled nodes get NVIDIA's built-in
		// defaults: every GPU, unshared.
		{file: "configmap.yaml", node: "l40s-pcie",
			want:    map[string]advertised{"nvidia.com/gpu": {4, 1, none, false}},
			warning: []string{"no default config: nodes without the nvidia.com/device-plugin.config label get NVIDIA's built-in defaults"}},
		{file: "configmap.yaml", node: "l40s-pcie", labels: map[string]string{nvidiaconfig.NodeLabel: "a"},
			want:    map[string]advertised{"nvidia.com/gpu": {4, 4, ts, false}},
			warning: []string{"no default config"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s/default=%s/%v", tt.file, tt.node, tt.def, tt.labels), func(t *testing.T) {
			path := filepath.Join("testdata", tt.file)
			cfgs, err := nvidiaconfig.ReadFiles([]string{path})
			if err != nil {
				t.Fatal(err)
			}
			res, err := nvidiaconfig.Convert(cfgs, nvidiaconfig.Options{Default: tt.def})
			if err != nil {
				t.Fatal(err)
			}
			rs, err := rules.Parse("converted.yaml", res.Rules)
			if err != nil {
				t.Fatalf("the converted rules do not load: %v\n%s", err, res.Rules)
			}
			if w := rs.Warnings(); len(w) > 0 {
				t.Errorf("the converted rules have warnings: %q\n%s", w, res.Rules)
			}
			got := advertisedBy(t, rs, fakeInventory(t, tt.node), tt.labels)
			if len(got) != len(tt.want) {
				t.Errorf("advertised %v, want %v\n%s", got, tt.want, res.Rules)
			}
			for name, w := range tt.want {
				if got[name] != w {
					t.Errorf("%s: advertised %v, want %v\n%s", name, got[name], w, res.Rules)
				}
			}
			var settings []string
			for _, st := range res.Settings {
				settings = append(settings, st.String())
			}
			if !slices.Equal(settings, tt.settings) {
				t.Errorf("settings %q, want %q", settings, tt.settings)
			}
			if len(res.Warnings) != len(tt.warning) {
				t.Errorf("warnings:\n%s\nwant %d containing %q", strings.Join(res.Warnings, "\n"), len(tt.warning), tt.warning)
			}
			for _, want := range tt.warning {
				found := false
				for _, w := range res.Warnings {
					found = found || strings.Contains(w, want)
				}
				if !found {
					t.Errorf("no warning contains %q; warnings:\n%s", want, strings.Join(res.Warnings, "\n"))
				}
			}
		})
	}
}

// Run --rules reads an NVIDIA config as is: rules.Parse converts it, and
// the conversion's warnings are the rule set's.
func TestParseReadsNVIDIAConfig(t *testing.T) {
	data := []byte("version: v1\nflags:\n  migStrategy: none\n  gdsEnabled: true\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 3\n")
	rs, err := rules.Parse("nvidia.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rs.Warnings(), "nvidia.yaml: flags.gdsEnabled: no equivalent in the rules: GPUDirect Storage is not supported"; len(got) != 1 || !strings.HasPrefix(got[0], want) {
		t.Errorf("warnings %q, want one starting %q", got, want)
	}
	got := advertisedBy(t, rs, fakeInventory(t, "l40s-pcie"), nil)
	if want := (advertised{4, 3, plan.SharingTimeSlicing, false}); len(got) != 1 || got["nvidia.com/gpu"] != want {
		t.Errorf("advertised %v, want nvidia.com/gpu: %v", got, want)
	}
}

// The rules file names, for every rule, the file, config and field it
// comes from.
func TestConvertCommentsPointAtOrigin(t *testing.T) {
	cfgs, err := nvidiaconfig.ReadFiles([]string{filepath.Join("testdata", "configmap.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	res, err := nvidiaconfig.Convert(cfgs, nvidiaconfig.Options{Default: "b"})
	if err != nil {
		t.Fatal(err)
	}
	text := string(res.Rules)
	for _, want := range []string{
		`# From testdata/configmap.yaml, config "a" (ConfigMap nvidia-plugin-configs data key "a"): flags.migStrategy none.`,
		"# For nodes labelled nvidia.com/device-plugin.config=a.",
		"#   shared by sharing.timeSlicing.resources[0] (name nvidia.com/gpu, replicas 4)",
		"- name: a-gpu",
		"- {key: nvidia.com/device-plugin.config, operator: In, values: [a]}",
		"# The default config: for nodes without the nvidia.com/device-plugin.config label, or labelled b.",
		"- {key: nvidia.com/device-plugin.config, operator: NotIn, values: [a]}",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("rules lack %q:\n%s", want, text)
		}
	}
}

// Bad configs fail with errors naming the file, config, field and value.
func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name, config, data string
		want               []string
	}{
		{"replicas zero", "a", "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 0\n",
			[]string{`f.yaml: config "a": sharing.timeSlicing.resources[0].replicas: must be at least 1 (have 0)`}},
		{"replicas missing", "", "sharing:\n  mps:\n    resources:\n    - name: nvidia.com/gpu\n",
			[]string{`f.yaml: sharing.mps.resources[0].replicas: required`}},
		{"replicas text", "", "sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: four\n",
			[]string{`sharing.timeSlicing.resources[0].replicas: must be an integer (have "four")`}},
		{"replicas over the cap", "", "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 16384\n",
			[]string{`f.yaml: sharing.timeSlicing.resources[0].replicas: must be at most 1024 (plan.MaxReplicas) (have 16384)`}},
		{"a rules file", "rules.yaml", "apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules: []\n",
			[]string{`f.yaml: config "rules.yaml": apiVersion: not an NVIDIA device-plugin config (those have no apiVersion; a featureplug rules file is read as it is) (have "featureplug.io/v1alpha1")`}},
		{"bad strategy", "", "version: v1\nflags:\n  migStrategy: mixd\n", []string{`f.yaml: flags.migStrategy: must be "none", "single" or "mixed" (have "mixd")`}},
		{"bad version", "", "version: v2\n", []string{`f.yaml: version: unknown version: only v1 is known (to NVIDIA's plugin too) (have "v2")`}},
		{"bad devices", "", "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n      devices: some\n",
			[]string{`sharing.timeSlicing.resources[0].devices: the only string allowed is "all" (have "some")`}},
		{"bad name", "", "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/GPU\n      replicas: 2\n",
			[]string{`sharing.timeSlicing.resources[0].name: must be a lowercase DNS subdomain after the domain, e.g. nvidia.com/gpu (have "nvidia.com/GPU")`}},
		{"no resources", "", "sharing:\n  timeSlicing:\n    renameByDefault: true\n",
			[]string{`sharing.timeSlicing.resources: no resources specified`}},
		{"two errors", "", "flags:\n  migStrategy: 3\nsharing:\n  timeSlicing:\n    renameByDefault: yes please\n    resources: []\n",
			[]string{`flags.migStrategy: must be a string (have 3)`, `sharing.timeSlicing.renameByDefault: must be true or false (have "yes please")`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := nvidiaconfig.ParseConfig("f.yaml", tt.config, "", []byte(tt.data))
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			var e *nvidiaconfig.Error
			if !errors.As(err, &e) {
				t.Errorf("error %v is not an *Error", err)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error:\n%v\nlacks %q", err, want)
				}
			}
		})
	}
}

// Conversion errors: MPS on MIG devices, a name shared twice.
func TestConvertErrors(t *testing.T) {
	tests := []struct{ name, data, want string }{
		{"mps mig", "flags:\n  migStrategy: mixed\nsharing:\n  mps:\n    resources:\n    - name: nvidia.com/mig-1g.5gb\n      replicas: 2\n",
			`f.yaml: sharing.mps.resources[0].name: MPS cannot share MIG devices (NVIDIA's plugin refuses it too); share them with sharing.timeSlicing (have "nvidia.com/mig-1g.5gb")`},
		{"twice", "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n    - name: gpu\n      replicas: 3\n",
			`f.yaml: sharing.timeSlicing.resources[1].name: already shared by sharing.timeSlicing.resources[0] (have "nvidia.com/gpu")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := nvidiaconfig.ParseConfig("f.yaml", "", "", []byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			_, err = nvidiaconfig.Convert([]*nvidiaconfig.Config{cfg}, nvidiaconfig.Options{})
			if err == nil || err.Error() != tt.want {
				t.Errorf("error %v, want %s", err, tt.want)
			}
		})
	}
}

// Warnings for what has no effect: timeSlicing beside mps, a MIG resource
// shared under migStrategy none, a rename by a misplaced flag, unknown
// fields.
func TestConvertWarnings(t *testing.T) {
	data := "flags:\n  renameByDefault: true\n  fooBar: 1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/mig-1g.5gb\n      replicas: 2\n    - name: gpu-big\n      replicas: 2\n"
	cfg, err := nvidiaconfig.ParseConfig("f.yaml", "", "", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	res, err := nvidiaconfig.Convert([]*nvidiaconfig.Config{cfg}, nvidiaconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`f.yaml: flags.fooBar: unknown field, ignored (NVIDIA's plugin ignores it too)`,
		`f.yaml: flags.renameByDefault: ignored: NVIDIA's plugin reads it only under sharing.timeSlicing or sharing.mps, so it has no effect here either (have true)`,
		`f.yaml: sharing.timeSlicing.resources[0].name: no effect: with migStrategy none no device is advertised under that name (MIG devices are not advertised) (have "nvidia.com/mig-1g.5gb")`,
		`f.yaml: sharing.timeSlicing.resources[1].name: no effect: NVIDIA's plugin advertises only nvidia.com/gpu and nvidia.com/mig-<profile>, so nothing is shared under that name (have "nvidia.com/gpu-big")`,
	}
	if got := strings.Join(res.Warnings, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("warnings:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// Whatever a config holds, parsing never panics and a config that
// converts gives rules that load without errors.
func FuzzConvert(f *testing.F) {
	entries, err := os.ReadDir("testdata")
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join("testdata", e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("flags: {migStrategy: single}\nsharing: {mps: {resources: [{name: gpu, replicas: 3, devices: 2}]}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfgs, err := nvidiaconfig.ParseFile("f.yaml", "", data)
		if err != nil {
			return
		}
		res, err := nvidiaconfig.Convert(cfgs, nvidiaconfig.Options{})
		if err != nil {
			return
		}
		if _, err := rules.Parse("converted.yaml", res.Rules); err != nil {
			t.Fatalf("converted rules do not load: %v\n%s", err, res.Rules)
		}
	})
}
