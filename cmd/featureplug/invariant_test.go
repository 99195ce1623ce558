package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/featureplug/featureplug/discovery"
	"github.com/featureplug/featureplug/plugin/deviceplugin"
	"github.com/featureplug/featureplug/rules"
	"github.com/featureplug/featureplug/rules/catalog"
	"github.com/featureplug/featureplug/rules/plan"
)

// The check/run invariant: whatever `featureplug rules check` accepts, the
// planner accepts on every bundled fake node without panic, and the plugin
// manager accepts the plan, with every plan within the caps on device IDs
// (which bound the memory the device plugins allocate). The generator
// writes random rules files over the feature names featureplug publishes,
// with templates that are valid on some devices and not on others, every
// sharing strategy with replicas from negative to huge, and node
// selectors.

// invariantFeatures are real feature names and attributes, with values
// that match some devices of the fake nodes.
var invariantFeatures = []struct {
	feature, attr string
	values        []string
}{
	{discovery.FeatureGPU, discovery.AttrProduct, []string{"A100", "H100", "H200", "L4", "B200", "^NVIDIA"}},
	{discovery.FeatureGPU, discovery.AttrMemory, []string{"40960", "81920", "1000"}},
	{discovery.FeatureGPU, discovery.AttrFamily, []string{"ampere", "hopper", "ada-lovelace"}},
	{discovery.FeatureGPU, discovery.AttrMIGCapable, []string{"true", "false"}},
	{discovery.FeatureMIG, discovery.AttrProfile, []string{"1g.10gb", "1g.10gb+me", "3g.40gb", "+me", "7g"}},
	{discovery.FeatureMIG, discovery.AttrSlicesGI, []string{"1", "3", "7"}},
	{discovery.FeatureDriver, discovery.AttrDriverVersion, []string{"550", "570.86.15"}},
}

// invariantResources are resource fields: literal names and templates,
// some invalid on some devices (+me profiles, product names with spaces).
var invariantResources = []string{
	"nvidia.com/gpu",
	"example.com/shared",
	"nvidia.com/mig-{{ .profile }}",
	`nvidia.com/mig-{{ .profile | replace "+" "." }}`,
	"example.com/{{ .product }}",
	"example.com/{{ .product | resourceName }}",
	`example.com/{{ .parent_product | trimPrefix "NVIDIA " | resourceName }}-{{ .profile | resourceName }}`,
	"{{ .family }}.kubernetes.io/gpu",
	"example.com/{{ .family }}-{{ .memory }}",
	`example.com/{{ if eq .mig_capable "true" }}mig{{ else }}whole{{ end }}`,
	"example.com/{{ .no_such_attribute }}",
}

// invariantReplicas are replicas values, from invalid to huge.
var invariantReplicas = []string{"-5", "0", "1", "2", "7", "48", "1024", "1025", "100000", "1000000000", fmt.Sprint(math.MaxInt32), "9223372036854775807"}

// genRules writes a random rules file.
func genRules(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString("apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n")
	n := r.IntN(5)
	for i := range n {
		fmt.Fprintf(&b, "- name: r%d\n", i)
		devices := "gpu"
		if r.IntN(2) == 0 {
			devices = "mig"
		}
		fmt.Fprintf(&b, "  devices: %s\n", devices)
		if r.IntN(4) == 0 {
			fmt.Fprintf(&b, "  nodeSelector:\n    matchLabels: {pool: p%d}\n", r.IntN(2))
		}
		if k := r.IntN(3); k > 0 {
			b.WriteString("  matchFeatures:\n")
			for range k {
				f := invariantFeatures[r.IntN(len(invariantFeatures))]
				v := f.values[r.IntN(len(f.values))]
				op := []string{"In", "InRegexp", "Exists", "NotIn"}[r.IntN(4)]
				if op == "Exists" {
					fmt.Fprintf(&b, "  - feature: %s\n    matchExpressions:\n      %s: {op: Exists}\n", f.feature, f.attr)
					continue
				}
				fmt.Fprintf(&b, "  - feature: %s\n    matchExpressions:\n      %s: {op: %s, value: [%q]}\n", f.feature, f.attr, op, v)
			}
		}
		fmt.Fprintf(&b, "  resource: '%s'\n", invariantResources[r.IntN(len(invariantResources))])
		switch r.IntN(4) {
		case 0:
		case 1:
			fmt.Fprintf(&b, "  sharing: {strategy: time-slicing, replicas: %s}\n", invariantReplicas[r.IntN(len(invariantReplicas))])
		case 2:
			fmt.Fprintf(&b, "  sharing: {strategy: mps, replicas: %s}\n", invariantReplicas[r.IntN(len(invariantReplicas))])
		case 3:
			fmt.Fprintf(&b, "  sharing: {strategy: none, replicas: %s}\n", invariantReplicas[r.IntN(len(invariantReplicas))])
		}
	}
	return b.String()
}

// invariantNodes holds the catalog's nodes, built once per test binary.
var invariantNodes = sync.OnceValues(catalog.Nodes)

// checkInvariant checks the invariant on one rules file; it returns
// whether `rules check` accepted the file.
func checkInvariant(t *testing.T, file string) bool {
	t.Helper()
	nodes, err := invariantNodes()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := rules.Parse("gen.yaml", []byte(file))
	if err != nil {
		return false
	}
	if err := rs.CheckNodes(nodes); err != nil {
		return false
	}
	for _, n := range nodes {
		if n.Synthetic {
			continue
		}
		for _, labels := range []map[string]string{nil, {"pool": "p0"}, {"pool": "p1"}} {
			p, err := rs.Plan(n.Inventory, labels)
			if err != nil {
				// Refused (the last good plan keeps serving): allowed, as
				// long as it is not a crash.
				continue
			}
			if err := plan.ValidatePlan(p); err != nil {
				t.Fatalf("on %s with labels %v, the planner made a plan ValidatePlan refuses: %v\n%s", n.Name, labels, err, file)
			}
			total := 0
			for i := range p.Resources {
				total += p.Resources[i].AdvertisedDevices()
			}
			if total > plan.MaxDevicesPerNode {
				t.Fatalf("on %s: %d device IDs, over the cap of %d\n%s", n.Name, total, plan.MaxDevicesPerNode, file)
			}
			m, err := deviceplugin.NewManager(deviceplugin.Options{KubeletDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Apply(p); err != nil {
				t.Fatalf("on %s with labels %v, the plugin manager refuses a plan of accepted rules: %v\n%s", n.Name, labels, err, file)
			}
		}
	}
	return true
}

// TestCheckRunInvariant runs the invariant on a bounded number of random
// rules files, and checks that the generator makes files check accepts
// often enough for the test to mean something.
func TestCheckRunInvariant(t *testing.T) {
	iterations := 300
	if testing.Short() {
		iterations = 50
	}
	r := rand.New(rand.NewPCG(12, 2026))
	accepted := 0
	for range iterations {
		if checkInvariant(t, genRules(r)) {
			accepted++
		}
	}
	t.Logf("%d of %d generated files accepted by rules check", accepted, iterations)
	if accepted < iterations/10 {
		t.Errorf("only %d of %d generated files were accepted: the generator tests too little", accepted, iterations)
	}
}

// TestCheckRejectsWhatRunWouldRefuse checks the classic examples on the
// generator's terms: huge replicas and invalid names are refused by
// check.
func TestCheckRejectsWhatRunWouldRefuse(t *testing.T) {
	for _, file := range []string{
		"apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n- name: a\n  devices: gpu\n  resource: example.com/a\n  sharing: {strategy: time-slicing, replicas: 1000000000}\n",
		"apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n- name: a\n  devices: mig\n  resource: 'nvidia.com/mig-{{ .profile }}'\n",
		"apiVersion: featureplug.io/v1alpha1\nkind: ResourceRules\nrules:\n- name: a\n  devices: gpu\n  resource: 'example.com/{{ .product }}'\n",
	} {
		if checkInvariant(t, file) {
			t.Errorf("rules check accepted:\n%s", file)
		}
	}
}

// FuzzCheckRunInvariant runs the invariant on files generated from fuzzed
// seeds.
func FuzzCheckRunInvariant(f *testing.F) {
	for _, s := range []uint64{1, 2, 3, 42} {
		f.Add(s, s*7)
	}
	f.Fuzz(func(t *testing.T, a, b uint64) {
		checkInvariant(t, genRules(rand.New(rand.NewPCG(a, b))))
	})
}
