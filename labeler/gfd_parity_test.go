package labeler

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/discovery/fakenode"
	"github.com/featureplug/featureplug/rules"
)

// GFD parity: the labels of bundled fake nodes under rules
// equivalent to an NVIDIA configuration, checked against expectations
// written out by hand here, not regenerated. "GFD" below is NVIDIA's
// gpu-feature-discovery v0.20 (github.com/NVIDIA/k8s-device-plugin); each
// group of labels says where its names, values and presence come from:
//
//   - [out]  tests/expected-output-mig-{none,single,mixed}.txt: the label
//     names GFD writes per strategy (mig.strategy only under single and
//     mixed; gpu.replicas, gpu.sharing-strategy, gpu.mode, gpu.machine
//     always);
//   - [doc]  docs/gpu-feature-discovery/README.md, "Generated Labels" and
//     the MIG 'single'/'mixed' tables (value formats, e.g. gpu.clique
//     "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1");
//   - [ver]  internal/lm/nvml.go newVersionLabeler: cuda.driver-version.*,
//     cuda.runtime-version.* and the deprecated cuda.driver.*,
//     cuda.runtime.* GFD still writes;
//   - [res]  internal/lm/resource.go: product = words joined by '-',
//     -SHARED only when shared and not renamed; replicas 0 for GPUs
//     labelled without sharing (MIG-enabled), else the configured
//     replicas or 1; sharing-strategy none unless replicas > 1;
//   - [mig]  internal/lm/mig-strategy.go: MIG-enabled and full GPUs of one
//     model are counted together; single refuses a node with an empty
//     MIG GPU, MIG beside full GPUs, or several profiles: product
//     <model>-MIG-INVALID, count, replicas and memory 0;
//   - [name] internal/resource/nvml-mig-device.go GetName: '+' in a MIG
//     profile becomes '.' (1g.10gb+me is ...-MIG-1g.10gb.me);
//   - [mode] internal/lm/nvml.go newGPUModeLabeler: PCI class 0x0302
//     compute, 0x0300 graphics, unknown otherwise or when GPUs differ;
//   - [imex] internal/lm/imex.go: gpu.clique = <cluster UUID>.<clique ID>
//     of the fabric-attached GPUs, absent when none or not unique;
//   - [dmi]  internal/lm/machine-type.go: gpu.machine is the DMI product
//     name with spaces as '-', unknown when it cannot be read;
//   - [cat]  /work/shared/gpu-catalog.md (the fake nodes' products): MIG
//     memory, SMs, slices and engines.
//
// Where featureplug differs on purpose it says so: nvidia.com/gpu.present
// is featureplug's (GFD's own DaemonSet selects on it; NFD or the GPU
// Operator set it), and gfd.timestamp is opt-in (GFD writes it unless
// --no-timestamp; featureplug writes only on change).

// labelGroup is a hand-written set of expected labels.
type labelGroup map[string]string

// with merges groups; later groups win, as GFD's Merge does.
func with(groups ...labelGroup) labelGroup {
	out := labelGroup{}
	for _, g := range groups {
		maps.Copy(out, g)
	}
	return out
}

var (
	// [ver] for driver 570.86.15, CUDA 12.8 (most fake nodes).
	gfdVersions570 = labelGroup{
		"nvidia.com/cuda.driver.major": "570", "nvidia.com/cuda.driver.minor": "86", "nvidia.com/cuda.driver.rev": "15",
		"nvidia.com/cuda.runtime.major": "12", "nvidia.com/cuda.runtime.minor": "8",
		"nvidia.com/cuda.driver-version.major": "570", "nvidia.com/cuda.driver-version.minor": "86",
		"nvidia.com/cuda.driver-version.revision": "15", "nvidia.com/cuda.driver-version.full": "570.86.15",
		"nvidia.com/cuda.runtime-version.major": "12", "nvidia.com/cuda.runtime-version.minor": "8",
		"nvidia.com/cuda.runtime-version.full": "12.8",
	}
	// [ver] for driver 550.127.05, CUDA 12.4 (a100-80gb-mixed).
	gfdVersions550 = labelGroup{
		"nvidia.com/cuda.driver.major": "550", "nvidia.com/cuda.driver.minor": "127", "nvidia.com/cuda.driver.rev": "05",
		"nvidia.com/cuda.runtime.major": "12", "nvidia.com/cuda.runtime.minor": "4",
		"nvidia.com/cuda.driver-version.major": "550", "nvidia.com/cuda.driver-version.minor": "127",
		"nvidia.com/cuda.driver-version.revision": "05", "nvidia.com/cuda.driver-version.full": "550.127.05",
		"nvidia.com/cuda.runtime-version.major": "12", "nvidia.com/cuda.runtime-version.minor": "4",
		"nvidia.com/cuda.runtime-version.full": "12.4",
	}
	// [out] [mode] [dmi]: present on every GPU node; the fake node has no
	// DMI file and reports 3D-controller GPUs. gpu.present: featureplug's.
	gfdNode = labelGroup{
		"nvidia.com/gpu.present": "true",
		"nvidia.com/gpu.machine": "unknown",
		"nvidia.com/gpu.mode":    "compute",
		"nvidia.com/mps.capable": "false",
	}
	// [res] [out]: unshared whole GPUs.
	gfdUnshared = labelGroup{"nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none"}

	// The node model of dgx-h100: 8x "NVIDIA H100 80GB HBM3", 81559 MiB,
	// compute capability 9.0 (hopper), MIG capable.
	gfdH100 = labelGroup{
		"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559",
		"nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0",
		"nvidia.com/mig.capable": "true",
	}
	// a100-80gb-mixed: GPU 0 in MIG mode, GPU 1 whole, both
	// "NVIDIA A100-SXM4-80GB" (81920 MiB, 8.0): [mig] counts both.
	gfdA10080 = labelGroup{
		"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "81920",
		"nvidia.com/gpu.family": "ampere", "nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "0",
		"nvidia.com/mig.capable": "true",
	}
)

// gfdMIG is the [mig] [doc] label set of one MIG type under mixed
// (prefix nvidia.com/mig-<profile>) or single (prefix nvidia.com/gpu), with
// [cat] figures.
func gfdMIG(prefix, product string, count, memory, sms, slices, copyEngines, dec, jpeg, ofa int) labelGroup {
	n := func(v int) string { return itoa(v) }
	return labelGroup{
		prefix + ".product": product, prefix + ".count": n(count), prefix + ".replicas": "1",
		prefix + ".sharing-strategy": "none", prefix + ".memory": n(memory), prefix + ".multiprocessors": n(sms),
		prefix + ".slices.gi": n(slices), prefix + ".slices.ci": n(slices), prefix + ".engines.copy": n(copyEngines),
		prefix + ".engines.decoder": n(dec), prefix + ".engines.encoder": "0", prefix + ".engines.jpeg": n(jpeg),
		prefix + ".engines.ofa": n(ofa),
	}
}

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

// Rules equivalent to NVIDIA configurations (what `featureplug rules
// import` writes for them).
const (
	// sharing.timeSlicing.renameByDefault: true, resources [{name:
	// nvidia.com/gpu, replicas: 4}]: served as nvidia.com/gpu.shared.
	rulesRenameByDefault = `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: gpu
  devices: gpu
  resource: nvidia.com/gpu.shared
  sharing: {strategy: time-slicing, replicas: 4}
`
	// The same without renameByDefault.
	rulesTimeSlicing = `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: gpu
  devices: gpu
  resource: nvidia.com/gpu
  sharing: {strategy: time-slicing, replicas: 4}
`
)

// uniformA100 is a node the single strategy accepts: two A100-SXM4-40GB,
// each split into seven 1g.5gb.
const uniformA100 = `name: uniform-a100
driverVersion: "570.86.15"
cudaVersion: "12.8"
gpus:
  - product: A100-SXM4-40GB
    count: 2
    mig:
      - profile: 1g.5gb
        count: 7
`

func TestGFDLabelParity(t *testing.T) {
	tests := []struct {
		name  string
		node  string // bundled name, or YAML
		rules string // builtin name, or YAML
		opts  LabelOptions
		want  labelGroup
	}{
		{
			// [out] mig-none: no mig.strategy label.
			name: "dgx-h100 none", node: "dgx-h100", rules: "none",
			want: with(gfdVersions570, gfdNode, gfdH100, gfdUnshared),
		},
		{
			// The configured strategy, even without MIG devices (GFD says
			// mixed, not none).
			name: "dgx-h100 mixed", node: "dgx-h100", rules: "mixed",
			want: with(gfdVersions570, gfdNode, gfdH100, gfdUnshared, labelGroup{"nvidia.com/mig.strategy": "mixed"}),
		},
		{
			// [res] renamed: replicas and strategy of the config, product
			// without -SHARED; nothing under the new name.
			name: "dgx-h100 renameByDefault", node: "dgx-h100", rules: rulesRenameByDefault,
			want: with(gfdVersions570, gfdNode, gfdH100,
				labelGroup{"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}),
		},
		{
			// [res] shared under nvidia.com/gpu: -SHARED.
			name: "dgx-h100 time-slicing", node: "dgx-h100", rules: rulesTimeSlicing,
			want: with(gfdVersions570, gfdNode, gfdH100, labelGroup{
				"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED", "nvidia.com/gpu.replicas": "4",
				"nvidia.com/gpu.sharing-strategy": "time-slicing"}),
		},
		{
			// [dmi] machine with spaces as '-'.
			name: "dgx-h100 machine", node: "dgx-h100", rules: "none", opts: LabelOptions{Machine: "DGX H100"},
			want: with(gfdVersions570, gfdNode, gfdH100, gfdUnshared, labelGroup{"nvidia.com/gpu.machine": "DGX-H100"}),
		},
		{
			// Opt-in timestamp ([doc]: "Timestamp of the generated labels").
			name: "dgx-h100 timestamp", node: "dgx-h100", rules: "none", opts: LabelOptions{Timestamp: time.Unix(1555019244, 0)},
			want: with(gfdVersions570, gfdNode, gfdH100, gfdUnshared, labelGroup{"nvidia.com/gfd.timestamp": "1555019244"}),
		},
		{
			// [mig] [name] [cat]: mixed with a +me profile beside a whole GPU.
			name: "a100-80gb-mixed mixed", node: "a100-80gb-mixed", rules: "mixed",
			want: with(gfdVersions550, gfdNode, gfdA10080, gfdUnshared, labelGroup{"nvidia.com/mig.strategy": "mixed"},
				gfdMIG("nvidia.com/mig-3g.40gb", "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb", 1, 40192, 42, 3, 3, 2, 0, 0),
				gfdMIG("nvidia.com/mig-2g.20gb", "NVIDIA-A100-SXM4-80GB-MIG-2g.20gb", 1, 19968, 28, 2, 2, 1, 0, 0),
				gfdMIG("nvidia.com/mig-1g.10gb", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", 1, 9856, 14, 1, 1, 0, 0, 0),
				gfdMIG("nvidia.com/mig-1g.10gb.me", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb.me", 1, 9856, 14, 1, 1, 1, 1, 1)),
		},
		{
			// [mig] single refuses MIG beside a whole GPU; family and
			// compute capability stay.
			name: "a100-80gb-mixed single invalid", node: "a100-80gb-mixed", rules: "single",
			want: with(gfdVersions550, gfdNode, gfdA10080, labelGroup{
				"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-INVALID",
				"nvidia.com/gpu.count": "0", "nvidia.com/gpu.replicas": "0", "nvidia.com/gpu.memory": "0",
				"nvidia.com/gpu.sharing-strategy": "none"}),
		},
		{
			// [mig] single refuses several profiles (and MIG beside whole
			// GPUs) on a DGX A100 laid out as the fake's dgx-a100.
			name: "dgx-a100 single invalid", node: "dgx-a100", rules: "single",
			want: with(gfdVersions570, gfdNode, labelGroup{
				"nvidia.com/gpu.family": "ampere", "nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "0",
				"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "single",
				"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-INVALID", "nvidia.com/gpu.count": "0",
				"nvidia.com/gpu.replicas": "0", "nvidia.com/gpu.memory": "0", "nvidia.com/gpu.sharing-strategy": "none"}),
		},
		{
			// [doc] MIG 'single' table: gpu.* describe the MIG devices
			// (count 14 = 2 GPUs x 7); [cat] 1g.5gb: 4864 MiB, 14 SMs,
			// one copy engine, no media engines.
			name: "uniform single", node: uniformA100, rules: "single",
			want: with(gfdVersions570, gfdNode, labelGroup{
				"nvidia.com/gpu.family": "ampere", "nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "0",
				"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "single"},
				gfdMIG("nvidia.com/gpu", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", 14, 4864, 14, 1, 1, 0, 0, 0)),
		},
		{
			// [imex] [doc]: the fabric-attached rack node's clique.
			name: "fabric clique", node: "@../discovery/testdata/fabric/gb200-rack-node.yaml", rules: "none",
			want: with(gfdVersions570, gfdNode, gfdUnshared, labelGroup{
				"nvidia.com/gpu.product": "NVIDIA-B200", "nvidia.com/gpu.count": "4", "nvidia.com/gpu.memory": "183359",
				"nvidia.com/gpu.family": "blackwell", "nvidia.com/gpu.compute.major": "10", "nvidia.com/gpu.compute.minor": "0",
				"nvidia.com/mig.capable": "true",
				"nvidia.com/gpu.clique":  "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.3"}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := gfdLabelsOf(t, tt.node, tt.rules, tt.opts)
			diffLabels(t, got, tt.want)
		})
	}
}

// TestGPUModeLabel checks [mode] through discovery: graphics, and unknown
// when the node's GPUs differ.
func TestGPUModeLabel(t *testing.T) {
	for _, tt := range []struct{ modes, want string }{
		{"[graphics, graphics]", "graphics"},
		{"[graphics, compute]", "unknown"},
		{"[compute, compute]", "compute"},
	} {
		modes := strings.Split(strings.Trim(tt.modes, "[]"), ", ")
		yaml := "name: ws\ndriverVersion: \"570.86.15\"\ncudaVersion: \"12.8\"\ngpus:\n"
		for _, m := range modes {
			yaml += "  - product: L40S\n    mode: " + m + "\n"
		}
		got := gfdLabelsOf(t, yaml, "none", LabelOptions{})
		if got[LabelGPUMode] != tt.want {
			t.Errorf("GPUs %s: gpu.mode=%q, want %q", tt.modes, got[LabelGPUMode], tt.want)
		}
	}
}

// TestNotAdvertisedNoReplicas: whole GPUs no rule serves get no
// gpu.replicas (nor gpu.sharing-strategy), rather than GFD's 0 for GPUs
// in MIG mode.
func TestNotAdvertisedNoReplicas(t *testing.T) {
	const migOnly = `apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: mig
  devices: mig
  resource: 'nvidia.com/mig-{{ .profile | replace "+" "." }}'
`
	got := gfdLabelsOf(t, "dgx-h100", migOnly, LabelOptions{})
	for _, k := range []string{"nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy"} {
		if v, ok := got[k]; ok {
			t.Errorf("%s=%s published, though no rule serves the GPUs", k, v)
		}
	}
	if got[LabelMIGStrategy] != MIGStrategyMixed || got["nvidia.com/gpu.count"] != "8" {
		t.Errorf("want the node model and mig.strategy=mixed still: %v", got)
	}
}

// gfdLabelsOf discovers a fake node (a bundled name, "@path" or YAML),
// plans it with rules (a builtin name or YAML) and returns its labels.
func gfdLabelsOf(t *testing.T, node, rulesText string, opts LabelOptions) map[string]string {
	t.Helper()
	var n *fakenode.Node
	var err error
	switch {
	case strings.HasPrefix(node, "@"):
		n, err = fakenode.Load(node[1:])
	case strings.Contains(node, "\n"):
		n, err = fakenode.Parse("inline", []byte(node))
	default:
		n, err = fakenode.Named(node)
	}
	if err != nil {
		t.Fatal(err)
	}
	inv, err := discovery.Discover(n.NVML())
	if err != nil {
		t.Fatal(err)
	}
	var rs *rules.RuleSet
	if strings.Contains(rulesText, "\n") {
		rs, err = rules.Parse("inline.yaml", []byte(rulesText))
	} else {
		rs, err = rules.Load(rulesText)
	}
	if err != nil {
		t.Fatal(err)
	}
	p, err := rs.Plan(inv, nil)
	if err != nil {
		t.Fatal(err)
	}
	return Labels(inv, p, opts)
}

// diffLabels reports every label missing, extra or different.
func diffLabels(t *testing.T, got map[string]string, want labelGroup) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok {
			t.Errorf("missing %s=%s", k, want[k])
		} else if g != want[k] {
			t.Errorf("%s=%s, want %s", k, g, want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("extra %s=%s", k, got[k])
		}
	}
}
