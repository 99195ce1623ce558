package rules_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/plan"
)

// exampleNode has two A100 40GB GPUs: GPU 0 whole, GPU 1 split into three
// MIG devices.
func exampleNode() *discovery.Inventory {
	gpu := func(i int) discovery.GPU {
		return discovery.GPU{
			Index: i, UUID: fmt.Sprintf("GPU-%d", i), Product: "NVIDIA A100-SXM4-40GB",
			Family: "ampere", ComputeMajor: 8, MemoryMiB: 40960, MIGCapable: true, NUMANode: 0,
		}
	}
	mig := func(i int, profile string, mem uint64) discovery.MIGDevice {
		return discovery.MIGDevice{ParentIndex: 1, ParentUUID: "GPU-1", Index: i, UUID: fmt.Sprintf("MIG-1-%d", i), Profile: profile, MemoryMiB: mem}
	}
	g1 := gpu(1)
	g1.MIGEnabled = true
	g1.MIGDevices = []discovery.MIGDevice{mig(0, "3g.20gb", 20096), mig(1, "2g.10gb", 9984), mig(2, "1g.5gb", 4864)}
	return &discovery.Inventory{DriverVersion: "570.86.15", CUDADriverVersion: "12.8", GPUs: []discovery.GPU{gpu(0), g1}}
}

// printPlan prints each resource with the indexes of its devices.
func printPlan(p *plan.Plan) {
	for _, r := range p.Resources {
		var idx []string
		for _, d := range r.Devices {
			idx = append(idx, d.Index)
		}
		fmt.Printf("%s: %s (%s)\n", r.Name, strings.Join(idx, " "), r.Sharing)
	}
}

// The builtin "none" rules, featureplug's default, advertise whole GPUs as
// nvidia.com/gpu, like NVIDIA's device plugin with migStrategy none. GPU 1
// has MIG enabled, so it is not advertised, and neither are its MIG devices.
func ExampleLoad_none() {
	rs, err := rules.Load("none")
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := rs.Plan(exampleNode(), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	printPlan(p)
	// Output:
	// nvidia.com/gpu: 0 (none)
}

// The builtin "single" rules advertise whole GPUs and MIG devices alike as
// nvidia.com/gpu, like migStrategy single, on nodes where that is safe: all
// whole GPUs, or all GPUs split into MIG devices of one profile. The
// example node has a whole GPU beside MIG devices of three profiles, so,
// as NVIDIA's device plugin does, nvidia.com/gpu advertises no device.
func ExampleLoad_single() {
	rs, err := rules.Load("single")
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := rs.Plan(exampleNode(), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	printPlan(p)
	fmt.Println(p.MIGStrategy, "refused:", p.SingleInvalid)
	// Output:
	// nvidia.com/gpu:  (none)
	// single refused: GPUs with MIG enabled (GPU 1) beside GPUs with MIG disabled (GPU 0)
}

// The builtin "mixed" rules give every MIG profile a resource of its own,
// like migStrategy mixed.
func ExampleLoad_mixed() {
	rs, err := rules.Load("mixed")
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := rs.Plan(exampleNode(), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	printPlan(p)
	// Output:
	// nvidia.com/gpu: 0 (none)
	// nvidia.com/mig-1g.5gb: 1:2 (none)
	// nvidia.com/mig-2g.10gb: 1:1 (none)
	// nvidia.com/mig-3g.20gb: 1:0 (none)
}

// Rules choose names and sharing per model, per profile and per node pool.
// Here the small MIG devices of the "inference" pool are shared two ways,
// and every decision can be explained.
func ExampleParse() {
	rs, err := rules.Parse("rules.yaml", []byte(`
apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: small-shared
  devices: mig
  nodeSelector:
    matchLabels: {pool: inference}
  matchFeatures:
  - feature: nvidia.mig
    matchExpressions:
      memory: {op: Lt, value: ["10240"]}
  resource: example.com/small-mig
  sharing: {strategy: time-slicing, replicas: 2}
- name: by-model
  devices: gpu
  resource: 'example.com/{{ .product | trimPrefix "NVIDIA " | resourceName }}'
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := rs.Plan(exampleNode(), map[string]string{"pool": "inference"})
	if err != nil {
		fmt.Println(err)
		return
	}
	printPlan(p)
	for _, d := range p.Decisions[2:3] {
		fmt.Printf("%s: not advertised, %s: %s\n", d.Description, d.Skipped[0].Rule, d.Skipped[0].Reason)
	}
	// Output:
	// example.com/a100-sxm4-40gb: 0 (none)
	// example.com/small-mig: 1:1 1:2 (time-slicing x2)
	// GPU 1 MIG 0 (3g.20gb): not advertised, small-shared: nvidia.mig.memory: Lt 10240 did not match "20096"
}

// Parse reports every problem of a file at once, each with its line, rule
// and field.
func ExampleParse_errors() {
	_, err := rules.Parse("rules.yaml", []byte(`apiVersion: featureplug.io/v1alpha1
kind: ResourceRules
rules:
- name: shared
  devices: mig
  resource: nvidia.com/gpu shared
  sharing: {strategy: mps, replicas: 0}
`))
	fmt.Fprintln(os.Stdout, err)
	// Output:
	// rules.yaml:6: rules[0] "shared": resource: "nvidia.com/gpu shared" is not an extended resource name: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')
	// rules.yaml:7: rules[0] "shared": sharing.strategy: mps is only for devices: gpu (a MIG device is already a partition) (have "mps")
	// rules.yaml:7: rules[0] "shared": sharing.replicas: must be at least 1 (have 0)
}
