package rules

import (
	"fmt"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery"
)

// benchRules writes n rules, alternately for whole GPUs and MIG devices,
// that match nothing on benchNode but the last two, which claim every
// device: the worst case, where each device is tried against every rule
// and every miss is explained.
func benchRules(n int) string { return benchRulesOn(n, "profile") }

// benchRulesOn writes the rules of benchRules with the MIG rules matching on
// the given nvidia.mig attribute.
func benchRulesOn(n int, migKey string) string {
	var b strings.Builder
	b.WriteString("apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n")
	for i := range n - 2 {
		if i%2 == 0 {
			fmt.Fprintf(&b, `- name: gpu-%d
  devices: gpu
  matchFeatures:
  - feature: nvidia.gpu
    matchExpressions:
      product: {op: InRegexp, value: ["^NVIDIA H%d"]}
      memory: {op: Ge, value: ["%d"]}
  - feature: nvidia.driver
    matchExpressions:
      version: {op: Ge, value: ["535"], type: version}
  resource: example.com/gpu-%d
`, i, i, 1000*i, i)
			continue
		}
		fmt.Fprintf(&b, `- name: mig-%d
  devices: mig
  matchFeatures:
  - feature: nvidia.driver
    matchExpressions:
      version: {op: Ge, value: ["535"], type: version}
  - feature: nvidia.mig
    matchExpressions:
      %s: {op: In, value: ["%dg.%dgb"]}
      parent.product: {op: InRegexp, value: ["A100"]}
  resource: example.com/mig-%d
`, i, migKey, 2+i%6, i, i)
	}
	b.WriteString(`- name: mig
  devices: mig
  resource: 'nvidia.com/mig-{{ .profile | replace "+" "." }}'
- name: gpu
  devices: gpu
  resource: nvidia.com/gpu
`)
	return b.String()
}

// benchNode is an 8-GPU A100 node with 7 MIG devices on every GPU.
func benchNode() *discovery.Inventory {
	gpus := make([]discovery.GPU, 8)
	for i := range gpus {
		gpus[i] = withMIG(testGPU(i, "NVIDIA A100-SXM4-80GB"), "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb")
	}
	return testInventory(gpus...)
}

// BenchmarkPlan plans 100 rules over 8 GPUs with 7 MIG devices each. Goal:
// under 5 ms per plan on a 2-core machine.
func BenchmarkPlan(b *testing.B) {
	rs, err := Parse("bench.yaml", []byte(benchRules(100)))
	if err != nil {
		b.Fatal(err)
	}
	inv := benchNode()
	b.ReportAllocs()
	for b.Loop() {
		p, err := rs.Plan(inv, nil)
		if err != nil {
			b.Fatal(err)
		}
		if len(p.Resources) != 1 || len(p.Resources[0].Devices) != 56 {
			b.Fatalf("plan has %d resources, want 1 with 56 devices", len(p.Resources))
		}
	}
}

// BenchmarkPlanDistinctInputs is BenchmarkPlan with MIG rules that match
// on each device's UUID, so that no two devices share an evaluation: the
// worst case for the planner's memoization.
func BenchmarkPlanDistinctInputs(b *testing.B) {
	rs, err := Parse("bench.yaml", []byte(benchRulesOn(100, "uuid")))
	if err != nil {
		b.Fatal(err)
	}
	inv := benchNode()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rs.Plan(inv, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParse loads the 100-rule file.
func BenchmarkParse(b *testing.B) {
	data := []byte(benchRules(100))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("bench.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}
